"""Fault injection into the real, moto-backed botocore clients the functions use, through botocore's events.

Nothing of dropscan is replaced: a call picked by ``when`` (on its API parameters) is answered with an
error before it reaches moto (``before-send``, so botocore's own retry handling sees it, as it would see
AWS's), gets part of its keys back as unprocessed, or takes effect and then kills the invocation
(``after-call`` raising ``InvocationKilled``, as a Lambda timeout would end it).
"""

from __future__ import annotations

import io
import itertools
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, cast

from botocore.awsrequest import AWSResponse

from dropscan.local.dispatcher import InvocationKilled

Params = dict[str, Any]
When = Callable[[Params], bool]

_ids = itertools.count()


def always(params: Params) -> bool:
    return True


def key_contains(text: str) -> When:
    return lambda params: text in str(params.get("Key", ""))


def _response(url: str, status: int, headers: dict[str, str], body: bytes) -> AWSResponse:
    return AWSResponse(url, status, cast(Any, headers), _Raw(body))


class _Raw(io.BytesIO):
    """What botocore reads an HTTP body from."""

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self.getvalue()


def s3_error(code: str, status: int) -> tuple[int, dict[str, str], bytes]:
    body = (
        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{code}</Message></Error>"
    )
    return status, {"Content-Type": "application/xml"}, body.encode()


def query_error(code: str, status: int) -> tuple[int, dict[str, str], bytes]:
    """An error of a query-protocol service (SNS, SQS's XML form)."""
    error = f"<Error><Type>Sender</Type><Code>{code}</Code><Message>injected</Message></Error>"
    body = f"<ErrorResponse>{error}</ErrorResponse>"
    return status, {"Content-Type": "text/xml"}, body.encode()


def dynamodb_error(code: str, status: int = 400) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": code})
    return status, {"Content-Type": "application/x-amz-json-1.0"}, body.encode()


@dataclass
class Faults:
    """Handlers on clients' event systems, removed on exit; ``fired`` counts each fault that struck."""

    fired: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)
    _undo: list[tuple[Any, str, Callable[..., Any]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Faults:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.clear()

    def clear(self) -> None:
        for client, event, handler in self._undo:
            client.meta.events.unregister(event, handler)
        self._undo.clear()

    def _on(self, client: Any, event: str, handler: Callable[..., Any]) -> None:
        client.meta.events.register(event, handler)
        self._undo.append((client, event, handler))

    def _take(self, name: str, times: int | None) -> bool:
        with self._lock:
            if times is not None and self.fired[name] >= times:
                return False
            self.fired[name] += 1
            return True

    def _pick(self, client: Any, operation: str, when: When) -> str:
        """Mark the calls of ``operation`` that ``when`` picks, in their request context."""
        mark = f"fault-{next(_ids)}"
        service = client.meta.service_model.service_id.hyphenize()

        def pick(params: Params, context: dict[str, Any], **_: Any) -> None:
            with self._lock:
                self.calls[mark] += 1
            if when(params):
                context[mark] = params

        self._on(client, f"before-parameter-build.{service}.{operation}", pick)
        return mark

    def count(self, client: Any, operation: str, when: When = always) -> Callable[[], int]:
        """How many calls of ``operation`` that ``when`` picks were made (from now on)."""
        mark = self._pick(client, operation, when)
        hits = Counter[str]()
        service = client.meta.service_model.service_id.hyphenize()

        def counted(context: dict[str, Any], **_: Any) -> None:
            if mark in context:
                hits[mark] += 1

        self._on(client, f"after-call.{service}.{operation}", counted)
        return lambda: hits[mark]

    def error(
        self,
        client: Any,
        operation: str,
        response: tuple[int, dict[str, str], bytes],
        *,
        times: int | None = 1,
        when: When = always,
        name: str | None = None,
    ) -> str:
        """The first ``times`` attempts (None: all) of the picked calls get ``response`` instead of moto's."""
        mark = self._pick(client, operation, when)
        name = name or mark
        service = client.meta.service_model.service_id.hyphenize()
        status, headers, body = response

        def answer(request: Any, **_: Any) -> AWSResponse | None:
            if mark not in (request.context or {}) or not self._take(name, times):
                return None
            return _response(request.url, status, headers, body)

        self._on(client, f"before-send.{service}.{operation}", answer)
        return name

    def kill_after(
        self, client: Any, operation: str, *, times: int | None = 1, when: When = always, name: str = ""
    ) -> str:
        """The picked calls take effect, then the invocation making them dies."""
        mark = self._pick(client, operation, when)
        name = name or mark
        service = client.meta.service_model.service_id.hyphenize()

        def kill(http_response: Any, context: dict[str, Any], **_: Any) -> None:
            if mark in context and http_response.status_code < 300 and self._take(name, times):
                raise InvocationKilled(f"injected: killed after {operation}")

        self._on(client, f"after-call.{service}.{operation}", kill)
        return name

    def kill_before(
        self, client: Any, operation: str, *, times: int | None = 1, when: When = always, name: str = ""
    ) -> str:
        """The invocation dies as it is about to make the picked call (which never reaches AWS)."""
        mark = self._pick(client, operation, when)
        name = name or mark
        service = client.meta.service_model.service_id.hyphenize()

        def kill(request: Any, **_: Any) -> None:
            if mark in (request.context or {}) and self._take(name, times):
                raise InvocationKilled(f"injected: killed before {operation}")

        self._on(client, f"before-send.{service}.{operation}", kill)
        return name

    def unprocessed_keys(self, client: Any, *, keep: int, times: int | None = 1, name: str = "") -> str:
        """BatchGetItem serves only the first ``keep`` keys of a call and returns the rest as unprocessed."""
        mark = f"fault-{next(_ids)}"
        name = name or mark
        held = f"{mark}-held"

        def shrink(params: Params, context: dict[str, Any], **_: Any) -> None:
            [(table, request)] = params["RequestItems"].items()
            if len(request["Keys"]) <= keep or not self._take(name, times):
                return
            context[held] = (table, request["Keys"][keep:])
            if keep:
                params["RequestItems"] = {table: {**request, "Keys": request["Keys"][:keep]}}

        def serve_nothing(context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
            # DynamoDB may process none of a call's keys; moto would reject an empty request instead
            if held not in context or keep:
                return None
            table, _keys = context[held]
            return _response("", 200, {}, b"{}"), {"Responses": {table: []}}

        def give_back(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            if held in context:
                table, rest = context[held]
                parsed["UnprocessedKeys"] = {table: {"Keys": rest}}

        self._on(client, "before-parameter-build.dynamodb.BatchGetItem", shrink)
        self._on(client, "before-call.dynamodb.BatchGetItem", serve_nothing)
        self._on(client, "after-call.dynamodb.BatchGetItem", give_back)
        return name

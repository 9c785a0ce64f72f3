"""Plays Lambda's SQS event-source mappings in-process: poll, invoke the named handler, settle the batch."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import IO, Any

from dropscan.local.deploy import REGION, DeployedStack, EventSourceMapping, FunctionSpec, Schedule
from dropscan.store.services import reset as reset_services

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class LambdaContext:
    """The attributes of Lambda's context object that handlers and Powertools read."""

    function_name: str
    memory_limit_in_mb: int
    timeout_s: int
    aws_request_id: str
    invoked_function_arn: str
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = "local"

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler(spec: FunctionSpec) -> Handler:
    """Import ``<code_dir>/<module>.py`` under a name of its own (every function's module is app.py)."""
    module_name, func = spec.handler.rsplit(".", 1)
    path = spec.code_dir / f"{module_name}.py"
    unique = f"dropscan_fn_{spec.logical_id}"
    mod: ModuleType | None = sys.modules.get(unique)
    if mod is None:
        loader = importlib.util.spec_from_file_location(unique, path)
        if loader is None or loader.loader is None:
            raise ImportError(f"cannot load {path}")
        mod = importlib.util.module_from_spec(loader)
        sys.modules[unique] = mod
        loader.loader.exec_module(mod)
    handler: Handler = getattr(mod, func)
    return handler


class InvocationKilled(BaseException):
    """Ends an invocation as Lambda's timeout or out-of-memory kill does: no response, nothing cleaned up.

    A BaseException, so that neither the batch processor nor Powertools' idempotency catch it (they do
    not get the chance on Lambda either); fault-injection tests raise it.
    """


@dataclass
class Delivery:
    function: str
    messages: int
    failed: int
    error: str | None
    seconds: float = 0.0
    scheduled: bool = False


class Dispatcher:
    """Delivers each queue's messages to its function as Lambda would, one batch at a time."""

    def __init__(
        self,
        stack: DeployedStack,
        sqs: Any,
        *,
        log_stream: IO[str] | None = None,
        schedule_every: float | None = None,
    ) -> None:
        """``schedule_every``: seconds between runs of each scheduled function (None: as its rule says)."""
        self.stack = stack
        self.sqs = sqs
        self.log_stream = log_stream
        self.history: list[Delivery] = []
        self.invoking: str | None = None  # logical id of the function running now
        os.environ.update(stack.environment())
        reset_services()
        specs = [m.function for m in stack.mappings] + [s.function for s in stack.schedules]
        self._handlers = {f.logical_id: load_handler(f) for f in specs}
        self._schedule_every = schedule_every
        start = time.monotonic()
        self._next_run = {s.rule: start + self._period(s) for s in stack.schedules}
        self._saved_streams: list[tuple[logging.StreamHandler[Any], IO[str]]] = []
        if log_stream is not None:
            # Powertools loggers write to the stdout they saw at import; the CLI keeps stdout for results
            for h in self._stream_handlers():
                if getattr(h.stream, "closed", False):
                    h.stream = sys.stdout  # left on an earlier run's log file: setStream would flush it
                self._saved_streams.append((h, h.setStream(log_stream) or sys.stdout))

    @staticmethod
    def _stream_handlers() -> list[logging.StreamHandler[Any]]:
        logger = logging.getLogger(os.environ.get("POWERTOOLS_SERVICE_NAME", "dropscan"))
        return [h for h in logger.handlers if isinstance(h, logging.StreamHandler)]

    def close(self) -> None:
        """Give the loggers their streams back (the log file is about to close)."""
        for handler, stream in self._saved_streams:
            handler.setStream(stream)
        self._saved_streams.clear()
        # a logger first made during an invocation took the redirected stdout, the log file, too
        for h in self._stream_handlers():
            if self.log_stream is not None and h.stream is self.log_stream:
                h.setStream(sys.stdout)

    def poll_once(self) -> int:
        """One receive on every mapped queue, in flow order; returns how many messages were delivered.

        Scheduled functions whose time has come run first.
        """
        now = time.monotonic()
        for s in self.stack.schedules:
            if now >= self._next_run[s.rule]:
                self._next_run[s.rule] = now + self._period(s)
                self._invoke_scheduled(s, datetime.now(UTC))
        return sum(self._deliver(m) for m in self.stack.mappings)

    def _period(self, schedule: Schedule) -> float:
        return self._schedule_every if self._schedule_every is not None else schedule.period_s

    def run_scheduled(self, logical_id: str, *, at: datetime | None = None) -> Any:
        """Invoke a scheduled function now, as its rule would at ``at`` (default: now); returns its result."""
        [schedule] = [s for s in self.stack.schedules if s.function.logical_id == logical_id]
        return self._invoke_scheduled(schedule, at or datetime.now(UTC), raise_errors=True)

    def _invoke_scheduled(self, schedule: Schedule, at: datetime, *, raise_errors: bool = False) -> Any:
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": "123456789012",
            "time": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
            "resources": [f"arn:aws:events:{REGION}:123456789012:rule/{schedule.rule}"],
            "detail": {},
        }
        fn = schedule.function
        start = time.monotonic()
        try:
            with self._quiet():
                result = self._invoke(fn, event)
        except (Exception, InvocationKilled):
            # EventBridge invokes asynchronously: the error is logged and the next run comes anyway
            error = traceback.format_exc()
            self.history.append(Delivery(fn.logical_id, 0, 1, error, time.monotonic() - start, True))
            self._log_crash()
            if raise_errors:
                raise
            return None
        self.history.append(Delivery(fn.logical_id, 0, 0, None, time.monotonic() - start, True))
        return result

    def _invoke(self, fn: FunctionSpec, event: dict[str, Any]) -> Any:
        context = LambdaContext(
            function_name=fn.name,
            memory_limit_in_mb=fn.memory,
            timeout_s=fn.timeout,
            aws_request_id=str(uuid.uuid4()),
            invoked_function_arn=f"arn:aws:lambda:{REGION}:123456789012:function:{fn.name}",
        )
        self.invoking = fn.logical_id
        try:
            return self._handlers[fn.logical_id](event, context)
        finally:
            self.invoking = None

    def _deliver(self, mapping: EventSourceMapping) -> int:
        resp = self.sqs.receive_message(
            QueueUrl=mapping.queue_url,
            MaxNumberOfMessages=min(10, mapping.batch_size),
            WaitTimeSeconds=0,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = resp.get("Messages", [])
        if not messages:
            return 0
        event = {"Records": [self._record(m, mapping) for m in messages]}
        fn = mapping.function
        failed: set[str] = set()
        error = None
        start = time.monotonic()
        try:
            with self._quiet():
                result = self._invoke(fn, event)
            if mapping.report_batch_item_failures and isinstance(result, dict):
                failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
        except (Exception, InvocationKilled):  # a crashed invocation: the whole batch is redelivered
            error = traceback.format_exc()
            failed = {m["MessageId"] for m in messages}
            self._log_crash()
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            self.sqs.delete_message_batch(
                QueueUrl=mapping.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
        # failed messages stay invisible until the queue's visibility timeout, then the redrive policy applies
        self.history.append(
            Delivery(fn.logical_id, len(messages), len(failed), error, time.monotonic() - start)
        )
        return len(messages)

    def _log_crash(self) -> None:
        """An invocation's unhandled error as Lambda's runtime logs it: one JSON record."""
        if self.log_stream is None:
            return
        kind, exc, tb = sys.exc_info()
        record = {
            "errorMessage": str(exc),
            "errorType": kind.__name__ if kind else "",
            "stackTrace": traceback.format_tb(tb),
        }
        self.log_stream.write(json.dumps(record) + "\n")

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        """Metrics (EMF) and warnings go where the logs go, not onto the CLI's stdout."""
        if self.log_stream is None:
            yield
            return
        with redirect_stdout(self.log_stream), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield

    @staticmethod
    def _record(m: dict[str, Any], mapping: EventSourceMapping) -> dict[str, Any]:
        return {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": {
                k: {
                    "stringValue": v.get("StringValue"),
                    "binaryValue": v.get("BinaryValue"),
                    "dataType": v["DataType"],
                    "stringListValues": [],
                    "binaryListValues": [],
                }
                for k, v in m.get("MessageAttributes", {}).items()
            },
            "md5OfBody": m.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": mapping.queue_arn,
            "awsRegion": REGION,
        }

    def run_until(self, done: Callable[[], bool], *, timeout: float, idle_sleep: float = 0.05) -> bool:
        """Deliver until ``done()`` holds; False if ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            if done():
                return True
            if time.monotonic() > deadline:
                return False
            if not self.poll_once():
                time.sleep(idle_sleep)

    def drain(self, *, timeout: float) -> bool:
        """Deliver until every mapped queue is empty (messages waiting on a visibility timeout count)."""
        return self.run_until(self.idle, timeout=timeout)

    def idle(self) -> bool:
        # In flight and delayed first, visible after, in two calls: moto works out each count at its own
        # moment, and a message whose visibility timeout ran out between the two was counted in neither
        # (a drain that ended before a failing message's last delivery: seen once in CI). Nothing else
        # receives here, so a message not in flight at the first call is still visible at the second.
        for m in self.stack.mappings:
            waiting = self.sqs.get_queue_attributes(
                QueueUrl=m.queue_url,
                AttributeNames=[
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )["Attributes"]
            if any(int(v) for v in waiting.values()):
                return False
            visible = self.sqs.get_queue_attributes(
                QueueUrl=m.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
            if int(visible["ApproximateNumberOfMessages"]):
                return False
        return True

"""The review desk on 127.0.0.1: what API Gateway's HTTP API does in front of the web function, played
by a small HTTP server. Each request becomes a payload-2.0 event; on every route but the public ones
(:data:`dropscan.web.routes.PUBLIC_ROUTES`) the ``Authorization: Bearer`` token is checked as the JWT
authorizer checks it (RS256 signature against the user pool's JWKS, issuer, audience, expiry) and its
claims are passed on in ``requestContext.authorizer.jwt.claims`` as API Gateway passes them (every
value a string, an array as ``[a b]``); a request without a valid token answers 401 and never reaches
the function.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
MAX_BODY = 8 << 20


def issuer(region: str, pool_id: str) -> str:
    return f"https://cognito-idp.{region}.amazonaws.com/{pool_id}"


def jwks_of(endpoint_url: str, pool_id: str) -> dict[str, Any]:
    """The pool's public keys, from the moto server (where AWS serves them under the issuer)."""
    with urllib.request.urlopen(
        f"{endpoint_url.rstrip('/')}/{pool_id}/.well-known/jwks.json", timeout=10
    ) as r:
        data: dict[str, Any] = json.loads(r.read())
    return data


def moto_jwks() -> dict[str, Any]:
    """The keys moto signs every user pool's tokens with (for a moto running in this process)."""
    from moto.utilities.utils import load_resource

    data: dict[str, Any] = load_resource("cognitoidp/resources/jwks-public.json")
    return data


@dataclass(frozen=True)
class Authorizer:
    """API Gateway's JWT authorizer, as template.yaml configures it (issuer and audience)."""

    issuer: str
    audience: str
    keys: KeySet
    now: Callable[[], float] = time.time

    @classmethod
    def of(cls, region: str, pool_id: str, client_id: str, jwks: Mapping[str, Any]) -> Authorizer:
        return cls(issuer(region, pool_id), client_id, KeySet.import_key_set(dict(jwks)))  # type: ignore[arg-type]

    def claims(self, authorization: str) -> dict[str, Any] | None:
        """The token's claims when API Gateway would let it through; None otherwise."""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        try:
            decoded = jwt.decode(token.strip(), self.keys, algorithms=["RS256"])
        except (JoseError, ValueError):
            return None
        c = dict(decoded.claims)
        audience = c.get("aud") if c.get("token_use") == "id" else c.get("client_id")
        if c.get("iss") != self.issuer or audience != self.audience:
            return None
        if not isinstance(c.get("exp"), int | float) or c["exp"] <= self.now():
            return None
        if c.get("token_use") not in ("id", "access"):
            return None
        return c


def gateway_claims(claims: Mapping[str, Any]) -> dict[str, str]:
    """Claims as API Gateway passes them to a function: strings, arrays as ``[a b]``."""
    return {
        k: ("[" + " ".join(str(x) for x in v) + "]") if isinstance(v, list) else str(v)
        for k, v in claims.items()
    }


def _route_pattern(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$")


class LocalApi:
    """The HTTP API in front of ``handler``: public routes pass, the others need a valid token."""

    def __init__(
        self, handler: Handler, authorizer: Authorizer, public: tuple[tuple[str, str], ...] | None = None
    ) -> None:
        from dropscan.web.routes import PUBLIC_ROUTES

        self.handler = handler
        self.authorizer = authorizer
        self.public = [(m, _route_pattern(p)) for m, p in (public or PUBLIC_ROUTES)]
        # one request at a time, as one Lambda container takes them: the resolver keeps the current
        # event in itself
        self._one_at_a_time = threading.Lock()

    def is_public(self, method: str, path: str) -> bool:
        return any(m == method and p.match(path) for m, p in self.public)

    def event(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        claims: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        url = urlsplit(target)
        lowered = {k.lower(): v for k, v in headers.items()}
        cookies = [c.strip() for c in lowered.pop("cookie", "").split(";") if c.strip()]
        text_body = body.decode("utf-8", "surrogateescape") if body else ""
        try:
            text_body.encode("utf-8")
            encoded, payload = False, text_body
        except UnicodeEncodeError:
            encoded, payload = True, base64.b64encode(body).decode()
        ctx: dict[str, Any] = {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": lowered.get("host", "127.0.0.1"),
            "domainPrefix": "local",
            "http": {
                "method": method,
                "path": url.path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime()),
            "timeEpoch": int(time.time() * 1000),
        }
        if claims is not None:
            ctx["authorizer"] = {"jwt": {"claims": gateway_claims(claims), "scopes": None}}
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": url.path,
            "rawQueryString": url.query,
            "headers": lowered,
            "requestContext": ctx,
            "isBase64Encoded": encoded,
        }
        if cookies:
            event["cookies"] = cookies
        if body:
            event["body"] = payload
        return event

    def call(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        """One request through the authorizer and the function: (status, headers, body)."""
        path = urlsplit(target).path
        claims = None
        if not self.is_public(method, path):
            auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
            claims = self.authorizer.claims(auth)
            if claims is None:
                return 401, {"Content-Type": "application/json"}, b'{"message":"Unauthorized"}'
        with self._one_at_a_time:
            result = self.handler(self.event(method, target, headers, body, claims), _Context())
        out_body = result.get("body") or ""
        data = base64.b64decode(out_body) if result.get("isBase64Encoded") else str(out_body).encode()
        return int(result.get("statusCode", 200)), dict(result.get("headers") or {}), data


class _Context:
    """What a handler reads of its Lambda context."""

    function_name = "dropscan-local-web"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:dropscan-local-web"
    memory_limit_in_mb = 2048
    aws_request_id = "local"
    log_group_name = "local"
    log_stream_name = "local"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 29_000


def serve(api: LocalApi, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
    """Start serving ``api`` in a daemon thread; the server's ``server_address`` says the port."""

    class Request(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, {"Content-Type": "text/plain"}, b"request too large")
                return
            body = self.rfile.read(length) if length else b""
            try:
                status, headers, data = api.call(self.command, self.path, dict(self.headers.items()), body)
            except Exception as e:  # the function crashed: API Gateway answers 500, and so do we
                self.log_error("handler failed: %r", e)
                status, headers, data = (
                    500,
                    {"Content-Type": "application/json"},
                    b'{"message":"Internal Server Error"}',
                )
            self._send(status, headers, data)

        def _send(self, status: int, headers: Mapping[str, str], data: bytes) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: dropscan up prints what matters

    try:
        server = ThreadingHTTPServer((host, port), Request)
    except OSError:  # the port is taken: any free one (the caller prints which)
        server = ThreadingHTTPServer((host, 0), Request)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="dropscan-web", daemon=True).start()
    return server


def start(
    stack: Any, endpoint_url: str | None, *, host: str = "127.0.0.1", port: int = 8080
) -> ThreadingHTTPServer:
    """The desk of a deployed local stack: its web function's handler behind a local HTTP API. The
    handler runs in this process with the stack's environment (set by the caller, as for the other
    functions)."""
    import os

    from dropscan.local.dispatcher import load_handler

    spec = stack.functions["WebFunction"]
    env = spec.environment
    for k, v in env.items():
        os.environ.setdefault(k, v)
    handler = load_handler(spec)
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    jwks = jwks_of(endpoint_url, env["USER_POOL_ID"]) if endpoint_url else moto_jwks()
    authorizer = Authorizer.of(region, env["USER_POOL_ID"], env["USER_POOL_CLIENT_ID"], jwks)
    return serve(LocalApi(handler, authorizer), host, port)

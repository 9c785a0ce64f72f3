"""The review desk of an embedded stack, driven as a browser would: users in moto's Cognito, sign-in
through the desk's own public route, every other request through the local HTTP API's JWT check."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from dropscan.local.dispatcher import load_handler
from dropscan.local.embedded import EmbeddedStack
from dropscan.local.http_api import Authorizer, LocalApi, moto_jwks
from dropscan.store import identity
from dropscan.web import routes

HOST = "desk.test"
PASSWORD = "Correct-Horse-42"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def location(self) -> str:
        return {k.lower(): v for k, v in self.headers.items()}.get("location", "")


@dataclass
class Session:
    """One signed-in user: their ID token and the CSRF token of the pages they are shown."""

    desk: DeskClient
    name: str
    token: str
    headers: dict[str, str] = field(default_factory=dict)
    access: str = ""
    refresh_token: str = ""

    def renew(self) -> Answer:
        """POST /auth/refresh with the session's refresh token; on success the new ID token is kept."""
        answer = self.desk.form("/auth/refresh", {"refresh_token": self.refresh_token})
        if answer.status == 200:
            self.token, self.access = answer.json()["id_token"], answer.json()["access_token"]
        return answer

    def sign_out(self) -> Answer:
        return self.desk.form("/auth/signout", {"access_token": self.access})

    def get(self, path: str, /, **params: str) -> Answer:
        target = f"{path}?{urlencode(params)}" if params else path
        return self.desk.call("GET", target, {"Authorization": f"Bearer {self.token}"})

    def csrf(self) -> str:
        token: str = self.get("/api/me").json()["csrf"]
        return token

    def post(self, path: str, form: dict[str, Any], *, origin: str | None = None) -> Answer:
        pairs = [(k, x) for k, v in form.items() for x in (v if isinstance(v, list) else [v])]
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        headers["Origin"] = origin if origin is not None else f"https://{HOST}"
        return self.desk.call("POST", path, headers, urlencode(pairs).encode())


class DeskClient:
    def __init__(self, es: EmbeddedStack) -> None:
        self.es = es
        env = es.stack.functions["WebFunction"].environment
        self.pool, self.client_id = env["USER_POOL_ID"], env["USER_POOL_CLIENT_ID"]
        self.cognito = es.session.client("cognito-idp")
        routes.use_backend(None)  # built afresh from this stack's environment
        authorizer = Authorizer.of("us-east-1", self.pool, self.client_id, moto_jwks())
        self.api = LocalApi(load_handler(es.stack.functions["WebFunction"]), authorizer)

    def call(self, method: str, target: str, headers: dict[str, str], body: bytes = b"") -> Answer:
        status, out, data = self.api.call(method, target, {"Host": HOST, **headers}, body)
        return Answer(status, out, data.decode())

    def add_user(self, name: str, *groups: str) -> None:
        identity.add_user(self.cognito, self.pool, name, PASSWORD, list(groups))

    def add_new_user(self, name: str, temporary: str, *groups: str) -> None:
        """A user as `dropscan users add` makes one: a temporary password, their own chosen at first
        sign-in."""
        identity.add_user(self.cognito, self.pool, name, temporary, list(groups), temporary=True)

    def form(self, target: str, fields: dict[str, str], headers: dict[str, str] | None = None) -> Answer:
        """A form POSTed without a token (the public routes)."""
        body = urlencode(fields).encode()
        sent = {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
        return self.call("POST", target, sent, body)

    def sign_in(self, name: str, password: str = PASSWORD) -> Session:
        answer = self.form("/auth/signin", {"username": name, "password": password})
        assert answer.status == 200, answer.body
        data = answer.json()
        return Session(
            self, name, data["id_token"], access=data["access_token"], refresh_token=data["refresh_token"]
        )


def scan_links(html: str) -> list[str]:
    return re.findall(r'href="/scans/(s-[0-9a-f]{24})"', html)


def save(out: Path | None, name: str, text: str) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text, encoding="utf-8")

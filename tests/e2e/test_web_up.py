"""The review desk of `dropscan up`, as a new user meets it: the stack in its own process, a user made
with `dropscan users add` (a temporary password), signed in over HTTP after choosing their own password,
a drop scanned through the endpoint and found on the desk; without a token nothing but the sign-in page
answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from e2e.test_up import free_port

from dropscan.cli import main


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[str, str]]:
    port, web = free_port(), free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "DROPSCAN_WEB_PORT": str(web)}  # fmt: skip
    cmd = [
        sys.executable,
        "-m",
        "dropscan.cli",
        "up",
        "--port",
        str(port),
        "--eml-dir",
        str(tmp_path / "eml"),
    ]
    proc = subprocess.Popen(
        [*cmd, "--data-dir", str(tmp_path / "data")], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    desk = ""
    for _ in range(12):  # the banner, printed once the stack is deployed
        line = proc.stdout.readline()
        if "review desk" in line:
            desk = line.split()[2]
            break
    assert desk == f"http://127.0.0.1:{web}/", desk
    try:
        yield f"http://127.0.0.1:{port}", desk.rstrip("/")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def http(
    url: str, *, data: bytes | None = None, token: str = "", headers: dict[str, str] | None = None
) -> tuple[int, str]:
    sent = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url, data=data, headers={**sent, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_new_user_signs_in_to_the_desk_of_dropscan_up_and_finds_the_drop(
    up: tuple[str, str],
    upstream_archive: Path,
    drop_archive: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    endpoint, desk = up
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    assert main(["users", "add", "alice", "--group", "acme", "--endpoint-url", endpoint]) == 0
    made = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert made["groups"] == ["review-acme"] and len(made["password"]) >= 12 and made["temporary"]
    assert main(["users", "add", "bob", "--group", "no/such", "--endpoint-url", endpoint]) == 2

    out = tmp_path / "m.json"
    argv = [
        "scan",
        str(drop_archive),
        "--endpoint-url",
        endpoint,
        "--upstream",
        f"foo@1.0={upstream_archive}",
    ]
    rc = main([*argv, "--supplier", "acme", "--manifest-out", str(out), "--quiet", "--timeout", "120"])
    assert rc == 0
    scan_id = json.loads(out.read_text())["scan_id"]

    assert http(f"{desk}/desk")[0] == 401
    status, page = http(f"{desk}/")
    assert status == 200 and 'id="signin"' in page
    wrong = http(f"{desk}/auth/signin", data=b"username=alice&password=nope")
    assert wrong[0] == 401
    body = urlencode({"username": "alice", "password": made["password"]}).encode()
    status, answer = http(f"{desk}/auth/signin", data=body)
    first = json.loads(answer)
    assert status == 200 and first["state"] == "new-password-required" and "id_token" not in first
    own = "Alice0wnPassword"
    fields = {"username": first["username"], "session": first["session"], "new_password": own}
    status, answer = http(
        f"{desk}/auth/new-password", data=urlencode(fields).encode(), headers={"X-CSRF-Token": first["csrf"]}
    )
    assert status == 200, answer
    assert http(f"{desk}/auth/signin", data=body)[0] == 401  # the temporary password is gone
    status, answer = http(
        f"{desk}/auth/signin", data=urlencode({"username": "alice", "password": own}).encode()
    )
    assert status == 200
    token = json.loads(answer)["id_token"]
    status, home = http(f"{desk}/desk", token=token)
    assert status == 200 and f'href="/scans/{scan_id}"' in home
    status, review = http(f"{desk}/scans/{scan_id}", token=token)
    assert status == 200 and 'id="review"' in review

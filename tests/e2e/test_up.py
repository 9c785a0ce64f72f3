"""`dropscan up` as a separate process: any S3 client's upload is scanned; `scan --endpoint-url` uses it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from dropscan.cli import main

from helpers.builders import EXPECTED_CLASSES


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    eml = tmp_path / "eml"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    cmd = [sys.executable, "-m", "dropscan.cli", "up", "--port", str(port), "--eml-dir", str(eml)]
    proc = subprocess.Popen(
        [*cmd, "--data-dir", str(tmp_path / "data")], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    banner = proc.stdout.readline()  # printed once the stack is deployed
    assert banner.startswith("dropscan up: endpoint"), banner
    try:
        yield f"http://127.0.0.1:{port}", eml
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_scan_against_a_running_up_server(
    server: tuple[str, Path],
    upstream_archive: Path,
    drop_archive: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, eml = server
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    out = tmp_path / "m.json"
    rc = main(
        ["scan", str(drop_archive), "--endpoint-url", url, "--upstream", f"foo@1.0={upstream_archive}",
         "--supplier", "acme", "--manifest-out", str(out), "--quiet", "--timeout", "120"]
    )  # fmt: skip
    assert rc == 0
    manifest = json.loads(out.read_text())
    assert {f["path"]: f["class"] for f in manifest["files"]} == EXPECTED_CLASSES
    deadline = time.monotonic() + 30
    while not list(eml.glob("*.eml")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p.stem for p in eml.glob("*.eml")] == [manifest["scan_id"]]


def test_any_s3_client_upload_is_scanned(server: tuple[str, Path], drop_archive: Path) -> None:
    url, eml = server
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "-drops-" in b["Name"])
    s3.upload_file(str(drop_archive), bucket, "drops/acme/plain-upload.tar.gz")
    deadline = time.monotonic() + 60
    while not list(eml.glob("*.eml")) and time.monotonic() < deadline:
        time.sleep(0.2)
    [note] = list(eml.glob("*.eml"))
    assert "acme/plain-upload.tar.gz" in note.read_text()


def test_up_prints_its_banner_and_nothing_more_while_idle(tmp_path: Path) -> None:
    # Given `dropscan up` with stdout and stderr kept, and no AWS configuration of its own
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    cmd = [sys.executable, "-m", "dropscan.cli", "up", "--port", str(port), "--eml-dir", str(tmp_path / "e")]
    proc = subprocess.Popen([*cmd, "--data-dir", str(tmp_path / "data")], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    banner = [proc.stdout.readline()]
    while banner[-1] and not banner[-1].startswith("e.g."):
        banner.append(proc.stdout.readline())
    # When clients call it (and its dispatcher polls its queues all along)
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    for _ in range(20):
        s3.list_buckets()
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    # Then the banner gave the credentials a client needs, and nothing else was printed
    assert banner[1].strip() == (
        "export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1"
    )
    assert (out, err) == ("", "")


def test_up_logs_a_scan_not_its_invocations(tmp_path: Path, drop_archive: Path) -> None:
    # Given `dropscan up`, its banner read
    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    eml = tmp_path / "eml"
    cmd = [sys.executable, "-m", "dropscan.cli", "up", "--port", str(port), "--eml-dir", str(eml)]
    proc = subprocess.Popen([*cmd, "--data-dir", str(tmp_path / "data")], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None
    while not proc.stdout.readline().startswith("e.g."):
        pass
    # When an S3 client uploads a drop and its scan ends
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "-drops-" in b["Name"])
    s3.upload_file(str(drop_archive), bucket, "drops/acme/logged.tar.gz")
    deadline = time.monotonic() + 60
    while not list(eml.glob("*.eml")) and time.monotonic() < deadline:
        time.sleep(0.2)
    [note] = list(eml.glob("*.eml"))
    lines = [proc.stdout.readline().rstrip("\n")]
    while lines[-1] and "e-mail" not in lines[-1]:  # the scan's last line is printed with its e-mail
        lines.append(proc.stdout.readline().rstrip("\n"))
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    # Then the log is about the scan: its counts while it ran, if it ran that long, then what it found
    # (no upstream here: every file but the empty one is added), and no line per invocation
    assert all(line.split()[1] == "acme/logged.tar.gz" for line in lines), lines
    assert lines[-1].endswith(f"complete, review: 8 files: 0 upstream, 0 modified, 7 added, 0 missing; "
                              f"{lines[-1].split('; ')[1]}; e-mail {note}")  # fmt: skip
    assert (out, err) == ("", "")

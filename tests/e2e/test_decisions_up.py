"""The decisions flow through `dropscan up` and the AWS CLI: drops uploaded with `aws s3 cp` (the
product in their metadata), manifests fetched with it, decisions recorded with `dropscan decide
--endpoint-url` and read back with `aws dynamodb query`.

The AWS CLI is not a dev dependency (awscli pins its botocore): `make awscli` installs it into
.cache/awscli, `make test` passes it as ``DROPSCAN_AWSCLI``; otherwise ``aws`` on PATH is used. The test
skips without one, and fails instead where it is required (``DROPSCAN_REQUIRE_AWSCLI=1``, as in CI)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dropscan.cli import main

from helpers.builders import make_tar
from helpers.firmware_drops import firmware_drop, mips_kernel_config
from helpers.firmware_images import firmware_cache
from helpers.product_drops import UPSTREAM, first_drop, review_set, second_drop

ROOT = Path(__file__).resolve().parents[2]
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def aws_cli() -> str | None:
    """The AWS CLI: ``DROPSCAN_AWSCLI``, the one `make awscli` installs, or ``aws`` on PATH."""
    for candidate in (os.environ.get("DROPSCAN_AWSCLI"), str(ROOT / ".cache/awscli/bin/aws")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("aws")


AWS = aws_cli()


@pytest.fixture
def up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    if AWS is None:
        if os.environ.get("DROPSCAN_REQUIRE_AWSCLI") == "1":
            pytest.fail("DROPSCAN_REQUIRE_AWSCLI=1 but the AWS CLI is not installed (make awscli)")
        pytest.skip("the AWS CLI is not installed (make awscli)")
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    port, eml = free_port(), tmp_path / "eml"
    cmd = [sys.executable, "-m", "dropscan.cli", "up", "--port", str(port), "--eml-dir", str(eml)]
    proc = subprocess.Popen([*cmd, "--data-dir", str(tmp_path / "data")], env={**os.environ, **ENV},
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    banner = proc.stdout.readline()
    assert banner.startswith("dropscan up: endpoint"), banner
    try:
        yield f"http://127.0.0.1:{port}", eml
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def aws(url: str, *args: str) -> str:
    done = subprocess.run([str(AWS), "--endpoint-url", url, *args], env={**os.environ, **ENV},
                          check=True, capture_output=True, text=True)  # fmt: skip
    return str(done.stdout)


def bucket(url: str, kind: str) -> str:
    return next(
        str(b["Name"])
        for b in json.loads(aws(url, "s3api", "list-buckets"))["Buckets"]
        if f"-{kind}-" in b["Name"]
    )


def scanned(url: str, eml: Path, drop: Path, tmp_path: Path) -> dict[str, Any]:
    """Upload with the AWS CLI, wait for the notification, fetch the manifest with the AWS CLI."""
    before = set(eml.glob("*.eml")) if eml.is_dir() else set()
    aws(url, "s3", "cp", str(drop), f"s3://{bucket(url, 'drops')}/drops/acme/{drop.name}", "--metadata",
        "product=widget")  # fmt: skip
    deadline = time.monotonic() + 180
    while not (set(eml.glob("*.eml")) - before if eml.is_dir() else set()):
        assert time.monotonic() < deadline, "no notification"
        time.sleep(0.2)
    [note] = set(eml.glob("*.eml")) - before
    out = tmp_path / f"{note.stem}.json"
    aws(url, "s3", "cp", f"s3://{bucket(url, 'results')}/results/acme/{note.stem}/manifest.json", str(out))
    manifest: dict[str, Any] = json.loads(out.read_text())
    return manifest


def test_decisions_through_up_and_the_aws_cli(
    up: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, eml = up
    upstream = make_tar(tmp_path / "widget-1.0.tar.gz", UPSTREAM)
    ingest = ["ingest", str(upstream), "--package", "widget", "--version", "1.0", "--endpoint-url", url]
    assert main([*ingest, "--quiet"]) == 0
    first = first_drop()
    second, changed, new = second_drop(first)
    m1 = scanned(url, eml, make_tar(tmp_path / "acme-widget-1.0-gpl.tar.gz", first), tmp_path)
    assert m1["product"] == "widget" and len(review_set(m1)) == 8
    (tmp_path / "m1.json").write_text(json.dumps(m1))

    argv = ["decide", str(tmp_path / "m1.json"), "--all-review", "--verdict", "accepted", "--by", "alice"]
    assert main([*argv, "--endpoint-url", url]) == 0
    table = next(t for t in json.loads(aws(url, "dynamodb", "list-tables"))["TableNames"] if "Decisions" in t)
    query = ["--index-name", "by-scope", "--key-condition-expression", "#s = :s",
             "--expression-attribute-names", '{"#s": "scope"}',
             "--expression-attribute-values", '{":s": {"S": "supplier:acme"}}']  # fmt: skip
    assert json.loads(aws(url, "dynamodb", "query", "--table-name", table, *query))["Count"] == 8

    m2 = scanned(url, eml, make_tar(tmp_path / "acme-widget-1.1-gpl.tar.gz", second), tmp_path)
    assert review_set(m2) == changed | new and m2["summary"]["cleared"] == 5
    assert (set(m2["delta"]["changed"]), set(m2["delta"]["new"])) == (changed, new)
    assert m2["delta"]["previous"]["scan_id"] == m1["scan_id"]
    capsys.readouterr()
    assert (
        main(["history", "--supplier", "acme", "--product", "widget", "--json", "--endpoint-url", url]) == 0
    )
    history = json.loads(capsys.readouterr().out)
    assert [h["scan_id"] for h in history] == [m1["scan_id"], m2["scan_id"]]
    assert history[1]["outcome"] | {"previous": None} == {
        "verdict": m2["verdict"], "files": 28, "review": 6, "cleared": 5, "new": 1, "changed": 5,
        "removed": 0, "version": "1.1", "previous": None,
    }  # fmt: skip


def test_a_firmware_image_after_its_drop_through_up_and_the_aws_cli(
    up: tuple[str, Path], tmp_path: Path
) -> None:
    """The service's key scheme as a supplier uses it: the drop with `aws s3 cp`, then the firmware image
    beside it (firmware/<supplier>/<drop name>/<image>): a second notification, for revision 2."""
    url, eml = up
    drop = firmware_drop(tmp_path / "acme-router-1.0.tar.gz", "busybox-1.35.0", mips_kernel_config())
    m1 = scanned(url, eml, drop, tmp_path)
    assert "firmware" not in m1
    image = firmware_cache() / "images" / "router.bin"
    aws(url, "s3", "cp", str(image), f"s3://{bucket(url, 'drops')}/firmware/acme/{drop.name}/router.bin")
    second = eml / f"{m1['scan_id']}.2.eml"
    deadline = time.monotonic() + 300
    while not second.is_file():
        assert time.monotonic() < deadline, "no notification of the revision"
        time.sleep(0.2)
    out = tmp_path / "revised.json"
    aws(
        url, "s3", "cp", f"s3://{bucket(url, 'results')}/results/acme/{m1['scan_id']}/manifest.json", str(out)
    )
    revised = json.loads(out.read_text())
    assert revised["revision"] == 2 and revised["firmware"]["verdict"] == "incomplete"
    [section] = revised["firmware"]["images"]
    assert section["source"]["key"] == f"firmware/acme/{drop.name}/router.bin"
    assert (eml / f"{m1['scan_id']}.eml").is_file()  # the first notification is kept beside it

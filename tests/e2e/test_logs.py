"""What the functions log (Powertools Logger, JSON, log level DEBUG): no file contents, no presigned URLs, no
secrets, also when a call fails and is retried."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from conftest import FAST

from dropscan.local.embedded import embedded
from dropscan.store.services import current_services

from helpers.builders import UPSTREAM_FILES, make_tar
from helpers.faults import Faults, key_contains, s3_error

SECRET_LINE = b"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzz9s1cr3tK\n"
CONTENTS = {
    "fw-1.0/config.env": b"DB_PASSWORD=hunter2-do-not-log\n" + SECRET_LINE,
    "fw-1.0/main.c": b"int main(void) { return 0x5ec12e7; }\n",
}
NEEDLES = [
    "hunter2-do-not-log",
    "wJalrXUtnFEMI",
    "0x5ec12e7",
    "X-Amz-Signature",
    "X-Amz-Credential",
    "Signature=",
]


def walk(value: Any) -> list[tuple[str, Any]]:
    """Every (key, value) of a JSON document, nested ones too."""
    if isinstance(value, dict):
        return [(k, v) for k, v in value.items()] + [kv for v in value.values() for kv in walk(v)]
    if isinstance(value, list):
        return [kv for v in value for kv in walk(v)]
    return []


def test_a_full_scan_logs_no_contents_urls_or_secrets(tmp_path: Path) -> None:
    logs = io.StringIO()
    with embedded(parameters={**FAST, "LogLevel": "DEBUG"}, log_stream=logs) as stack, Faults() as faults:
        credentials = {os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_SESSION_TOKEN"]}
        stack.client.ingest(make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES), "foo", "1.0")
        # a failing write, so that the error path's logging is looked at as well
        svc = current_services()
        faults.error(svc.s3, "PutObject", s3_error("AccessDenied", 403), when=key_contains("/results/"))
        _, scan_id = stack.client.upload_drop(make_tar(tmp_path / "fw-1.0.tar.gz", CONTENTS), "acme")
        assert stack.client.wait_manifest("acme", scan_id, timeout=60) is not None
        assert stack.dispatcher.drain(timeout=60)

    text = logs.getvalue()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]  # structured: JSON only
    messages = [r for r in records if "message" in r]
    assert any(r.get("errorType") == "BatchProcessingError" for r in records)  # the failed write
    assert any(r.get("scan_id") == scan_id for r in messages)  # the scan was logged, with its id
    assert [n for n in NEEDLES if n in text] == []
    assert not credentials & {v for r in records for _, v in walk(r) if isinstance(v, str)}
    keys = {k.lower() for r in records for k, _ in walk(r)}
    assert not {k for k in keys if any(w in k for w in ("secret", "password", "token", "credential"))}

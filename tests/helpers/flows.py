"""The one way the end-to-end tests run a scan: upload a drop, wait for its manifest, let the stack settle."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dropscan.audit.manifest import validate
from dropscan.cli import main
from dropscan.local.embedded import EmbeddedStack


@dataclass(frozen=True)
class Scanned:
    """A scan that ended: its id, its manifest (schema-valid) and the notifications it sent."""

    scan_id: str
    manifest: dict[str, Any]
    notifications: list[Any]


def scan_and_wait(
    stack: EmbeddedStack,
    drop: Path,
    supplier: str = "acme",
    *,
    metadata: dict[str, str] | None = None,
    firmware: Sequence[Path] = (),
) -> Scanned:
    """Upload ``drop`` as ``supplier`` (after the ``firmware`` images beside it), wait for its manifest
    (with a section for each image), then drain every queue (so the notification was sent, or not,
    before the test looks)."""
    images = [stack.client.upload_firmware(image, supplier, drop.name) for image in firmware]
    _, scan_id = stack.client.upload_drop(drop, supplier, metadata=metadata)
    manifest = stack.client.wait_manifest(supplier, scan_id, timeout=300, firmware=images)
    assert manifest is not None, "no manifest"
    assert stack.dispatcher.drain(timeout=60), "the stack did not settle"
    validate(manifest)
    return Scanned(scan_id, manifest, stack.mailbox.for_scan(scan_id))


def cli_scan(drop: Path, data: Path, out: Path, supplier: str = "acme") -> dict[str, Any]:
    """``dropscan scan DROP --data-dir DATA``, as a user runs it in a process of its own: the manifest."""
    argv = [
        "scan",
        str(drop),
        "--supplier",
        supplier,
        "--quiet",
        "--data-dir",
        str(data),
        "--manifest-out",
        str(out),
    ]
    assert main(argv) == 0
    manifest: dict[str, Any] = json.loads(out.read_text())
    return manifest

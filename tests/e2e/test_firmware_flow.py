"""A firmware image beside its drop, through the whole stack: uploaded before the drop (one manifest, one
notification), after it (a new revision with its own notification), with the command line's
``--firmware``, images that cannot be read (no firmware, a truncated squashfs, one over the size limit)
and a redelivered image event.

The image is the router image of ``make firmware-cases`` (Debian's mipsel binaries); the drop holds
BusyBox 1.35.0's release, the kernel's Makefile and Debian's .config of that kernel, and no iptables or
glibc source: BusyBox corresponds, the kernel too, iptables and glibc are ``source-missing``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dropscan.audit.manifest import validate
from dropscan.cli import main
from dropscan.keys import firmware_key, manifest_key, manifest_revision_key
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.stages.firmware import image_uploaded
from dropscan.store.services import current_services

from helpers.builders import busybox_orig
from helpers.firmware_drops import firmware_drop, mips_kernel_config
from helpers.firmware_images import firmware_cache, need_tool, run
from helpers.flows import scan_and_wait

ROUTER = "router.bin"


@pytest.fixture
def drop(tmp_path: Path) -> Path:
    return firmware_drop(tmp_path / "acme-router-1.0.tar.gz", "busybox-1.35.0", mips_kernel_config())


@pytest.fixture
def router() -> Path:
    return firmware_cache() / "images" / ROUTER


def _statuses(manifest: dict[str, Any]) -> dict[str, str]:
    [section] = manifest["firmware"]["images"]
    return {b["path"].rsplit("!", 1)[-1]: b["status"] for b in section["binaries"]}


def _stored(stack: EmbeddedStack, key: str) -> dict[str, Any]:
    body = stack.client.s3.get_object(Bucket=stack.client.names.results_bucket, Key=key)["Body"]
    data: dict[str, Any] = json.loads(body.read())
    return data


def test_an_image_uploaded_before_its_drop_is_in_its_one_manifest_and_notification(
    stack: EmbeddedStack, drop: Path, router: Path
) -> None:
    stack.client.ingest(busybox_orig(), "busybox", "1.35.0")
    scanned = scan_and_wait(stack, drop, firmware=[router])

    firmware = scanned.manifest["firmware"]
    assert firmware["verdict"] == "incomplete"
    statuses = _statuses(scanned.manifest)
    assert statuses["/bin/busybox"] == "corresponds"
    assert statuses["/usr/sbin/xtables-legacy-multi"] == "source-missing"
    assert statuses["/lib/mipsel-linux-gnu/libc.so.6"] == "source-missing"
    [section] = firmware["images"]
    assert section["source"]["key"] == firmware_key("acme", drop.name, ROUTER)
    assert section["kernel"]["config_arch_mismatch"] is False
    # held back for the image, the notification went out once, for the revision that holds it
    assert len(scanned.notifications) == 1
    assert scanned.manifest["revision"] == 2
    assert "firmware" not in _stored(stack, manifest_revision_key("acme", scanned.scan_id, 1))


def test_an_image_after_its_drop_revises_the_manifest_with_a_notification_of_its_own(
    stack: EmbeddedStack, drop: Path, router: Path
) -> None:
    stack.client.ingest(busybox_orig(), "busybox", "1.35.0")
    first = scan_and_wait(stack, drop)
    assert "firmware" not in first.manifest
    assert len(first.notifications) == 1

    key = stack.client.upload_firmware(router, "acme", drop.name)
    revised = stack.client.wait_manifest("acme", first.scan_id, timeout=300, firmware=[key])
    assert revised is not None
    assert stack.dispatcher.drain(timeout=60)
    validate(revised)

    assert revised["revision"] == 2
    # the scan's own findings stay as they were: the revision adds to them
    assert [{k: v for k, v in f.items() if k != "in_binary"} for f in revised["files"]] == first.manifest[
        "files"
    ]
    assert _statuses(revised)["/bin/busybox"] == "corresponds"
    assert _stored(stack, manifest_revision_key("acme", first.scan_id, 1)) == first.manifest
    assert len(stack.mailbox.for_scan(first.scan_id)) == 2
    # each file of the component matched to /bin/busybox is told: in it, not, or cannot tell
    told = {f["path"]: f["in_binary"] for f in revised["files"] if "in_binary" in f}
    [component] = revised["firmware"]["images"][0]["components"]
    assert component["prefix"] == "busybox-1.35.0/"
    assert len(told) == sum(component["counts"].values()) == len(component["files"])
    assert told["busybox-1.35.0/coreutils/ls.c"] is True

    # S3 delivers an event twice now and then: the image is in, nothing is revised again
    assert image_uploaded(current_services(), stack.client.names.drops_bucket, key) is None
    assert stack.dispatcher.drain(timeout=60)
    assert _stored(stack, manifest_key("acme", first.scan_id))["revision"] == 2
    assert len(stack.mailbox.for_scan(first.scan_id)) == 2


def _junk(tmp_path: Path) -> Path:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4096)
    return junk


def _truncated_squashfs(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for i in range(20):
        (root / "bin").mkdir(parents=True, exist_ok=True)
        (root / "bin" / f"prog{i}").write_bytes(os.urandom(20_000))
    whole = tmp_path / "whole.squashfs"
    run(need_tool("mksquashfs"), root, whole, "-comp", "gzip", "-noappend", "-quiet", "-no-progress")
    cut = tmp_path / "cut.squashfs"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    return cut


@pytest.mark.parametrize(
    ("make", "blob", "reason"),
    [
        (_junk, "unknown", "no firmware format recognised"),
        (_truncated_squashfs, "squashfs", "unsquashfs failed"),
    ],
)
def test_an_image_that_cannot_be_read_ends_in_a_section_that_says_why(
    stack: EmbeddedStack,
    drop_archive: Path,
    tmp_path: Path,
    make: Callable[[Path], Path],
    blob: str,
    reason: str,
) -> None:
    scanned = scan_and_wait(stack, drop_archive, firmware=[make(tmp_path)])

    [section] = scanned.manifest["firmware"]["images"]
    assert section["binaries"] == []
    [read] = section["blobs"]
    assert (read["format"], read["status"]) == (blob, "unreadable")
    assert read["reason"].startswith(reason)
    # nothing seen is nothing told: never "complete"
    assert section["verdict"] == scanned.manifest["firmware"]["verdict"] == "unknown"
    assert len(scanned.notifications) == 1


def test_an_image_over_the_size_limit_is_not_fetched_and_says_so(drop_archive: Path, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(2 << 20))
    with embedded(parameters={"FirmwareMaxMiB": "1"}) as stack:
        scanned = scan_and_wait(stack, drop_archive, firmware=[big])
    [section] = scanned.manifest["firmware"]["images"]
    assert section["stopped"] == "the image is larger than FirmwareMaxMiB (1,048,576 bytes)"
    assert (section["verdict"], section["blobs"], section["size"]) == ("unknown", [], 2 << 20)
    assert len(scanned.notifications) == 1


def test_dropscan_scan_with_firmware_prints_and_mails_the_pair(
    tmp_path: Path, drop: Path, router: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out" / "manifest.json"
    argv = ["scan", str(drop), "--firmware", str(router), "--supplier", "acme"]
    argv += [
        "--data-dir",
        str(tmp_path / "data"),
        "--upstream",
        f"busybox@1.35.0={busybox_orig()}",
        "--manifest-out",
        str(out),
    ]
    argv += ["--eml-dir", str(tmp_path / "eml")]
    assert main(argv) == 0

    manifest = json.loads(out.read_text())
    validate(manifest)
    assert manifest["firmware"]["verdict"] == "incomplete"
    assert _statuses(manifest)["/bin/busybox"] == "corresponds"
    assert len(list((tmp_path / "eml").glob("*.eml"))) == 1
    assert "router.bin" in capsys.readouterr().out

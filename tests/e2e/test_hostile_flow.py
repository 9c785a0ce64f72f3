"""Hostile uploads through the whole flow: a bomb is rejected with its reason, tricks reach the manifest."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

from dropscan.audit.manifest import validate
from dropscan.local.embedded import EmbeddedStack

from helpers import bombs
from helpers.bombs import GiB
from helpers.flows import scan_and_wait


def scan(stack: EmbeddedStack, drop: Path) -> tuple[dict[str, Any], list[Any]]:
    done = scan_and_wait(stack, drop)
    return done.manifest, done.notifications


def test_a_decompression_bomb_is_rejected_with_its_reason_and_one_notification(
    stack: EmbeddedStack, tmp_path: Path
) -> None:
    drop = tmp_path / "firmware.tar.gz"
    drop.write_bytes(bombs.tar_gz_of_zeros([("rootfs.img", 8 * GiB)]))
    manifest, [note] = scan(stack, drop)
    validate(manifest)
    assert manifest["status"] == "rejected"
    assert manifest["reason"] == (
        "decompression bomb: member rootfs.img expands beyond 1000x its compressed size (after 0 files)"
    )
    assert note.attributes["status"] == "rejected"


def test_links_odd_names_and_encrypted_members_are_listed_and_the_scan_completes(
    stack: EmbeddedStack, tmp_path: Path
) -> None:
    secret = bombs.set_zip_flag(bombs.zip_bytes({"key.pem": b"k" * 100, "readme": b"r\n"}), "key.pem", 1)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, errors="surrogateescape") as tar:
        for name, data in (("src/caf\udce9.c", b"int c;\n"), ("src/vendor.zip", secret), ("src/x.c", b"1"),
                           ("src/x.c", b"2")):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("src/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    drop = tmp_path / "drop.tar"
    drop.write_bytes(out.getvalue())
    manifest, _ = scan(stack, drop)
    validate(manifest)
    assert manifest["status"] == "complete"
    files = {f["path"]: f for f in manifest["files"]}
    assert set(files) == {"src/caf%E9.c", "src/vendor.zip!/key.pem", "src/vendor.zip!/readme", "src/x.c",
                          "src/x.c (duplicate 2)", "src/passwd"}  # fmt: skip
    assert files["src/vendor.zip!/key.pem"]["unreadable"] == "encrypted member: not read"
    assert (files["src/passwd"]["kind"], files["src/passwd"]["link"]) == ("symlink", "/etc/passwd")
    assert files["src/passwd"]["note"] == "absolute link target"
    assert files["src/caf%E9.c"]["note"] == "name is not printable UTF-8: bytes shown as %XX"
    assert manifest["summary"]["unreadable"] == 1

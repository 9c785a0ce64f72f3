"""Triage of review files: licence findings, red flags with their evidence, and re-reading a drop."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from dropscan.archive.extract import Extracted, SourceFailed, contents_by_digest, streamed_contents
from dropscan.audit.findings import component_license, triage_file, triage_manifest
from dropscan.audit.licenses import TagDetector, detector, scancode_available, spdx_tags
from dropscan.audit.manifest import verdict
from dropscan.forked import Forked, spread

from helpers.builders import make_tar, tar_bytes

ELF_OBJECT = b"\x7fELF\x02\x01\x01\x00" + bytes(8) + b"\x01\x00\x3e\x00" + bytes(44) + b"\x90" * 64
NONCOMMERCIAL = b"/*\n * Fast CRC tables.\n * Permission granted for non-commercial use only.\n */\nint x;\n"


def entry(path: str, cls: str = "added", kind: str = "text") -> dict[str, Any]:
    return {"path": path, "class": cls, "kind": kind, "component": "bb/"}


def flags_of(
    path: str,
    data: bytes,
    *,
    component_license: str | None = "GPL-2.0-only",
    declared_arch: str | None = None,
) -> list[tuple[str, str, int | None]]:
    result = triage_file(
        entry(path),
        data,
        detector=TagDetector(),
        component_license=component_license,
        declared_arch=declared_arch,
    )
    return [(f.kind, f.severity, f.line) for f in result.flags]


def test_spdx_tags_are_normalised_and_unknown_ids_get_low_confidence() -> None:
    text = "// SPDX-License-Identifier: GPL-2.0+\n/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */\n#x\n"
    text += "# SPDX-License-Identifier: Acme-Private-1\n"
    found = spdx_tags(text)
    assert [(f.expression, f.line, f.confidence) for f in found] == [
        ("GPL-2.0-or-later", 1, 100.0),
        ("GPL-2.0-only OR MIT", 2, 100.0),
        ("Acme-Private-1", 4, 50.0),
    ]
    assert found[1].text == "SPDX-License-Identifier: (GPL-2.0 OR MIT)"


def test_non_commercial_terms_are_flagged_with_their_line() -> None:
    assert flags_of("bb/lib/crc.c", NONCOMMERCIAL) == [("non-commercial", "action-required", 3)]


def test_a_permissive_grant_for_commercial_or_non_commercial_use_is_no_red_flag() -> None:
    text = b"/* SPDX-License-Identifier: MIT\n * Use for any purpose, commercial or non-commercial. */\n"
    assert flags_of("bb/x.c", text) == [("license-different", "review", 1)]


def test_evaluation_only_terms_are_flagged() -> None:
    text = b"/* Copyright Acme.\n * This software is provided for evaluation purposes only. */\n"
    assert flags_of("bb/x.c", text) == [("evaluation-only", "action-required", 2)]


def test_proprietary_notice_without_grant_is_flagged_but_not_beside_a_licence() -> None:
    secret = b"/*\n * CONFIDENTIAL AND PROPRIETARY. Unauthorized distribution prohibited.\n */\n"
    assert flags_of("bb/a.c", secret) == [("proprietary", "action-required", 2)]
    gpl = b"/* SPDX-License-Identifier: GPL-2.0-only\n * supports proprietary firmware loading */\n"
    assert flags_of("bb/b.c", gpl) == []


def test_all_rights_reserved_is_only_a_flag_when_nothing_grants_a_licence() -> None:
    reserved = b"# Copyright (c) 2010 Acme Router Inc. All rights reserved.\nint y;\n"
    assert flags_of("bb/c.c", reserved) == [("no-license-grant", "action-required", 1)]
    bsd = b"/* Copyright (c) 2010 Acme. All rights reserved.\n * Redistribution and use in source... */\n"
    assert flags_of("bb/d.c", bsd) == []


def test_licences_of_files_against_their_component() -> None:
    def one(expr: str, cls: str = "added", comp: str = "GPL-2.0-only") -> list[tuple[str, str]]:
        text = f"/* SPDX-License-Identifier: {expr} */\n".encode()
        result = triage_file(
            entry("bb/f.c", cls), text, detector=TagDetector(), component_license=comp, declared_arch=None
        )
        return [(f.kind, f.severity) for f in result.flags]

    assert one("GPL-2.0-or-later") == []  # GPL-2.0+ code may join a GPL-2.0 work as it is
    assert one("GPL-2.0-only OR Apache-2.0") == []  # a choice that includes the component's licence
    assert one("BSD-3-Clause") == [("license-different", "review")]
    assert one("Apache-2.0") == [("license-incompatible", "action-required")]
    assert one("Apache-2.0", cls="modified") == [("license-incompatible", "review")]
    assert one("Apache-2.0", comp="GPL-3.0-or-later") == [("license-different", "review")]
    assert one("Apache-2.0", comp="MIT") == [("license-different", "review")]


def test_prebuilt_binaries_are_flagged_with_what_they_are() -> None:
    for path, what in (("bb/blob.o", "ELF 64-bit relocatable object, x86-64"), ("bb/m.ko", "kernel module")):
        result = triage_file(
            entry(path, kind="elf"),
            ELF_OBJECT,
            detector=TagDetector(),
            component_license=None,
            declared_arch=None,
        )
        [flag] = result.flags
        assert (flag.kind, flag.severity) == ("prebuilt-binary", "action-required")
        assert what in flag.evidence


def test_a_kernel_config_for_another_architecture_is_flagged() -> None:
    config = b"#\n# Automatically generated file; DO NOT EDIT.\n#\nCONFIG_ARM=y\nCONFIG_MMU=y\n"

    def arch(path: str, declared: str | None) -> list[tuple[str, str, int | None]]:
        return flags_of(path, config, component_license=None, declared_arch=declared)

    assert arch("linux/.config", "mips") == [("arch-mismatch", "action-required", 4)]
    assert arch("linux/.config", "armhf") == []
    assert arch("linux/.config", None) == []  # nothing declared: nothing to compare with
    assert arch("linux/drivers/foo.c", "mips") == []  # only configurations are read for it
    arm64 = b"CONFIG_ARM64=y\n"
    assert (
        triage_file(
            entry("u-boot/configs/board_defconfig"),
            arm64,
            detector=TagDetector(),
            component_license=None,
            declared_arch="aarch64",
        ).flags
        == []
    )


def test_verdict_follows_the_most_severe_flag() -> None:
    clean = {"review": 0, "flags": {"action-required": 0, "review": 0}}
    assert verdict("complete", clean) == "clean"
    assert verdict("complete", {**clean, "flags": {"action-required": 0, "review": 2}}) == "review"
    assert verdict("complete", {**clean, "review": 3}) == "review"
    assert verdict("complete", {**clean, "flags": {"action-required": 1, "review": 0}}) == "action-required"
    assert verdict("failed", {**clean, "flags": {"action-required": 1}}) == "failed"


def test_contents_are_found_again_by_digest_also_inside_nested_archives(tmp_path: Path) -> None:
    inner = tar_bytes({"v/inner.c": b"inner\n", "v/other.c": b"other\n"}, "gz")
    drop = make_tar(
        tmp_path / "drop.tar.gz", {"d/a.c": b"alpha\n", "d/vendor.tar.gz": inner, "d/b.c": b"b\n"}
    )
    want = {hashlib.sha256(b).hexdigest(): len(b) for b in (b"alpha\n", b"inner\n")}

    got = contents_by_digest(str(drop), want)

    assert set(got.content.values()) == {b"alpha\n", b"inner\n"}
    # every file's SHA-1 (SPDX wants one per file), the nested members' too
    assert got.sha1[hashlib.sha256(b"other\n").hexdigest()] == hashlib.sha1(b"other\n").hexdigest()


def test_a_non_archive_upload_is_its_own_content(tmp_path: Path) -> None:
    single = tmp_path / "notes.txt"
    single.write_bytes(NONCOMMERCIAL)
    sha = hashlib.sha256(NONCOMMERCIAL).hexdigest()
    assert contents_by_digest(str(single), {sha: len(NONCOMMERCIAL)}).content == {sha: NONCOMMERCIAL}


def test_a_truncated_drop_yields_what_could_be_read(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in (("a.c", b"alpha\n"), ("big.bin", os.urandom(200_000))):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    sha = hashlib.sha256(b"alpha\n").hexdigest()
    assert contents_by_digest(str(cut), {sha: 6}).content == {sha: b"alpha\n"}


def streamed(path: Path, codec: str, wanted: dict[str, int]) -> Extracted | None:
    """The drop at ``path`` read by a forked child as it streams, as triage reads it from S3."""
    with Forked(streamed_contents, lambda: path.open("rb"), codec, wanted) as reading:
        got = reading.result()
    assert not isinstance(got, SourceFailed)  # a local file never fails part-way
    return got


@pytest.mark.parametrize(("compression", "codec"), [("gz", "gzip"), ("bz2", "bzip2"), ("xz", "xz")])
def test_a_compressed_drop_read_as_a_stream_gives_what_its_copy_on_disk_gives(
    tmp_path: Path, compression: str, codec: str
) -> None:
    inner = tar_bytes({"v/inner.c": b"inner\n", "v/other.c": b"other\n"}, "gz")
    files = {
        "d/a.c": b"alpha\n",
        "d/vendor.tar.gz": inner,
        "d/big.bin": os.urandom(3_000_000),
        "d/b.c": b"b\n",
    }
    drop = make_tar(tmp_path / f"drop.tar.{compression}", files, compression)
    want = {hashlib.sha256(b).hexdigest(): len(b) for b in (b"alpha\n", b"inner\n", files["d/big.bin"])}

    on_disk = contents_by_digest(str(drop), want)
    got = streamed(drop, codec, want)

    assert got is not None
    assert (got.content, got.sha1, got.truncated) == (on_disk.content, on_disk.sha1, on_disk.truncated)
    assert set(got.content.values()) == {b"alpha\n", b"inner\n", files["d/big.bin"]}


class _Breaking:
    """An S3 body whose connection drops half-way (``at`` 0: opening it fails)."""

    def __init__(self, data: bytes, at: float = 0.5) -> None:
        if not at:
            raise ConnectionRefusedError("Connection refused")
        self.data, self.left = data, int(len(data) * at)

    def read(self, size: int = -1) -> bytes:
        if not self.left:
            raise ConnectionResetError("Connection reset by peer")
        n = self.left if size < 0 else min(size, self.left)
        block, self.data, self.left = self.data[:n], self.data[n:], self.left - n
        return block

    def close(self) -> None:
        pass


def test_an_s3_error_while_the_drop_streams_fails_the_read_rather_than_cutting_it_short(
    tmp_path: Path,
) -> None:
    drop = make_tar(tmp_path / "drop.tar.gz", {"a.c": b"alpha\n", "big.bin": os.urandom(400_000)})
    data = drop.read_bytes()
    want = {hashlib.sha256(b"alpha\n").hexdigest(): 6}
    with Forked(streamed_contents, lambda: _Breaking(data), "gzip", want) as reading:
        got = reading.result()
    # told as such: the triage message comes back, rather than half a drop triaged
    assert got == SourceFailed("ConnectionResetError: Connection reset by peer")
    with Forked(streamed_contents, lambda: _Breaking(data, at=0), "gzip", want) as reading:
        assert isinstance(reading.result(), SourceFailed)  # the GET itself failed


def test_a_compressed_file_that_is_no_archive_is_left_to_the_copy_on_disk(tmp_path: Path) -> None:
    single = tmp_path / "notes.txt.gz"
    single.write_bytes(gzip.compress(NONCOMMERCIAL))
    assert streamed(single, "gzip", {}) is None


def test_a_truncated_compressed_drop_read_as_a_stream_yields_what_could_be_read(tmp_path: Path) -> None:
    drop = make_tar(tmp_path / "drop.tar.gz", {"a.c": b"alpha\n", "big.bin": os.urandom(200_000)})
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(drop.read_bytes()[: drop.stat().st_size // 2])
    sha = hashlib.sha256(b"alpha\n").hexdigest()
    got = streamed(cut, "gzip", {sha: 6})
    assert got is not None and got.content == {sha: b"alpha\n"}


scancode = pytest.mark.skipif(
    not scancode_available() and not os.environ.get("DROPSCAN_REQUIRE_SCANCODE"),
    reason="ScanCode Toolkit not installed (pip install '.[triage]')",
)


@scancode
def test_scancode_names_the_non_commercial_terms_and_reads_licence_texts() -> None:
    sc = detector("scancode")
    assert sc.name.startswith("scancode-toolkit ")
    [finding] = [f for f in sc.detect(NONCOMMERCIAL.decode()) if f.source == "scancode"][:1]
    assert (finding.line, finding.category) == (3, "Commercial")
    assert "non-commercial" in finding.text
    gpl2 = (
        "GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991\n\nCopyright (C) 1989, 1991 Free Software "
        "Foundation, Inc.\n\nEveryone is permitted to copy and distribute verbatim copies of this license "
        "document, but changing it is not allowed.\n"
    )
    assert component_license(sc.detect(gpl2, thorough=True)) == "GPL-2.0-only"


@scancode
def test_scancode_findings_far_apart_keep_the_lines_a_whole_text_detection_gives() -> None:
    """Detection runs again within each group of matches: the same findings, at the file's own lines."""
    from licensedcode.detection import detect_licenses

    sc = detector("scancode")
    body = "".join(f"static int f{i}(void) {{ return {i}; }}\n" for i in range(200))
    text = (
        "/*\n * Copyright (c) 2019 Acme\n *\n"
        " * This program is free software; you can redistribute it and/or modify it under the terms of\n"
        " * the GNU General Public License version 2 as published by the Free Software Foundation.\n */\n"
        + body
        + "/* Confidential and proprietary: for evaluation only. */\n"
        + body
        + 'MODULE_LICENSE("GPL");\nMODULE_AUTHOR("Acme");\n'
    )
    whole = [
        (m.rule.license_expression, m.lines())
        for d in detect_licenses(index=sc._index, query_string=text, approximate=False)  # type: ignore[attr-defined]
        for m in d.matches
    ]
    found = [f for f in sc.detect(text) if f.source == "scancode"]
    assert len(whole) >= 3  # the header, the notice in the middle and MODULE_LICENSE at the end
    assert [(f.line, f.end_line) for f in found] == [lines for _, lines in whole]
    lines = text.splitlines()
    assert all(lines[f.line - 1].strip()[:20] in f.text for f in found)  # the evidence is those lines


def test_a_triage_that_broke_is_recorded_and_never_reads_as_clean() -> None:
    from dropscan.audit.findings import TriageReport, apply

    manifest: dict[str, Any] = {
        "status": "complete",
        "files": [],
        "components": [],
        "summary": {"review": 0, "mismatches": 0},
    }
    apply(manifest, TriageReport(detector="scancode", error="RuntimeError: index corrupt"))
    assert manifest["triage"]["error"] == "RuntimeError: index corrupt"
    assert manifest["verdict"] == "review"
    with pytest.raises(ValueError, match="unknown licence detector"):
        detector("ninka")


def test_an_unreadable_member_keeps_a_drop_from_being_clean() -> None:
    summary = {"review": 0, "unreadable": 1, "flags": {"action-required": 0, "review": 0}}
    assert verdict("complete", summary) == "review"


def test_forked_workers_find_what_one_process_finds_in_the_same_order() -> None:
    texts = {
        0: b"// SPDX-License-Identifier: GPL-2.0-only\nint a;\n",
        1: b"/* SPDX-License-Identifier: Apache-2.0 */\nint b;\n",
        2: b"/* For non-commercial use only. */\nint c;\n",
        3: b"/* Copyright Acme. All rights reserved. */\nint d;\n",
        4: b"int e;\n",
    }
    content: dict[str, bytes] = {}
    files = [
        {"path": "foo/COPYING", "class": "identical", "sha256": "c" * 64, "kind": "text", "component": "foo"}
    ]
    content["c" * 64] = b"SPDX-License-Identifier: GPL-2.0-only\n"
    for i in range(260):
        data = texts[i % 5] + f"/* {i} */\n".encode()
        digest = hashlib.sha256(data).hexdigest()
        content[digest] = data
        files.append(entry(f"foo/src/f{i:03d}.c") | {"sha256": digest, "component": "foo"})
    manifest = {"files": files, "components": [{"prefix": "foo"}], "source": {"metadata": {}}}

    one = triage_manifest(manifest, content, detector=TagDetector(), workers=1)
    three = triage_manifest(manifest, content, detector=TagDetector(), workers=3, spread=spread)
    assert (one.workers, three.workers) == (1, 3)
    assert three.licenses == one.licenses and len(one.licenses) == 104
    assert [f.to_json() for f in three.flags] == [f.to_json() for f in one.flags]
    assert {f.kind for f in one.flags} >= {"non-commercial", "no-license-grant"}

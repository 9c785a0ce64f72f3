"""Nested archives fanned out to unpack invocations of their own: the same manifest as in-process, the
scan complete exactly once, limits across parts, and a part that never finishes given up by the sweeper."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST

from dropscan.archive import zipsplit
from dropscan.keys import ROOT, manifest_key
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.models import Scan
from dropscan.store.services import current_services

from helpers import bombs
from helpers.builders import make_tar, make_zip, tar_bytes
from helpers.faults import Faults, key_contains, s3_error
from helpers.flows import scan_and_wait

EVERY = {"FanOutMiB": "0"}  # every nested archive is a part of its own
NONE = {"FanOutMiB": "1048576"}  # none is: the walk of one invocation, as before fan-out
#: a bomb trips after 1 MiB of output, so that the drop stays small
TIGHT = {"RatioCheckAfterMiB": "1", "MaxCompressionRatio": "100"}

FIXTURE = tar_bytes({"data/a.txt": b"fixture data\n"}, "bz2")  # known upstream: never opened


def nested_drop(tmp_path: Path) -> Path:
    """A plain tar with every kind of nested archive at the top and one and two levels further down."""
    inner = tar_bytes({"inner/x.c": b"int x;\n"}, "gz")
    foo = tar_bytes(
        {
            "foo-1.0/main.c": b"int main(void) { return 0; }\n",
            "foo-1.0/README": b"foo\n",
            "foo-1.0/deeper/fixture.tar.gz": tar_bytes({"f/1.txt": b"1\n", "f/2.txt": b"2\n"}, "gz"),
            "foo-1.0/deeper/only.tar": tar_bytes({"inner.tar.gz": inner}, ""),  # nothing but an archive
        },
        "xz",
    )
    broken = tar_bytes({f"b/{i}.txt": os.urandom(2000) for i in range(20)}, "gz")
    files = {
        "src/main.c": b"int main;\n",
        "src/random.bin": os.urandom(200_000),  # keeps the upload's own ratio low (see TIGHT)
        "vendor/foo-1.0.tar.xz": foo,
        "vendor/broken.tar.gz": broken[: len(broken) // 2],
        "vendor/man.1.gz": gzip.compress(b".TH FOO 1\nfoo \\- does foo\n" * 20),
        "vendor/fixture.tar.bz2": FIXTURE,
        "vendor/lib.zip": bombs.zip_bytes({"lib/a.c": b"int a;\n", "lib/b.c": b"int b;\n"}),
        "vendor/bomb.tar.gz": bombs.tar_gz_of_zeros([("zeros.img", 16 << 20)]),
    }
    return make_tar(tmp_path / "bundle.tar", files, "")


def scan_on(stack: EmbeddedStack, drop: Path) -> tuple[dict[str, Any], Scan]:
    done = scan_and_wait(stack, drop)
    manifest, scan_id = done.manifest, done.scan_id
    scan = current_services().scans.get(scan_id)
    assert scan is not None
    return manifest, scan


def scan_with(parameters: dict[str, str], drop: Path, tmp_path: Path) -> tuple[dict[str, Any], Scan]:
    with embedded(parameters=parameters) as stack:
        upstream = make_tar(tmp_path / "bar-2.0.tar.gz", {"bar-2.0/fixture.tar.bz2": FIXTURE})
        stack.client.ingest(upstream, "bar", "2.0")
        return scan_on(stack, drop)


def test_fanned_out_and_in_process_scans_give_the_same_files(tmp_path: Path) -> None:
    drop = nested_drop(tmp_path)
    fanned, fanned_scan = scan_with({**TIGHT, **EVERY}, drop, tmp_path)
    walked, walked_scan = scan_with({**TIGHT, **NONE}, drop, tmp_path)

    assert fanned["files"] == walked["files"]
    assert fanned["status"] == walked["status"] == "complete"
    for key in ("size", "sha256"):  # the upload's own digest, from its root part
        assert fanned["source"][key] == walked["source"][key]
    files = {f["path"]: f for f in fanned["files"]}
    assert "vendor/foo-1.0.tar.xz!/foo-1.0/deeper/only.tar!/inner.tar.gz!/inner/x.c" in files
    assert "vendor/foo-1.0.tar.xz" not in files  # unpacked: a container, not a file
    assert files["vendor/fixture.tar.bz2"]["class"] == "identical"  # known: one file, never opened
    assert files["vendor/broken.tar.gz"]["unreadable"]  # all or nothing: none of its members
    assert not any(p.startswith("vendor/broken.tar.gz!/") for p in files)
    assert "decompression bomb" in files["vendor/bomb.tar.gz"]["unreadable"]
    assert files["vendor/man.1.gz"]["kind"] != "archive"  # a compressed page, not an archive
    # the upload, five nested archives at its top (the known one is not opened), three further down
    assert (len(fanned_scan.parts_open or ()), len(walked_scan.parts_open or ())) == (9, 1)
    assert fanned_scan.parts_open == fanned_scan.parts_closed
    assert fanned["stats"]["chunks"] == int(fanned_scan.chunks_done) > walked["stats"]["chunks"]


def test_the_members_limit_holds_across_parts(tmp_path: Path) -> None:
    many = {f"vendor/p{n}.tar.gz": tar_bytes({f"d/f{i}.txt": f"{n} {i}\n".encode() for i in range(600)})
            for n in (1, 2)}  # fmt: skip
    drop = make_tar(tmp_path / "many.tar", many, "")
    fanned, _ = scan_with({**EVERY, "MaxFiles": "1000"}, drop, tmp_path)
    walked, _ = scan_with({**NONE, "MaxFiles": "1000"}, drop, tmp_path)
    # each part stays within what its parent left it; all of them together do not
    assert (fanned["status"], fanned["reason"]) == (
        "rejected",
        "more than 1,000 archive members (3 parts together)",
    )
    assert walked["status"] == "rejected" and walked["reason"].startswith("more than 1,000 archive members")


def test_a_bomb_of_the_whole_upload_in_a_fanned_out_part_rejects_the_scan(tmp_path: Path) -> None:
    drop = make_tar(
        tmp_path / "one.tar",
        {"vendor/big.tar.gz": tar_bytes({f"d/f{i}.txt": f"{i}\n".encode() for i in range(1100)})},
        "",
    )
    with embedded(parameters={**EVERY, "MaxFiles": "1000"}) as stack:
        manifest, scan = scan_on(stack, drop)
    assert manifest["status"] == "rejected"
    assert manifest["reason"].startswith("more than 1,000 archive members (in vendor/big.tar.gz, after ")
    assert scan.parts_open == scan.parts_closed == {ROOT, "0.1"}


def test_a_part_killed_after_sending_a_chunk_is_redone_and_counted_once(tmp_path: Path) -> None:
    drop = nested_drop(tmp_path)
    with embedded(parameters={**FAST, **TIGHT, **EVERY}) as stack, Faults() as faults:
        svc = current_services()
        sent_by_part = lambda p: "Chunk" in p["QueueUrl"] and '"part":"0.' in p["MessageBody"]  # noqa: E731
        killed = faults.kill_after(svc.sqs, "SendMessage", when=sent_by_part)
        manifest_puts = faults.count(svc.s3, "PutObject", key_contains("manifest.json"))
        manifest, scan = scan_on(stack, drop)
        assert faults.fired[killed] == 1
        assert any(d.function == "UnpackFunction" and d.failed for d in stack.dispatcher.history)
        assert manifest["status"] == "complete"
        assert int(scan.chunks_done) == int(scan.chunks_total or 0) == manifest["stats"]["chunks"]
        assert manifest_puts() == 1
        assert len(stack.mailbox.for_scan(manifest["scan_id"])) == 1


def test_a_part_that_never_unpacks_is_given_up_by_the_sweeper(tmp_path: Path) -> None:
    drop = make_tar(
        tmp_path / "d.tar", {"a.c": b"int a;\n", "vendor/x.tar.gz": tar_bytes({"x/y.c": b"y\n"})}, ""
    )
    with embedded(parameters={**FAST, **EVERY}) as stack, Faults() as faults:
        svc = current_services()
        denied = s3_error("AccessDenied", 403)
        faults.error(svc.s3, "GetObject", denied, times=None, when=key_contains("/parts/"))
        _, scan_id = stack.client.upload_drop(drop, "acme")
        assert stack.dispatcher.drain(timeout=90)
        listed = stack.client.s3.list_objects_v2(
            Bucket=stack.names.results_bucket, Prefix=manifest_key("acme", scan_id)
        )
        assert not listed.get("KeyCount")  # the part message went to the dead-letter queue

        result = stack.dispatcher.run_scheduled(
            "SweeperFunction", at=datetime.now(UTC) + timedelta(minutes=1)
        )
        assert result["dead_lettered"] == [scan_id]
        assert stack.dispatcher.drain(timeout=60)
        body = stack.client.s3.get_object(
            Bucket=stack.names.results_bucket, Key=manifest_key("acme", scan_id)
        )["Body"].read()
        manifest = json.loads(body)
        assert manifest["status"] == "failed"
        assert manifest["reason"] == (
            "nested archive part 0.2 could not be unpacked: every delivery of its message failed "
            "(dead-letter queue)"
        )
        assert [f["path"] for f in manifest["files"]] == ["a.c"]  # what the upload's own part listed
        assert len(stack.mailbox.for_scan(scan_id)) == 1


# ------------------------------------------------------------------ a top-level tar split into segments
@pytest.mark.parametrize("compression", ["", "gz", "xz"])
def test_a_tar_split_by_the_byte_budget_gives_the_unsplit_manifest(tmp_path: Path, compression: str) -> None:
    files = {f"big/f{i:02d}.bin": os.urandom(100_000) for i in range(40)}  # 4 MB: four 1 MiB budgets
    files["big/" + "long-directory-name/" * 8 + "deep.c"] = b"int deep;\n"  # a pax header before it
    files["big/nested.tar.gz"] = tar_bytes({"n/a.c": b"int a;\n", "n/b.c": b"int b;\n"})
    drop = make_tar(tmp_path / f"big.tar{'.' + compression if compression else ''}", files, compression)
    split, split_scan = scan_with({"UnpackBudgetMiB": "1"}, drop, tmp_path)
    whole, whole_scan = scan_with({}, drop, tmp_path)
    assert split["files"] == whole["files"]
    assert len(split["files"]) == 43
    assert split["status"] == whole["status"] == "complete"
    assert (
        split["source"]["sha256"]
        == whole["source"]["sha256"]
        == hashlib.sha256(drop.read_bytes()).hexdigest()
    )
    assert split["source"]["size"] == drop.stat().st_size
    segments = sorted(p for p in split_scan.parts_open or () if "+" in p)
    assert len(segments) >= 3 and segments[:3] == ["0+1", "0+2", "0+3"]
    assert split_scan.parts_open == split_scan.parts_closed
    assert whole_scan.parts_open == {ROOT}


def test_a_path_repeated_in_two_segments_is_renamed_as_in_one_walk(tmp_path: Path) -> None:
    # Given a tar whose first and last members have the same name, split into segments by the budget
    drop = tmp_path / "dup.tar"
    with tarfile.open(drop, "w") as tar:
        members = [("big/dup.c", b"int first;\n")]
        members += [(f"big/f{i:02d}.bin", os.urandom(100_000)) for i in range(30)]
        members += [("big/dup.c", b"int second;\n")]
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    # When it is scanned split and whole
    split, split_scan = scan_with({"UnpackBudgetMiB": "1"}, drop, tmp_path)
    whole, _ = scan_with({}, drop, tmp_path)
    # Then the second copy gets the name one walk gives it, and the two manifests agree
    assert len([p for p in split_scan.parts_open or () if "+" in p]) >= 2
    assert split["files"] == whole["files"]
    paths = [f["path"] for f in split["files"]]
    assert len(paths) == len(set(paths)) == 32
    renamed = {f["path"]: f for f in split["files"]}["big/dup.c (duplicate 2)"]
    assert renamed["sha256"] == hashlib.sha256(b"int second;\n").hexdigest()
    assert "duplicate" in renamed["note"]


# ------------------------------------------------------------------ a zip split by its central directory
def big_zip(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    files = {f"big/f{i:02d}.bin": os.urandom(100_000) for i in range(40)}  # 4 MB: four 1 MiB ranges
    files["big/main.c"] = b"int main(void) { return 0; }\n" * 50
    files["big/nested.tar.gz"] = tar_bytes({"n/a.c": b"int a;\n", "n/b.c": b"int b;\n"})
    files["big/fixture.tar.bz2"] = FIXTURE  # known upstream: one file
    return make_zip(tmp_path / "big.zip", files), files


def test_a_zip_split_by_its_central_directory_gives_the_unsplit_manifest(tmp_path: Path) -> None:
    drop, _ = big_zip(tmp_path)
    split, split_scan = scan_with({"ZipPartMiB": "1"}, drop, tmp_path)
    whole, whole_scan = scan_with({"ZipPartMiB": "0"}, drop, tmp_path)
    assert split["files"] == whole["files"]
    assert len(split["files"]) == 44  # 42 files, the nested tar's two members
    files = {f["path"]: f for f in split["files"]}
    assert "big/nested.tar.gz!/n/b.c" in files
    assert files["big/fixture.tar.bz2"]["class"] == "identical"
    assert split["status"] == whole["status"] == "complete"
    assert split["source"]["sha256"] == whole["source"]["sha256"]
    assert split["source"]["sha256"] == hashlib.sha256(drop.read_bytes()).hexdigest()
    assert split["source"]["size"] == drop.stat().st_size
    assert split_scan.parts_open == split_scan.parts_closed == {ROOT, "0+1", "0+2", "0+3", "0+4"}
    assert whole_scan.parts_open == {ROOT}


def test_a_limit_holds_across_the_ranges(tmp_path: Path) -> None:
    drop, _ = big_zip(tmp_path)  # 44 entries, about 11 a range: 30 is passed only by the ranges together
    split, _ = scan_with({"ZipPartMiB": "1", "MaxFiles": "30"}, drop, tmp_path)
    whole, _ = scan_with({"ZipPartMiB": "0", "MaxFiles": "30"}, drop, tmp_path)
    assert split["status"] == whole["status"] == "rejected"
    assert "more than 30 archive members" in split["reason"]
    assert "more than 30 archive members" in whole["reason"]


def test_a_zip_whose_central_directory_is_damaged_is_walked_whole(tmp_path: Path) -> None:
    drop, _ = big_zip(tmp_path)
    data = bytearray(drop.read_bytes())
    directory = data.rfind(b"PK\x05\x06")
    data[directory : directory + 4] = b"XXXX"  # no end record: the central directory cannot be found
    drop.write_bytes(bytes(data))
    split, split_scan = scan_with({"ZipPartMiB": "1"}, drop, tmp_path)
    whole, _ = scan_with({"ZipPartMiB": "0"}, drop, tmp_path)
    assert split["files"] == whole["files"]
    assert len(split["files"]) == 44  # the members, read from their local headers as a stream
    assert split_scan.parts_open == {ROOT}


def test_a_range_that_never_unpacks_is_given_up_by_the_sweeper(tmp_path: Path) -> None:
    drop, _ = big_zip(tmp_path)
    with drop.open("rb") as f:
        ranges = zipsplit.plan(f, 1 << 20)
    assert ranges is not None
    second = f"bytes={ranges[1].start}-{ranges[1].end - 1}"
    with embedded(parameters={**FAST, "ZipPartMiB": "1"}) as stack, Faults() as faults:
        svc = current_services()
        denied = s3_error("AccessDenied", 403)
        faults.error(svc.s3, "GetObject", denied, times=None, when=lambda p: p.get("Range") == second)
        _, scan_id = stack.client.upload_drop(drop, "acme")
        assert stack.dispatcher.drain(timeout=90)
        result = stack.dispatcher.run_scheduled(
            "SweeperFunction", at=datetime.now(UTC) + timedelta(minutes=1)
        )
        assert result["dead_lettered"] == [scan_id], (result, svc.scans.get(scan_id))
        assert stack.dispatcher.drain(timeout=60)
        body = stack.client.s3.get_object(
            Bucket=stack.names.results_bucket, Key=manifest_key("acme", scan_id)
        )["Body"].read()
        manifest = json.loads(body)
        assert manifest["status"] == "failed"
        assert manifest["reason"] == (
            "segment 0+2 could not be unpacked: every delivery of its message failed (dead-letter queue)"
        )
        listed = {f["path"] for f in manifest["files"]}
        assert "big/f00.bin" in listed and len(listed) == 44 - ranges[1].entries  # the other ranges
        assert len(stack.mailbox.for_scan(scan_id)) == 1

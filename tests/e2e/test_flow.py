"""The whole flow on the embedded stack: upload, unpack, lookup, finalize, manifest, notification."""

from __future__ import annotations

import email
import email.policy
import hashlib
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from dropscan.audit.manifest import validate
from dropscan.cli import main
from dropscan.local.embedded import EmbeddedStack
from dropscan.store.stack import IngestFailed

from helpers.builders import DROP_FILES, EXPECTED_CLASSES, UPSTREAM_FILES, make_tar, make_zip, tar_bytes
from helpers.flows import scan_and_wait


def scan(stack: EmbeddedStack, drop: Path, supplier: str = "acme") -> tuple[dict[str, Any], list[Any]]:
    done = scan_and_wait(stack, drop, supplier)
    return done.manifest, done.notifications


def classes(manifest: dict[str, Any]) -> dict[str, str]:
    return {f["path"]: f["class"] for f in manifest["files"]}


def test_cli_scan_classifies_every_file_and_sends_the_summary(
    tmp_path: Path, upstream_archive: Path, drop_archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "manifest.json"
    rc = main(
        ["scan", str(drop_archive), "--upstream", f"foo@1.0={upstream_archive}", "--supplier", "acme",
         "--manifest-out", str(out), "--data-dir", str(tmp_path / "data"), "--eml-dir", str(tmp_path / "eml")]
    )  # fmt: skip
    assert rc == 0
    manifest = json.loads(out.read_text())
    validate(manifest)
    assert classes(manifest) == EXPECTED_CLASSES
    assert manifest["summary"]["review"] == 2
    [component] = manifest["components"]
    assert (component["package"], component["version"], component["missing"]) == (
        "foo",
        "1.0",
        ["doc/notes.txt"],
    )
    [eml] = list((tmp_path / "eml").glob("*.eml"))
    mail = email.message_from_bytes(eml.read_bytes(), policy=email.policy.default)
    assert mail["Subject"] == "dropscan: acme/foo-1.0-acme.tar.gz — review: 2 of 8 files (25.0%) need review"
    # the component line is its baseline: the release and what the vendor changed in it (review evidence)
    line = (
        "foo 1.0 + 1 vendor-changed file [foo-1.0-acme/] — high trust, upstream licence GPL-2.0-only"
        " (GNU General Public License v2.0 only), 8 files"
    )
    assert line in mail.get_content()
    # a local run's e-mail links the files it wrote, which a local reader can open
    assert f"  html       {(tmp_path / 'report.html').as_uri()}" in mail.get_content()
    assert "X-Amz-" not in mail.get_content()
    printed = capsys.readouterr().out
    assert "modified  foo-1.0-acme/util.h" in printed
    assert f"  html       {tmp_path / 'report.html'}" in printed
    assert f"Database:  {tmp_path / 'data'} (embedded; 1 package, 1 release: foo 1.0)" in printed
    assert manifest["database"] | {"table": ""} == {
        "kind": "embedded", "location": str(tmp_path / "data"), "table": "", "packages": 1, "releases": 1,
        "held": {"foo": ["1.0"]},
    }  # fmt: skip
    # the reports beside the local copy of the manifest
    assert sorted(p.name for p in tmp_path.glob("sbom.*")) == ["sbom.cdx.json", "sbom.spdx.json"]
    assert "foo-1.0-acme/" in (tmp_path / "report.html").read_text()


def test_notification_carries_filterable_attributes(
    stack: EmbeddedStack, upstream_archive: Path, drop_archive: Path
) -> None:
    stack.client.ingest(upstream_archive, "foo", "1.0")
    manifest, [note] = scan(stack, drop_archive, supplier="acme")
    assert note.attributes == {
        "supplier": "acme",
        "scan_id": manifest["scan_id"],
        "status": "complete",
        "verdict": "review",
        "review": "2",
    }
    assert note.subject.startswith("dropscan: acme/foo-1.0-acme.tar.gz")


def test_the_stacks_manifest_and_e_mail_name_the_database_the_drop_was_answered_from(
    stack: EmbeddedStack, upstream_archive: Path, drop_archive: Path, tmp_path: Path
) -> None:
    # Given a database of two releases of foo and one of bar
    stack.client.ingest(upstream_archive, "foo", "1.0")
    stack.client.ingest(make_tar(tmp_path / "foo-1.1.tar.gz", {"foo-1.1/a.c": b"int a;\n"}), "foo", "1.1")
    stack.client.ingest(make_tar(tmp_path / "bar-2.0.tar.gz", {"bar-2.0/b.c": b"int b;\n"}), "bar", "2.0")
    # When a drop is scanned by the stack alone (no command line to add what it knows)
    manifest, [note] = scan(stack, drop_archive)
    # Then finalize wrote what the database held, and the published e-mail says it
    table = stack.names.upstream_table
    assert manifest["database"] == {
        "kind": "stack", "location": table, "table": table, "packages": 2, "releases": 3,
        "held": {"bar": ["2.0"], "foo": ["1.0", "1.1"]},
    }  # fmt: skip
    assert f"Database:  {table} (stack; 2 packages, 3 releases: bar 2.0; foo 1.0, 1.1)" in note.message


def test_the_same_upload_twice_is_one_scan_one_manifest_one_notification(
    stack: EmbeddedStack, upstream_archive: Path, drop_archive: Path
) -> None:
    stack.client.ingest(upstream_archive, "foo", "1.0")
    first, _ = scan(stack, drop_archive)
    again, notes_again = scan(stack, drop_archive)
    assert first["scan_id"] == again["scan_id"]
    assert len(notes_again) == 1


def test_nested_archives_are_unpacked_with_bang_paths(stack: EmbeddedStack, tmp_path: Path) -> None:
    upstream = make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES)
    stack.client.ingest(upstream, "foo", "1.0")
    inner = tar_bytes({k.replace("foo-1.0-acme", "foo-1.0"): v for k, v in DROP_FILES.items()}, "xz")
    drop = make_zip(tmp_path / "bundle.zip", {"sources/foo-1.0.tar.xz": inner, "sources/NOTICE": b"acme\n"})
    manifest, _ = scan(stack, drop)
    got = classes(manifest)
    assert got["sources/foo-1.0.tar.xz!/foo-1.0/util.h"] == "modified"
    assert got["sources/foo-1.0.tar.xz!/foo-1.0/main.c"] == "vcs-keywords"
    assert got["sources/NOTICE"] == "added"
    assert "sources/foo-1.0.tar.xz" not in got  # a container, not a file
    prefixes = {c["prefix"]: c for c in manifest["components"]}
    assert prefixes["sources/foo-1.0.tar.xz!/"]["package"] == "foo"


def test_nested_archive_known_upstream_is_one_identical_file(stack: EmbeddedStack, tmp_path: Path) -> None:
    fixture = tar_bytes({"data/a.txt": b"fixture data\n"}, "bz2")
    upstream = make_tar(tmp_path / "bar-2.0.tar.gz", {"bar-2.0/testsuite/fixture.tar.bz2": fixture,
                                                      "bar-2.0/main.c": b"int main;\n"})  # fmt: skip
    stack.client.ingest(upstream, "bar", "2.0")
    drop = make_tar(tmp_path / "bar-acme.tar.gz", {"bar-2.0/testsuite/fixture.tar.bz2": fixture,
                                                   "bar-2.0/main.c": b"int main;\n"})  # fmt: skip
    manifest, _ = scan(stack, drop)
    assert classes(manifest) == {
        "bar-2.0/testsuite/fixture.tar.bz2": "identical",
        "bar-2.0/main.c": "identical",
    }


def test_corrupt_archive_ends_failed_with_reason_and_notification(
    stack: EmbeddedStack, tmp_path: Path
) -> None:
    good = tar_bytes({f"x/f{i}.txt": f"file {i}\n".encode() * 2000 for i in range(50)}, "gz")
    drop = tmp_path / "truncated.tar.gz"
    drop.write_bytes(good[: len(good) // 2])
    manifest, [note] = scan(stack, drop)
    validate(manifest)
    assert manifest["status"] == "failed"
    assert "corrupt or truncated" in manifest["reason"]
    assert note.attributes["status"] == "failed"


def test_upload_outside_a_supplier_prefix_is_rejected(stack: EmbeddedStack, tmp_path: Path) -> None:
    drop = make_tar(tmp_path / "x.tar.gz", {"a/b.txt": b"b\n"})
    stack.client.s3.upload_file(str(drop), stack.names.drops_bucket, "drops/x.tar.gz")
    stack.dispatcher.drain(timeout=60)
    [note] = stack.mailbox.fetch()
    assert note.attributes["status"] == "rejected"
    assert "drops/<supplier>/<name>" in note.message


def test_non_archive_upload_is_scanned_as_one_file(stack: EmbeddedStack, tmp_path: Path) -> None:
    drop = tmp_path / "patch.diff"
    drop.write_bytes(b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    manifest, _ = scan(stack, drop)
    assert manifest["status"] == "complete"
    assert classes(manifest) == {"patch.diff": "added"}


def test_empty_upload_is_rejected(stack: EmbeddedStack, tmp_path: Path) -> None:
    drop = tmp_path / "empty.tar.gz"
    drop.write_bytes(b"")
    manifest, notes = scan(stack, drop)
    assert (manifest["status"], manifest["reason"]) == ("rejected", "empty upload")
    assert len(notes) == 1


def test_bad_usage_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(tmp_path / "missing.tar.gz")]) == 2
    assert "no such drop archive" in capsys.readouterr().err
    drop = make_tar(tmp_path / "d.tar.gz", {"a": b"a"})
    assert main(["scan", str(drop), "--upstream", "nonsense"]) == 2


def test_a_truncated_upstream_release_fails_its_ingest_and_leaves_no_digest(
    stack: EmbeddedStack, tmp_path: Path
) -> None:
    # Given an upstream release cut off in its last member, its first members readable
    files = {f"foo-2.0/f{i:04d}.bin": os.urandom(1024) for i in range(3000)}  # more than a page of files
    whole = make_tar(tmp_path / "whole.tar", files, "")
    with tarfile.open(whole) as tar:
        last = tar.getmembers()[2500]
    cut = tmp_path / "foo-2.0.tar"
    cut.write_bytes(whole.read_bytes()[: last.offset_data + 100])  # in the middle of member 2,501
    # When it is ingested
    with pytest.raises(IngestFailed, match=r"foo@2\.0"):
        stack.client.ingest(cut, "foo", "2.0")
    # Then the database says nothing of it: no release, and none of the digests walked before the cut
    assert "foo" not in stack.client.db.packages()
    walked = [hashlib.sha256(data).hexdigest() for data in list(files.values())[:2500]]
    assert stack.client.db.lookup(walked) == {}

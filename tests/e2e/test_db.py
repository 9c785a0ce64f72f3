"""The upstream database outlives a run, travels as a dump, and takes plain hash lists."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dropscan.cli import main

from helpers.builders import EXPECTED_CLASSES, UPSTREAM_FILES, make_tar
from helpers.flows import cli_scan


def scan_classes(drop: Path, data: Path, tmp_path: Path) -> dict[str, str]:
    return {f["path"]: f["class"] for f in cli_scan(drop, data, tmp_path / "m.json")["files"]}


def ingest(archive: Path, data: Path) -> None:
    assert main(["ingest", str(archive), "--data-dir", str(data), "--quiet"]) == 0  # the name says foo 1.0


def test_a_release_ingested_once_serves_later_scans(
    tmp_path: Path, upstream_archive: Path, drop_archive: Path
) -> None:
    ingest(upstream_archive, tmp_path / "data")
    assert scan_classes(drop_archive, tmp_path / "data", tmp_path) == EXPECTED_CLASSES


def test_a_scan_saves_the_releases_it_ingested_for_the_next_scan(
    tmp_path: Path, upstream_archive: Path, drop_archive: Path
) -> None:
    # Given a scan that ingests its upstream first (the database is saved beside the scan, by a child)
    data = tmp_path / "data"
    out = tmp_path / "first.json"
    argv = ["scan", str(drop_archive), "--upstream", f"foo@1.0={upstream_archive}", "--supplier", "acme"]
    assert main([*argv, "--quiet", "--data-dir", str(data), "--manifest-out", str(out)]) == 0
    assert (data / "upstream-db.jsonl.gz").is_file()
    assert not (data / "upstream-db.jsonl.gz.tmp").exists()
    # When the next scan names no upstream, Then it finds the release all the same
    assert scan_classes(drop_archive, data, tmp_path) == EXPECTED_CLASSES


def test_trust_changes_without_reingesting(
    tmp_path: Path, upstream_archive: Path, drop_archive: Path
) -> None:
    data = tmp_path / "data"
    ingest(upstream_archive, data)
    assert main(["db", "trust", "foo", "low", "--data-dir", str(data)]) == 0
    classes = scan_classes(drop_archive, data, tmp_path)
    assert classes["foo-1.0-acme/Makefile"] == "low-trust"
    assert classes["foo-1.0-acme/main.c"] == "low-trust"


def test_export_then_import_twice_merges_without_duplicates(
    tmp_path: Path, upstream_archive: Path, drop_archive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, dump = tmp_path / "a", tmp_path / "b", tmp_path / "db.jsonl.gz"
    ingest(upstream_archive, first)
    assert main(["db", "export", str(dump), "--data-dir", str(first)]) == 0
    capsys.readouterr()
    assert main(["db", "import", str(dump), "--data-dir", str(second)]) == 0
    assert json.loads(capsys.readouterr().out)["written"] > 0
    assert main(["db", "import", str(dump), "--data-dir", str(second)]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == 0
    assert scan_classes(drop_archive, second, tmp_path) == EXPECTED_CLASSES


def test_sha256sum_list_is_a_known_good_release(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for path, content in UPSTREAM_FILES.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(content)
    listing = subprocess.run(
        ["sha256sum", *sorted(UPSTREAM_FILES)], cwd=tree, capture_output=True, check=True
    )
    (tmp_path / "sums.txt").write_bytes(listing.stdout)
    data = tmp_path / "data"
    argv = ["db", "import", str(tmp_path / "sums.txt"), "--package", "foo", "--version", "1.0"]
    assert main([*argv, "--data-dir", str(data)]) == 0
    drop_files = {"foo-x/Makefile": UPSTREAM_FILES["foo-1.0/Makefile"], "foo-x/README": b"changed\n"}
    drop = make_tar(tmp_path / "d.tar.gz", drop_files)
    assert scan_classes(drop, data, tmp_path) == {"foo-x/Makefile": "identical", "foo-x/README": "modified"}


def test_hash_list_import_needs_a_release_name(tmp_path: Path) -> None:
    (tmp_path / "sums.txt").write_text("0" * 64 + "  a.c\n")
    assert main(["db", "import", str(tmp_path / "sums.txt"), "--data-dir", str(tmp_path / "d")]) == 2

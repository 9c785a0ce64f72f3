"""The acceptance case: a BusyBox drop built by ../shared/cases, checked against its ground truth."""

from __future__ import annotations

import email
import email.policy
import json
from pathlib import Path

import pytest

from dropscan.audit.manifest import validate
from dropscan.cli import main

from helpers.builders import busybox_case as build_busybox_case

RECIPE = "busybox.json"


@pytest.fixture(scope="module")
def busybox_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_busybox_case(tmp_path_factory.mktemp("busybox-case"))


@pytest.mark.acceptance
def test_busybox_drop_matches_ground_truth_on_every_file(
    busybox_case: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    expected = json.loads((busybox_case / "expected.json").read_text())
    upstreams = (busybox_case / "upstreams.txt").read_text().split()
    argv = ["scan", str(busybox_case / expected["drop"]), "--supplier", "acme", "--quiet"]
    argv += ["--manifest-out", str(tmp_path / "m.json"), "--data-dir", str(tmp_path / "data")]
    argv += ["--eml-dir", str(tmp_path / "eml")]
    for u in upstreams:
        argv += ["--upstream", u]

    capfd.readouterr()  # what building the case printed
    assert main(argv) == 0
    # a clean scan of valid input prints nothing under --quiet: no decompressor's chatter on the way
    # (upstream's tarball holds two broken .bz2 test inputs), no warning, no progress
    assert capfd.readouterr() == ("", "")

    manifest = json.loads((tmp_path / "m.json").read_text())
    validate(manifest)
    got = {f["path"]: f["class"] for f in manifest["files"]}
    want = {p: v["class"] for p, v in expected["files"].items()}
    wrong = {p: (want.get(p), got.get(p)) for p in set(got) | set(want) if want.get(p) != got.get(p)}
    assert wrong == {}
    assert manifest["source"]["sha256"] == expected["sha256"]
    [component] = manifest["components"]
    assert (component["package"], component["version"]) == ("busybox", "1.35.0")
    deleted = {p.split("/", 1)[1] for c in expected["components"] for p in c["deleted"]}
    assert set(component["missing"]) == deleted
    [eml] = list((tmp_path / "eml").glob("*.eml"))
    mail = email.message_from_bytes(eml.read_bytes(), policy=email.policy.default)
    summary = manifest["summary"]
    assert f"{summary['review']} of {summary['files']:,} files" in mail["Subject"]
    # the baseline line: no history in the database, so every modified file is vendor-changed
    assert summary["backported"] == 0 and summary["vendor_changed"] == component["classes"]["modified"]
    changed = f"{summary['vendor_changed']} vendor-changed files"
    assert f"busybox 1.35.0 + {changed} [busybox-1.35.0-acme/]" in mail.get_content()

    flags = {(f["path"].split("/", 1)[1], f["kind"]): f for f in manifest["flags"]}
    noncommercial = flags["lib/acme_crc.c", "non-commercial"]
    assert (noncommercial["severity"], noncommercial["line"]) == ("action-required", 4)
    assert "non-commercial use" in noncommercial["evidence"]
    assert flags["drivers/acme/blob_0.o", "prebuilt-binary"]["evidence"].startswith("ELF 64-bit")
    # build_case.py cycles the vendor files through four headers: proprietary, BSD, GPL, reserved
    vendor = sorted(p.split("/", 1)[1] for p in expected["files"] if "/drivers/acme/acme_" in p)
    assert vendor
    for i, path in enumerate(vendor):
        kind = {0: "proprietary", 1: "license-different", 2: None, 3: "no-license-grant"}[i % 4]
        found = sorted(k for p, k in flags if p == path)
        assert found == ([kind] if kind else []), path
    assert "CONFIDENTIAL AND PROPRIETARY" in flags[vendor[0], "proprietary"]["evidence"]
    assert manifest["verdict"] == "action-required"
    assert "Red flags" in mail.get_content()
    assert set(manifest["reports"]) == {"html", "spdx", "cyclonedx"}

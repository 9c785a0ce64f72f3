"""The acceptance case: a BusyBox drop built by ../shared/cases, checked against its ground truth."""

from __future__ import annotations

import email
import email.policy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dropscan.cli import main
from dropscan.manifest import validate

from builders import cases_dir

RECIPE = "busybox.json"


@pytest.fixture(scope="module")
def busybox_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache, src = cases_dir(), os.environ.get("DROPSCAN_CASES_SRC")
    if cache is None or not src or not (cache / "busybox_1.35.0.orig.tar.bz2").is_file():
        if os.environ.get("DROPSCAN_REQUIRE_CASES"):
            pytest.fail("acceptance data missing: run `make cases`")
        pytest.skip("acceptance data not downloaded (make cases)")
    out = tmp_path_factory.mktemp("busybox-case")
    subprocess.run(
        [
            sys.executable,
            str(Path(src) / "build_case.py"),
            str(Path(src) / RECIPE),
            "--cache",
            str(cache),
            "--out",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


@pytest.mark.acceptance
def test_busybox_drop_matches_ground_truth_on_every_file(busybox_case: Path, tmp_path: Path) -> None:
    expected = json.loads((busybox_case / "expected.json").read_text())
    upstreams = (busybox_case / "upstreams.txt").read_text().split()
    argv = ["scan", str(busybox_case / expected["drop"]), "--supplier", "acme", "--quiet"]
    argv += ["--manifest-out", str(tmp_path / "m.json"), "--data-dir", str(tmp_path / "data")]
    argv += ["--eml-dir", str(tmp_path / "eml")]
    for u in upstreams:
        argv += ["--upstream", u]

    assert main(argv) == 0

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
    assert "busybox 1.35.0 [busybox-1.35.0-acme/]" in mail.get_content()

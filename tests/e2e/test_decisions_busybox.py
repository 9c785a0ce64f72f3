"""The acceptance flow of issue 25 on the BusyBox drop: scan it, accept its whole review set, then scan
the supplier's next drop of the product, made from the first in this test: three reviewed files and two
upstream-identical files edited, one file added. Only those six are reviewed again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dropscan.audit.manifest import validate
from dropscan.cli import main

from helpers.builders import busybox_case, next_drop


@pytest.fixture(scope="module")
def busybox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return busybox_case(tmp_path_factory.mktemp("busybox-case"))


def inner(path: str) -> str:
    return path.split("/", 1)[1]


def review_set(m: dict[str, Any]) -> set[str]:
    return {
        inner(f["path"])
        for f in m["files"]
        if f["class"] in ("modified", "added")
        and not (f.get("decision", {}).get("verdict") == "accepted" and not f["decision"].get("reopened"))
    }


@pytest.mark.acceptance
def test_busybox_second_drop_is_reviewed_only_where_it_changed(
    busybox: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    expected = json.loads((busybox / "expected.json").read_text())
    first = busybox / expected["drop"]
    base = ["--supplier", "acme", "--data-dir", str(data), "--quiet"]
    upstreams = [a for u in (busybox / "upstreams.txt").read_text().split() for a in ("--upstream", u)]
    assert main(["scan", str(first), *base, *upstreams, "--manifest-out", str(tmp_path / "m1.json")]) == 0
    m1 = json.loads((tmp_path / "m1.json").read_text())
    first_review = review_set(m1)
    assert len(first_review) == 207 and m1["delta"] is None

    argv = ["decide", str(tmp_path / "m1.json"), "--all-review", "--verdict", "accepted", "--by", "auditor"]
    assert main([*argv, "--data-dir", str(data)]) == 0
    contents = {f["sha256"] for f in m1["files"] if inner(f["path"]) in first_review}
    assert json.loads(capsys.readouterr().out)["decisions"] == len(contents)  # one per content

    reviewed = sorted(p for p in first_review if p.endswith(".c") and not p.startswith("drivers/acme/"))[:3]
    identical = sorted(inner(p) for p, v in expected["files"].items()
                       if v["class"] == "identical" and p.endswith(".c"))[:2]  # fmt: skip
    added = "drivers/acme/board_v2.c"
    second = next_drop(first, tmp_path / "acme-busybox-1.35.1-gpl.tar.gz", reviewed + identical, added)
    assert main(["scan", str(second), *base, "--manifest-out", str(tmp_path / "m2.json")]) == 0
    m2 = json.loads((tmp_path / "m2.json").read_text())
    validate(m2)

    assert review_set(m2) == {*reviewed, *identical, added}
    assert m2["summary"]["review"] == 6
    assert m2["summary"]["cleared"] == len(first_review) - 3
    assert {inner(p) for p in m2["delta"]["changed"]} == {*reviewed, *identical}
    assert [inner(p) for p in m2["delta"]["new"]] == [added] and m2["delta"]["removed"] == []
    assert m2["delta"]["previous"]["scan_id"] == m1["scan_id"]
    from dropscan.reports.summary import subject

    assert f"review: 6 of {m2['summary']['files']:,} files" in subject(m2)
    assert subject(m2).endswith("6 new since 1.35.0")
    # the accepted vendor files carry their flags still, marked as seen by the auditor
    assert all(f.get("cleared") for f in m2["flags"] if inner(f["path"]) not in review_set(m2))

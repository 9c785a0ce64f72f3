"""The audit remembers: decisions recorded once on content and reused by later drops of a product,
re-opened when a file carries something new, shared through export and import; the delta with the
supplier's previous drop; the history of a product. Each step is a separate `dropscan` run on one
--data-dir, as an auditor would work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dropscan.audit.manifest import validate
from dropscan.cli import main

from helpers.builders import make_tar
from helpers.product_drops import UPSTREAM, first_drop, review_set, second_drop


def scan(drop: Path, data: Path, out: Path, *extra: str, upstream: Path | None = None) -> dict[str, Any]:
    argv = ["scan", str(drop), "--supplier", "acme", "--data-dir", str(data), "--quiet"]
    argv += ["--manifest-out", str(out), *extra]
    if upstream is not None:
        argv += ["--upstream", f"widget@1.0={upstream}"]
    assert main(argv) == 0
    manifest: dict[str, Any] = json.loads(out.read_text())
    validate(manifest)
    return manifest


@pytest.fixture
def drops(tmp_path: Path) -> dict[str, Path]:
    first = first_drop()
    second, _, _ = second_drop(first)
    return {
        "upstream": make_tar(tmp_path / "widget-1.0.tar.gz", UPSTREAM),
        "1.0": make_tar(tmp_path / "acme-widget-1.0-gpl.tar.gz", first),
        "1.1": make_tar(tmp_path / "acme-widget-1.1-gpl.tar.gz", second),
    }


def test_a_second_drop_is_reviewed_only_where_it_changed(
    drops: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    m1 = scan(drops["1.0"], data, tmp_path / "m1.json", upstream=drops["upstream"])
    first_review = review_set(m1)
    assert len(first_review) == 8 and m1["delta"] is None and m1["summary"]["cleared"] == 0
    assert m1["product"] == "acme-widget-gpl"

    argv = ["decide", str(tmp_path / "m1.json"), "--all-review", "--verdict", "accepted", "--by", "alice"]
    assert main([*argv, "--note", "cleared in the 1.0 audit", "--data-dir", str(data)]) == 0
    recorded = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (recorded["decisions"], recorded["added"]) == (8, 8)

    m2 = scan(drops["1.1"], data, tmp_path / "m2.json")
    _, changed, new = second_drop(first_drop())
    assert review_set(m2) == changed | new  # the three reviewed files edited, two identical ones, one added
    assert m2["summary"]["review"] == 6
    assert m2["summary"]["cleared"] == len(first_review) - 3
    assert set(m2["delta"]["changed"]) == changed and set(m2["delta"]["new"]) == new
    assert m2["delta"]["removed"] == []
    assert m2["delta"]["previous"] | {"finished_at": None} == {
        "scan_id": m1["scan_id"], "key": m1["source"]["key"], "finished_at": None, "version": "1.0"
    }  # fmt: skip
    assert m2["summary"]["delta"] == {"new": 1, "changed": 5, "removed": 0}
    cleared = {f["path"]: f["decision"] for f in m2["files"] if f.get("decision")}
    secret = cleared["widget-1.1-acme/acme/secret.c"]
    assert (secret["verdict"], secret["by"], secret["scope"], secret["scan_id"]) == (
        "accepted", "alice", "supplier", m1["scan_id"]
    )  # fmt: skip
    assert secret["note"] == "cleared in the 1.0 audit" and not secret.get("reopened")
    # the proprietary flag was seen when the file was accepted: kept, marked, not counted
    [flag] = [f for f in m2["flags"] if f["path"] == "widget-1.1-acme/acme/secret.c"]
    assert flag["cleared"] is True and m2["summary"]["flags"]["action-required"] == 0
    assert m2["verdict"] == "review"

    # the e-mail says it
    assert main(["report", str(tmp_path / "m2.json")]) == 0
    text = capsys.readouterr().out
    assert "5 cleared by earlier decisions" in text
    from dropscan.reports.summary import subject

    assert subject(m2).endswith("review: 6 of 28 files (21.4%), 6 new since 1.0")

    # and the product's history lists both scans
    assert (
        main(["history", "--supplier", "acme", "--product", "acme-widget-gpl", "--data-dir", str(data)]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "acme-widget-1.0-gpl.tar.gz" in lines[1] and "acme-widget-1.1-gpl" in lines[2]
    assert lines[2].split()[-6:] == ["28", "6", "5", "1", "5", "0"]


def test_a_decision_reopens_when_a_red_flag_appears_in_its_file(
    drops: dict[str, Path], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    scan(drops["1.0"], data, tmp_path / "m1.json", upstream=drops["upstream"])
    argv = ["decide", str(tmp_path / "m1.json"), "--all-review", "--verdict", "accepted", "--by", "alice"]
    assert main([*argv, "--data-dir", str(data), "--quiet"]) == 0

    # the same board configuration, now in a drop for a MIPS device: it selects ARM
    again = make_tar(
        tmp_path / "acme-widget-1.0.1-gpl.tar.gz", {**first_drop(), "widget-1.0-acme/NEWS": b"1\n"}
    )
    m = scan(again, data, tmp_path / "m2.json", "--arch", "mips")
    config = next(f for f in m["files"] if f["path"].endswith("board_defconfig"))
    assert config["decision"]["reopened"] is True
    assert "new red flag: arch-mismatch" in config["decision"]["reopen_reason"]
    assert review_set(m) == {config["path"], "widget-1.0-acme/NEWS"}
    assert m["summary"]["decisions"]["reopened"] == 1 and m["summary"]["cleared"] == 7
    assert m["verdict"] == "action-required"  # the new flag counts; the accepted proprietary one does not


def test_rejected_and_needs_action_raise_the_verdict(drops: dict[str, Path], tmp_path: Path) -> None:
    data = tmp_path / "data"
    scan(drops["1.0"], data, tmp_path / "m1.json", upstream=drops["upstream"])
    base = ["decide", str(tmp_path / "m1.json"), "--by", "bob", "--data-dir", str(data), "--quiet"]
    assert main([*base, "--all-review", "--verdict", "accepted"]) == 0
    assert main([*base, "--path", "widget-1.0-acme/acme/board.c", "--verdict", "rejected"]) == 0
    assert main([*base, "--path", "widget-1.0-acme/README", "--verdict", "accepted"]) == 2  # not in review

    m = scan(drops["1.1"], data, tmp_path / "m2.json")
    board = next(f for f in m["files"] if f["path"] == "widget-1.1-acme/acme/board.c")
    assert board["decision"]["verdict"] == "rejected" and board["path"] in review_set(m)
    assert m["summary"]["decisions"]["rejected"] == 1 and m["verdict"] == "action-required"


def test_exported_decisions_give_a_fresh_data_dir_the_same_second_manifest(
    drops: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, fresh = tmp_path / "data", tmp_path / "fresh"
    scan(drops["1.0"], data, tmp_path / "m1.json", upstream=drops["upstream"])
    argv = ["decide", str(tmp_path / "m1.json"), "--all-review", "--verdict", "accepted", "--by", "alice"]
    assert main([*argv, "--data-dir", str(data), "--quiet"]) == 0
    exported = tmp_path / "decisions.json"
    assert main(["decisions", "export", str(exported), "--data-dir", str(data)]) == 0
    m2 = scan(drops["1.1"], data, tmp_path / "m2.json")
    capsys.readouterr()

    assert main(["decisions", "import", str(exported), "--data-dir", str(fresh)]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == 8
    assert (
        main(["decisions", "import", str(exported), "--data-dir", str(fresh)]) == 0
    )  # merges, no duplicates
    assert json.loads(capsys.readouterr().out) | {} == {
        "decisions": 8, "added": 0, "updated": 0, "unchanged": 8, "superseded": 0
    }  # fmt: skip
    assert main(["decisions", "list", "--supplier", "acme", "--json", "--data-dir", str(fresh)]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 8
    assert main(["decisions", "list", "--supplier", "other", "--json", "--data-dir", str(fresh)]) == 0
    assert json.loads(capsys.readouterr().out) == []  # a supplier never sees another's decisions

    scan(drops["1.0"], fresh, tmp_path / "f1.json", upstream=drops["upstream"])
    f2 = scan(drops["1.1"], fresh, tmp_path / "f2.json")
    assert strip(f2) == strip(m2)


def strip(m: dict[str, Any]) -> dict[str, Any]:
    """A manifest without what differs between two runs of the same scan on two stacks (times, call
    counts, the object version S3 gave the upload, the ids derived from each stack's bucket name, and
    the database's folder and table)."""
    volatile = {"created_at", "finished_at", "stats", "triage", "scan_id", "reports", "database"}
    out = {k: v for k, v in m.items() if k not in volatile}
    out["source"] = {k: v for k, v in m["source"].items() if k not in ("version_id", "bucket")}
    previous = dict(m["delta"]["previous"], finished_at=None, scan_id=None)
    out["delta"] = dict(m["delta"], previous=previous)
    return out

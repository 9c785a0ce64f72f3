"""The review desk's index of a scan (dropscan.web.index): what it keeps of a manifest is what the
desk would read of the manifest itself."""

from __future__ import annotations

from typing import Any

import pytest

from dropscan.audit.decision_rules import DecisionError, record
from dropscan.web import review
from dropscan.web.index import Index, build, parse_line


def manifest() -> dict[str, Any]:
    files: list[dict[str, Any]] = [
        {"path": "w/a.c", "sha256": "a" * 64, "class": "modified", "component": "w/",
         "licenses": [{"expression": "GPL-2.0-only", "line": 1}],
         "evidence": {"origin": "vendor", "hunks": [{"commit": "c1", "origin": "upstream"}]}},
        {"path": "w/b.c", "sha256": "b" * 64, "class": "added", "component": "w/",
         "decision": {"verdict": "accepted", "by": "ann", "at": "2026-01-01T00:00:00+00:00"}},
        {"path": "w/copy.c", "sha256": "a" * 64, "class": "modified", "component": "w/"},
        {"path": "w/same.c", "sha256": "c" * 64, "class": "unchanged", "component": "w/"},
        {"path": "<img src=x>.c", "sha256": "d" * 64, "class": "added", "component": ""},
    ]  # fmt: skip
    flags = [
        {
            "path": "w/a.c",
            "kind": "proprietary",
            "severity": "action-required",
            "detail": "a notice",
            "line": 3,
        },
        {"path": "w/a.c", "kind": "binary", "severity": "review"},
    ]
    return {
        "scan_id": "s-" + "1" * 24, "supplier": "acme", "status": "complete", "verdict": "action-required",
        "source": {"key": "drops/acme/w-1.0.tar.gz"}, "summary": {"files": 5, "review": 4},
        "components": [{"prefix": "w/", "package": "w", "version": "1.0", "identified": True}],
        "evidence": {"commits": {"c1": {"subject": "fix it", "release": "1.1"}, "c2": {"subject": "other"}}},
        "delta": {"previous": {"scan_id": "s-0", "key": "drops/acme/w-0.9.tar.gz"},
                  "new": ["w/b.c"], "changed": ["w/a.c"], "removed": []},
        "files": files, "flags": flags, "reports": {"html": "results/acme/s/report.html"},
    }  # fmt: skip


def test_the_index_rows_are_the_review_rows_of_the_manifest() -> None:
    m = manifest()
    index = Index.parse(build(m, '"etag-1"').index)
    assert index.rows == review.rows(m)
    assert index.manifest_etag == '"etag-1"'
    assert index.head["delta"] == {"previous": m["delta"]["previous"], "new": 1, "changed": 1, "removed": 0}
    assert index.head["flag_kinds"] == ["binary", "proprietary"]
    assert index.head["components"] == [["w/", "w 1.0"]]
    assert "files" not in index.head and "flags" not in index.head


def test_a_files_line_is_found_by_its_place_and_holds_what_the_file_page_shows() -> None:
    m = manifest()
    built = build(m, "e")
    index = Index.parse(built.index)
    for f in m["files"]:
        place = index.place(f["path"])
        assert place is not None
        offset, length = place
        line = parse_line(built.files[offset : offset + length])
        assert line["f"] == f
    offset, length = index.place("w/a.c") or (0, 0)
    line = parse_line(built.files[offset : offset + length])
    assert [fl["kind"] for fl in line["flags"]] == ["proprietary", "binary"]  # most severe first
    assert line["copies"] == 2
    assert line["commits"] == {"c1": {"subject": "fix it", "release": "1.1"}}  # only the ones it cites
    assert index.place("w/nothing.c") is None


def test_decisions_made_from_the_index_are_those_made_from_the_manifest() -> None:
    m = manifest()
    index = Index.parse(build(m, "e").index)
    args: dict[str, Any] = {"verdict": "accepted", "by": "ann", "at": "2026-02-02T00:00:00+00:00"}
    paths = ["w/a.c", "w/copy.c", "<img src=x>.c"]
    assert record(index.decision_manifest(), paths=paths, **args) == record(m, paths=paths, **args)
    with pytest.raises(DecisionError, match="not in the review set"):
        record(index.decision_manifest(), paths=["w/same.c"], **args)
    with pytest.raises(DecisionError, match="not in the manifest"):
        record(index.decision_manifest(), paths=["w/nothing.c"], **args)


def test_another_schema_is_no_index() -> None:
    with pytest.raises(ValueError, match="not a desk index"):
        Index.parse(b'{"schema": "something/9"}')

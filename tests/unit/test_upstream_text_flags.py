"""A licence flag on a line the vendor did not change is upstream's own text: marked, at most `review`,
ranked below the vendor's; flags on the vendor's lines keep their severity."""

from __future__ import annotations

from typing import Any

from dropscan.audit.flags import mark_upstream_text
from dropscan.audit.hunks import diff
from dropscan.reports import summary, view

UPSTREAM = b"/*\n * foo\n * SPDX-License-Identifier: BSD-3-Clause\n */\nint a;\nint b;\nint c;\n"
# the vendor adds a proprietary notice at line 6 and leaves upstream's licence tag (line 3) alone
VENDOR = UPSTREAM.replace(b"int b;\n", b"int b;\n/* CONFIDENTIAL AND PROPRIETARY */\n")


def flag(kind: str, severity: str, line: int, path: str = "foo-1.0/a.c") -> dict[str, Any]:
    return {
        "kind": kind,
        "severity": severity,
        "path": path,
        "line": line,
        "evidence": "…",
        "component": "foo-1.0/",
        "detail": "d.",
    }


def manifest(origin: str = "vendor", **ev: Any) -> dict[str, Any]:
    hunks = [
        {
            "old_start": h.old_start,
            "old_lines": h.old_lines,
            "new_start": h.new_start,
            "new_lines": h.new_lines,
            "origin": origin,
        }
        for h in diff(UPSTREAM, VENDOR)
    ]
    return {
        "files": [
            {
                "path": "foo-1.0/a.c",
                "class": "modified",
                "evidence": {"base": {"release": "foo 1.0"}, "hunks": hunks} | ev,
            }
        ],
        "flags": [
            flag("license-different", "review", 3),
            flag("proprietary", "action-required", 7),
            flag("no-license-grant", "action-required", 1),
        ],
    }


def test_flags_on_upstreams_lines_are_marked_and_ranked_below_the_vendors() -> None:
    m = manifest()
    assert [h["new_start"] for h in m["files"][0]["evidence"]["hunks"]] == [7]  # the real diff's hunk
    assert mark_upstream_text(m) == 2
    by_line = {f["line"]: f for f in m["flags"]}
    assert by_line[7]["severity"] == "action-required" and "upstream_text" not in by_line[7]
    assert by_line[3]["upstream_text"] and by_line[3]["severity"] == "review"
    assert by_line[1]["upstream_text"] and by_line[1]["severity"] == "review"  # was action-required
    assert "upstream's own text" in by_line[1]["detail"]
    ranked = [(f["severity"], f["line"]) for f in view.flags(m)]
    assert ranked == [("action-required", 7), ("review", 1), ("review", 3)]
    m |= {"triage": {"detector": "spdx-tags", "files": 1}, "summary": {}}
    said = summary._flag_lines(m, 10)
    assert said[1].endswith("foo-1.0/a.c:7") and said[4].endswith("foo-1.0/a.c:1  (upstream's own text)")


def test_a_line_an_upstream_hunk_wrote_is_upstreams_too() -> None:
    m = manifest(origin="upstream")
    assert mark_upstream_text(m) == 3


def test_without_a_diff_every_flag_keeps_its_severity() -> None:
    m = manifest(error="base not found")
    assert mark_upstream_text(m) == 0
    assert [f["severity"] for f in m["flags"]] == ["review", "action-required", "action-required"]
    added = manifest()
    added["files"][0]["class"] = "added"
    assert mark_upstream_text(added) == 0

"""Decisions on single hunks (dropscan.audit.hunk_decisions): which hunks a reviewer decides, what
identifies one across drops, and when a file's hunks accept the file."""

from __future__ import annotations

from typing import Any

from dropscan.audit import hunk_decisions as hd
from dropscan.models import Decision

PATCH = (
    "--- a/x.c\n+++ b/x.c\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n c\n d\n"
    "@@ -9,3 +9,3 @@\n h\n-i\n+I\n j\n@@ -20,1 +20,1 @@\n-t\n+T\n"
)
HUNKS = [
    {"old_start": 2, "old_lines": 1, "new_start": 2, "new_lines": 1, "origin": "vendor"},
    {"old_start": 10, "old_lines": 1, "new_start": 10, "new_lines": 1, "origin": "upstream", "commit": "c"},
    {"old_start": 20, "old_lines": 1, "new_start": 20, "new_lines": 1, "origin": "revert"},
]


def file(path: str = "p-1.0/x.c", patch: str = PATCH) -> dict[str, Any]:
    ev = {"base": {"path": "x.c"}, "origin": "mixed", "hunks": [dict(h) for h in HUNKS], "patch": patch}
    return {"path": path, "sha256": "a" * 64, "class": "modified", "evidence": ev}


def decision(fp: str, verdict: str = "accepted", **kw: Any) -> Decision:
    args: dict[str, Any] = {"scope": "supplier", "supplier": "acme", "by": "ann", "at": "2026-01-01"} | kw
    return Decision(subject=hd.subject(fp), verdict=verdict, **args)


def test_the_vendor_and_revert_hunks_are_decided_and_named_by_upstream_path_and_lines() -> None:
    keys = hd.fingerprints(file())
    assert sorted(keys) == [0, 2] and hd.reviewed(file()) == [0, 2]
    assert hd.fingerprints(file(path="p-1.1/x.c")) == keys  # another drop's folder: the same hunks
    other = file(patch=PATCH.replace("+B", "+Z"))
    assert hd.fingerprints(other)[0] != keys[0] and hd.fingerprints(other)[2] == keys[2]


def test_a_hunk_past_a_patch_cut_short_cannot_be_decided_alone() -> None:
    cut = file(patch=PATCH.split("@@ -20")[0])
    assert sorted(hd.fingerprints(cut)) == [0]
    keys = hd.fingerprints(file())
    assert hd.all_accepted(cut, {keys[0]: decision(keys[0])}) is None


def test_a_file_is_accepted_when_every_hunk_to_review_is() -> None:
    keys = hd.fingerprints(file())
    m: dict[str, Any] = {
        "supplier": "acme",
        "files": [file()],
        "flags": [{"path": "p-1.0/x.c", "kind": "binary"}],
    }
    assert hd.apply(m, [decision(keys[0])]) == 0
    assert m["files"][0]["evidence"]["hunks"][0]["decision"]["verdict"] == "accepted"
    assert "decision" not in m["files"][0]
    m = {"supplier": "acme", "files": [file()], "flags": []}
    assert hd.apply(m, [decision(keys[0]), decision(keys[2], at="2026-02-02", by="bo")]) == 1
    d = m["files"][0]["decision"]
    assert (d["verdict"], d["by"], d["hunks"], d["note"]) == ("accepted", "bo", True, hd.NOTE)


def test_a_hunk_needing_action_or_another_suppliers_keeps_the_file_open() -> None:
    keys = hd.fingerprints(file())
    for second in (decision(keys[2], "needs-action"), decision(keys[2], supplier="globex")):
        m: dict[str, Any] = {"supplier": "acme", "files": [file()], "flags": []}
        assert hd.apply(m, [decision(keys[0]), second]) == 0
    chosen = hd.choose(
        [decision(keys[0], "needs-action", scope="global", supplier="x"), decision(keys[0])], "acme"
    )
    assert chosen[keys[0]].verdict == "accepted"  # the supplier's own over a global one

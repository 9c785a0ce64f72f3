"""The pure rules of decisions (audit.decision_rules) and deltas (audit.delta), without a stack."""

from __future__ import annotations

from typing import Any

import pytest

from dropscan.audit import decision_rules as decisions
from dropscan.audit import delta
from dropscan.audit.manifest import build_manifest
from dropscan.models import Decision

A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)


def decision(sha: str, verdict: str = "accepted", scope: str = "supplier", supplier: str = "acme",
             at: str = "2026-01-01T00:00:00", **kw: Any) -> Decision:  # fmt: skip
    return Decision(f"sha256:{sha}", scope, supplier, verdict, "alice", at, **kw)


def manifest(files: list[tuple[str, str, str]]) -> dict[str, Any]:
    entries = [{"path": p, "sha256": s, "class": c, "size": 1, "kind": "text", "component": "x-1.0/"}
               for p, s, c in files]  # fmt: skip
    component = {"prefix": "x-1.0/", "identified": True, "package": "x", "version": "1.0",
                 "files": len(files), "classes": {}, "missing": []}  # fmt: skip
    return build_manifest(
        scan_id="s-1", supplier="acme", source={"key": "drops/acme/x-1.0.tar.gz", "size": 1},
        status="complete", reason=None, files=entries, components=[component],
        stats={}, created_at="t", finished_at="t",
    )  # fmt: skip


def test_the_suppliers_own_decision_wins_over_a_global_one_and_others_never_apply() -> None:
    chosen = decisions.choose(
        [
            decision(A, "rejected", scope="global", supplier="other"),
            decision(A, "accepted"),
            decision(B, "accepted", supplier="other"),
            decision(C, "needs-action", scope="global", supplier="other"),
        ],
        "acme",
    )
    assert {d: c.verdict for d, c in chosen.items()} == {A: "accepted", C: "needs-action"}


def test_accepted_files_leave_the_review_set_and_escalations_raise_the_verdict() -> None:
    m = manifest([("x-1.0/a.c", A, "modified"), ("x-1.0/b.c", B, "added"), ("x-1.0/c.c", C, "identical")])
    decisions.attach(m["files"], {A: decision(A), C: decision(C)})
    decisions.settle(m)
    assert (m["summary"]["review"], m["summary"]["cleared"], m["verdict"]) == (1, 1, "review")
    assert "decision" not in m["files"][2]  # only review files carry decisions
    assert m["components"][0]["cleared"] == 1

    decisions.attach(m["files"], {A: decision(A), B: decision(B, "rejected")})
    decisions.settle(m)
    assert (m["summary"]["review"], m["summary"]["decisions"]["rejected"], m["verdict"]) == (
        1, 1, "action-required"
    )  # fmt: skip


def test_a_new_flag_or_licence_reopens_and_a_seen_one_does_not() -> None:
    m = manifest([("x-1.0/a.c", A, "modified"), ("x-1.0/b.c", B, "modified"), ("x-1.0/c.c", C, "modified")])
    seen = "proprietary: proprietary terms"
    decisions.attach(m["files"], {
        A: decision(A, flags=(seen,)), B: decision(B), C: decision(C, licenses=("MIT",))
    })  # fmt: skip
    flag = {"kind": "proprietary", "detail": "proprietary terms", "severity": "action-required"}
    m["flags"] = [flag | {"path": "x-1.0/a.c"}, flag | {"path": "x-1.0/b.c"}]
    m["files"][2]["licenses"] = [{"expression": "MIT"}, {"expression": "Apache-2.0"}]
    assert decisions.reopen(m) == 2
    decisions.settle(m)
    a, b, c = m["files"]
    assert not a["decision"].get("reopened") and m["flags"][0]["cleared"] is True
    assert b["decision"]["reopen_reason"] == "new red flag: proprietary: proprietary terms"
    assert c["decision"]["reopen_reason"] == "new licence: Apache-2.0"
    assert m["summary"]["flags"] == {"action-required": 1, "review": 0}
    assert (m["summary"]["review"], m["summary"]["cleared"], m["summary"]["decisions"]["reopened"]) == (
        2,
        1,
        2,
    )
    assert m["verdict"] == "action-required"


def test_a_triage_that_broke_reopens_every_decision() -> None:
    m = manifest([("x-1.0/a.c", A, "modified")])
    decisions.attach(m["files"], {A: decision(A)})
    m["triage"] = {"error": "RuntimeError: boom"}
    assert decisions.reopen(m) == 1
    decisions.settle(m)
    assert (m["summary"]["review"], m["verdict"]) == (1, "review")


def test_recording_takes_one_decision_per_content_with_what_each_file_carried() -> None:
    m = manifest(
        [("x-1.0/a.c", A, "modified"), ("x-1.0/copy/a.c", A, "modified"), ("x-1.0/c.c", C, "identical")]
    )
    m["flags"] = [{"kind": "proprietary", "detail": "p", "path": "x-1.0/copy/a.c", "severity": "review"}]
    [d] = decisions.record(m, all_review=True, verdict="accepted", by="alice", at="t1", scope="global")
    assert (d.subject, d.scope_key, d.flags, d.path) == (
        f"sha256:{A}",
        "global",
        ("proprietary: p",),
        "x-1.0/a.c",
    )
    with pytest.raises(decisions.DecisionError, match="not in the review set"):
        decisions.record(m, paths=["x-1.0/c.c"], verdict="accepted", by="alice", at="t1")
    with pytest.raises(decisions.DecisionError, match="verdict"):
        decisions.record(m, all_review=True, verdict="fine", by="alice", at="t1")


def test_merging_keeps_the_later_decision_and_never_duplicates() -> None:
    old, new = decision(A, at="2026-01-01"), decision(A, "rejected", at="2026-02-01")
    held = {(old.subject, old.scope_key): old}
    assert decisions.merge(held, [old]).counts() == {
        "added": 0,
        "updated": 0,
        "unchanged": 1,
        "superseded": 0,
    }
    assert decisions.merge(held, [new, old]).write == [new]
    assert decisions.merge({(new.subject, new.scope_key): new}, [old]).counts()["superseded"] == 1
    assert decisions.merge({}, [old, decision(A, scope="global")]).added == 2


def test_an_export_reads_back_as_the_same_decisions() -> None:
    rows = [decision(A, note="ok, see ticket 12"), decision(B, "rejected", scope="global", flags=("x",))]
    text = decisions.export_text(rows, exported_at="2026-03-01T00:00:00+00:00")
    assert text.startswith('{"format": "dropscan.decisions/1"') and len(text.splitlines()) == 4
    assert sorted(decisions.parse_export(text), key=lambda d: d.subject) == rows
    with pytest.raises(decisions.DecisionError, match="not a decisions file"):
        decisions.parse_export('{"format": "dropscan.upstream-db/1"}')


@pytest.mark.parametrize(
    ("key", "product", "version"),
    [
        ("drops/acme/acme-busybox-1.35.0-gpl.tar.gz", "acme-busybox-gpl", "1.35.0"),
        ("drops/acme/widget_3.2.1.tar.xz", "widget", "3.2.1"),
        ("drops/acme/BSP-v2.0-rc1.zip", "bsp", "v2.0-rc1"),
        ("drops/acme/sources.tar", "sources", None),
    ],
)
def test_a_drops_product_is_its_name_without_version_like_parts(key: str, product: str, version: str) -> None:
    assert (delta.product_of(key), delta.version_of(key)) == (product, version)
    assert delta.product_of(key, {"product": "router-x1"}) == "router-x1"


def test_paths_are_compared_inside_their_component_the_top_folder_ignored() -> None:
    before = delta.index_of(
        [{"path": "bb-1.0-acme/a.c", "sha256": A, "component": "bb-1.0-acme/"},
         {"path": "bb-1.0-acme/b.c", "sha256": B, "component": "bb-1.0-acme/"},
         {"path": "tools-1.0/x", "sha256": C, "component": "tools-1.0/"}],
        [{"prefix": "bb-1.0-acme/", "identified": True, "package": "busybox"},
         {"prefix": "tools-1.0/", "identified": False}],
    )  # fmt: skip
    after = delta.index_of(
        [{"path": "bb-1.1-acme/a.c", "sha256": A, "component": "bb-1.1-acme/"},
         {"path": "bb-1.1-acme/b.c", "sha256": D, "component": "bb-1.1-acme/"},
         {"path": "bb-1.1-acme/n.c", "sha256": D, "component": "bb-1.1-acme/"},
         {"path": "tools-1.1/x", "sha256": C, "component": "tools-1.1/"}],
        [{"prefix": "bb-1.1-acme/", "identified": True, "package": "busybox"},
         {"prefix": "tools-1.1/", "identified": False}],
    )  # fmt: skip
    ref = {"scan_id": "s-0", "key": "k", "finished_at": "t"}
    got = delta.compare(before, delta.index_from_json(delta.index_to_json(after)), ref)
    assert got == {"previous": ref, "new": ["bb-1.1-acme/n.c"], "changed": ["bb-1.1-acme/b.c"], "removed": []}
    assert delta.compare(after, before, ref)["removed"] == ["bb-1.1-acme/n.c"]


def test_the_reports_open_with_what_changed_and_leave_cleared_files_out_of_the_review_lists() -> None:
    from dropscan.reports import render
    from dropscan.reports.summary import subject

    m = manifest([("x-1.0/a.c", A, "modified"), ("x-1.0/b.c", B, "added"), ("x-1.0/n.c", D, "added")])
    decisions.attach(m["files"], {A: decision(A)})
    previous = {"scan_id": "s-0", "key": "drops/acme/x-0.9.tar.gz", "finished_at": "t", "version": "0.9"}
    m["delta"] = {"previous": previous, "new": ["x-1.0/n.c"], "changed": ["x-1.0/b.c"], "removed": []}
    decisions.settle(m)
    assert subject(m).endswith("— review: 2 of 3 files (66.7%), 2 new since 0.9")
    text = render(m, "text")
    assert "need review (1 cleared by earlier decisions)" in text
    assert "Since the previous drop (x-0.9.tar.gz, scan s-0): 1 new, 1 changed, 0 removed." in text
    review = text.split("Review set", 1)[1]
    assert "x-1.0/b.c" in review and "x-1.0/a.c" not in review
    html = render(m, "html")
    assert html.index("What changed since the last drop (0.9)") < html.index(
        "<h2", html.index("</header>") + 200
    )
    assert "cleared by earlier decisions" in html

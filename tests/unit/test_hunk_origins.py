"""The pure rules of review evidence: hunks, noise, fingerprints, the base chosen, each file's origin."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dropscan.audit.hunk_origins import Candidate, base_of, choose, common, evidence_of, file_origin, settle
from dropscan.audit.hunks import Hunk, Published, diff, fingerprint, middles, patch_text

OLD = b"".join(b"line %d\n" % i for i in range(40))


def replace(data: bytes, n: int, new: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    lines[n] = new
    return b"".join(lines)


def apply(old: bytes, hunks: list[Hunk]) -> bytes:
    """The hunks applied to ``old``, as patch(1) would: proof that they are the whole change."""
    lines = old.splitlines(keepends=True)
    for h in reversed(hunks):
        start = h.old_start - 1 if h.old_lines else h.old_start  # an insertion sits after old_start
        assert list(lines[start : start + h.old_lines]) == list(h.removed)
        lines[start : start + h.old_lines] = list(h.added)
    return b"".join(lines)


@given(
    st.lists(st.sampled_from([b"a\n", b"b\n", b"c\n", b"{\n", b"}\n", b"\n"]), max_size=30),
    st.lists(st.sampled_from([b"a\n", b"b\n", b"c\n", b"d\n", b"}\n", b"\n"]), max_size=30),
)
def test_the_hunks_are_exactly_the_change(old: list[bytes], new: list[bytes]) -> None:
    assert apply(b"".join(old), diff(b"".join(old), b"".join(new))) == b"".join(new)


LINES = st.sampled_from([b"a\n", b"b\n", b"}\n", b"\n", b"\tx;\n", b"y\r\n", b"$Id$\n"])


@given(
    st.lists(LINES, max_size=80),
    st.lists(LINES, max_size=12),
    st.lists(LINES, max_size=12),
    st.lists(LINES, max_size=80),
    st.booleans(),
)
def test_a_long_files_hunks_made_from_its_middle_are_exactly_the_change(
    head: list[bytes], old: list[bytes], new: list[bytes], tail: list[bytes], no_last_nl: bool
) -> None:
    # Given two contents sharing long runs of (often equal) lines around their change
    a, b = b"".join(head + old + tail), b"".join(head + new + tail)
    if no_last_nl:
        a, b = a + b"end", b + b"end"
    # Then the hunks made from their middles, numbered in the whole files, turn one into the other
    hunks = diff(a, b)
    assert apply(a, hunks) == b
    # and each hunk's key is its fingerprint, or None for a hunk that is noise
    assert [h.key("x.c") for h in hunks] == [None if h.noise else h.fingerprint("x.c") for h in hunks]


def test_only_the_middle_of_a_long_file_is_diffed_and_its_hunks_keep_their_line_numbers() -> None:
    old = b"".join(b"line %d\n" % i for i in range(5000))
    new = replace(old, 2500, b"line 2500 changed\n")
    skipped, a, b = middles(old, new)
    # the 20 lines of margin each side and the changed line: whole lines, from line 2481 on
    assert (skipped, a.count(b"\n"), b.count(b"\n")) == (2480, 41, 41)
    assert a.startswith(b"line 2480\n") and b.endswith(b"line 2520\n")
    [hunk] = diff(old, new)
    assert (hunk.old_start, hunk.new_start, hunk.removed, hunk.added) == (
        2501,
        2501,
        (b"line 2500\n",),
        (b"line 2500 changed\n",),
    )
    # a content with a NUL among its first bytes is binary, as libgit2 says of the whole file
    assert diff(b"\0" + old, b"\0" + new) == []


def test_keywords_line_endings_and_trailing_blanks_are_noise_and_a_real_change_is_not() -> None:
    keyword = diff(b"/* $Id$ */\nint x;\n", b"/* $Id: x.c,v 1.2 2001/01/01 a Exp $ */\nint x;\n")
    endings = diff(b"int x;\nint y;\n", b"int x;\r\nint y;  \n")
    real = diff(b"int x;\n", b"int x = 1;\n")
    assert [h.noise for h in keyword + endings] == [True] * (len(keyword) + len(endings))
    assert [h.noise for h in real] == [False]


def test_a_change_has_one_fingerprint_wherever_it_lands_and_whatever_its_line_endings() -> None:
    here = diff(OLD, replace(OLD, 10, b"line ten\n"))
    there = diff(b"other\n" * 5 + OLD, b"other\n" * 5 + replace(OLD, 10, b"line ten\r\n"))
    assert (here[0].new_start, there[0].new_start) == (11, 16)
    want = fingerprint("x.c", [b"line 10\n"], [b"line ten\n"])
    assert here[0].fingerprint("x.c") == there[0].fingerprint("x.c") == want
    assert fingerprint("x.c", [b"line 10\n"], [b"line 11\n"]) != want
    assert here[0].fingerprint("y.c") != want  # the same lines changed in another file


def test_each_hunk_is_upstream_vendor_or_noise_and_the_file_follows() -> None:
    new = replace(replace(replace(OLD, 5, b"fixed 5\n"), 20, b"vendor 20\n"), 30, b"line 30   \n")
    hunks = diff(OLD, new)
    fix = Published("a" * 40, "1.1", "2001-01-01T00:00:00Z", "fix line 5")
    ev = evidence_of(Candidate({"path": "x.c"}, hunks), {hunks[0].fingerprint("x.c"): [fix]}, None)
    assert [(h["new_start"], h["origin"], h.get("commit")) for h in ev["hunks"]] == [
        (6, "upstream", "a" * 40),
        (21, "vendor", None),
        (31, "noise", None),
    ]
    assert ev["origin"] == "mixed" and (ev["lines_added"], ev["lines_removed"]) == (3, 3)
    assert file_origin(["upstream", "noise"]) == "upstream"
    assert file_origin(["noise"]) == "upstream"
    assert file_origin(["vendor", "noise"]) == "vendor"


def test_the_base_is_the_state_with_fewest_unpublished_lines_and_the_release_wins_ties() -> None:
    release = OLD
    fix1, fix2 = replace(OLD, 3, b"fix one\n"), replace(OLD, 30, b"fix two\n")
    after_both = replace(fix1, 30, b"fix two\n")
    drop = fix2  # the release with only the later fix backported
    index = {h.fingerprint("x.c"): [Published("1" * 40, None)] for h in diff(release, fix1)}
    index |= {h.fingerprint("x.c"): [Published("2" * 40, None)] for h in diff(fix1, after_both)}
    candidates = [
        Candidate({"version": "1.0", "path": "x.c"}, diff(release, drop), preferred=True),
        Candidate({"commit": "1" * 40, "path": "x.c"}, diff(fix1, drop)),
        Candidate({"commit": "2" * 40, "path": "x.c"}, diff(after_both, drop)),
    ]
    assert choose(candidates, index).base["version"] == "1.0"  # 0 vendor lines: the fix is upstream's
    # a file built on a snapshot with a vendor edit: the snapshot explains it with no upstream hunk
    vendor_on_snapshot = replace(after_both, 20, b"vendor\n")
    candidates = [
        Candidate({"version": "1.0", "path": "x.c"}, diff(release, vendor_on_snapshot), preferred=True),
        Candidate({"commit": "3" * 40, "path": "x.c"}, diff(OLD[:0] + b"unrelated\n", vendor_on_snapshot)),
        Candidate({"commit": "2" * 40, "path": "x.c"}, diff(after_both, vendor_on_snapshot)),
    ]
    # the same two vendor lines from the release (with both fixes cited) and from the snapshot: the
    # release wins the tie; a state that explains less loses
    assert choose(candidates, index).base["version"] == "1.0"


def test_a_long_patch_is_cut_at_a_line_and_says_so() -> None:
    new = b"".join(b"changed %d\n" % i for i in range(40))
    text, cut = patch_text(OLD, new, "x.c", limit=200)
    assert cut and len(text) <= 200 and text.endswith("\n") and text.startswith("--- a/x.c\n+++ b/x.c\n")
    whole, cut = patch_text(OLD, new, "x.c")
    assert not cut and whole.count("\n+changed") == 40


def test_backports_are_counted_apart_per_component_with_the_commits_they_cite() -> None:
    def modified(path: str, origin: str, commit: str | None) -> dict[str, object]:
        hunk = {"origin": "upstream", "commit": commit, "subject": "s", "release": "1.1"} if commit else {}
        return {
            "path": path,
            "class": "modified",
            "component": "foo/",
            "evidence": {"origin": origin, "hunks": [hunk]},
        }

    manifest: dict[str, object] = {
        "components": [{"prefix": "foo/", "identified": True, "version": "1.0"}],
        "files": [
            modified("foo/a.c", "upstream", "a" * 40),
            modified("foo/b.c", "vendor", None),
            modified("foo/c.c", "mixed", "c" * 40),
            {"path": "foo/new.c", "class": "added", "component": "foo/"},
        ],
        "summary": {},
    }
    settle(manifest)  # type: ignore[arg-type]
    assert manifest["components"][0]["baseline"] == {  # type: ignore[index]
        "release": "1.0",
        "backported": 1,
        "commits": ["a" * 40, "c" * 40],
        "vendor_changed": 2,
        "added": 1,
    }
    assert manifest["summary"] == {"backported": 1, "vendor_changed": 2}


def test_an_edited_copy_is_found_among_many_files_and_measured_exactly() -> None:
    from dropscan.audit import similarity

    upstream = {
        f"f{n}": b"".join(b"int f%d_%d(void) { return %d; }\n" % (n, i, i) for i in range(50))
        for n in range(300)
    }
    sketches = {name: similarity.sketch(data) for name, data in upstream.items()}
    index = similarity.SketchIndex.build(
        {k: similarity.decode(similarity.encode(v)) for k, v in sketches.items()}
    )
    lines = upstream["f123"].splitlines(keepends=True)
    edited = b"".join(
        line.replace(b"return", b"return 2 *") if i % 4 == 0 else line for i, line in enumerate(lines)
    )
    found = index.candidates(similarity.sketch(edited))
    assert found[0] == "f123"
    assert similarity.containment(edited, upstream["f123"]) == 0.74  # 37 of 50 lines kept
    own = b"".join(b"static long vendor_%d = %d;\n" % (i, i) for i in range(50))
    assert index.candidates(similarity.sketch(own)) == []


# ------------------------------------------------------------------ issue 36: the base, reverts, lone lines
C_LINES = [b"int f_%d(void) { return %d; }\n" % (i, i) for i in range(40)]


def lines_of(*parts: list[bytes]) -> bytes:
    return b"".join(line for part in parts for line in part)


@dataclass
class StatesOf:
    """A path's upstream states in memory, oldest first (the History the stage reads from the packs)."""

    seq: list[tuple[Published, bytes]]

    def states_of(self, commit: str) -> int:
        return next(i for i, (p, _) in enumerate(self.seq) if p.commit == commit)

    def states(self, pub: Published, side: str) -> list[bytes]:
        i = self.states_of(pub.commit)
        return [self.seq[i][1]] if side == "after" else ([self.seq[i - 1][1]] if i else [])

    def undone_by(self, pub: Published, present: Callable[[bytes], bool]) -> Published | None:
        for p, data in self.seq[self.states_of(pub.commit) + 1 :]:
            if not present(data):
                return p
        return None

    def brought_back(self, present: Callable[[bytes], bool]) -> Published | None:
        for i in range(len(self.seq) - 1, -1, -1):
            if present(self.seq[i][1]):
                return next((p for p, d in self.seq[i + 1 :] if not present(d)), None)
        return None


def index_of(path: str, steps: list[tuple[Published, bytes, bytes]]) -> dict[str, list[Published]]:
    """The hunk index ingest-git writes for these commits (old state -> new state each)."""
    out: dict[str, list[Published]] = {}
    for pub, old, new in steps:
        for h in diff(old, new):
            out.setdefault(h.fingerprint(path), []).append(pub)
    return out


def pub(n: int, release: str | None, subject: str) -> Published:
    return Published(str(n) * 40, release, f"200{n}-01-01T00:00:00Z", subject)


def test_the_base_is_the_release_and_a_nearer_commit_is_only_reported_beside_it() -> None:
    release = lines_of(C_LINES)
    fix = pub(1, None, "fix f_3")
    fixed = replace(release, 3, b"int f_3(void) { return -3; }\n")
    drop = replace(fixed, 30, b"int f_30(void) { return vendor(); }\n")
    index = index_of("x.c", [(fix, release, fixed)])
    candidates = [
        Candidate({"version": "1.0", "path": "x.c", "sha256": "r"}, diff(release, drop), preferred=True),
        Candidate({"version": None, "path": "x.c", "sha256": "c", "commit": fix.commit}, diff(fixed, drop)),
    ]
    chosen, nearest = base_of(candidates, index, snapshot=False)
    assert chosen.base["version"] == "1.0"
    assert nearest is not None and nearest["commit"] == fix.commit
    assert (nearest["distance"], nearest["base_distance"]) == (2, 4)
    # a snapshot component: the state with the fewest unexplained lines is the base, as before
    assert base_of(candidates, index, snapshot=True)[0] is choose(candidates, index)
    no_fix: dict[
        str, list[Published]
    ] = {}  # the fix unknown to the index: the commit explains more than the release
    assert base_of(candidates, no_fix, snapshot=True)[0].base.get("commit") == fix.commit
    assert base_of(candidates, no_fix, snapshot=False)[0].base["version"] == "1.0"


def test_a_revert_of_an_older_change_names_the_commit_and_keeps_the_file_in_review() -> None:
    before = lines_of(C_LINES)
    fix = pub(1, "0.9", "f_12: return the right value")
    release = replace(before, 12, b"int f_12(void) { return 12 + 1; }\n")  # 1.0 holds the fix
    drop = before  # the vendor undid it
    index = index_of("x.c", [(fix, before, release)])
    history = StatesOf([(fix, release)])
    ev = evidence_of(
        Candidate({"version": "1.0", "path": "x.c"}, diff(release, drop)),
        index,
        None,
        new=drop,
        old=release,
        history=history,
    )
    assert [h["origin"] for h in ev["hunks"]] == ["revert"]
    assert ev["hunks"][0]["reverts"]["commit"] == fix.commit and ev["origin"] == "vendor"
    manifest: dict[str, Any] = {
        "components": [{"prefix": "foo/", "identified": True, "version": "1.0"}],
        "files": [{"path": "foo/x.c", "class": "modified", "component": "foo/", "evidence": ev}],
        "summary": {},
        "flags": [],
    }
    settle(manifest)
    assert manifest["summary"]["backported"] == 0
    [flag] = manifest["flags"]
    assert (flag["kind"], flag["severity"], flag["commit"], flag["line"]) == (
        "reverts-upstream",
        "review",
        fix.commit,
        13,
    )
    assert "f_12: return the right value" in flag["detail"] and flag["evidence"] == fix.subject


def test_a_revert_of_a_later_fix_in_a_snapshot_names_the_fix() -> None:
    release = lines_of(C_LINES)
    fix = pub(2, None, "f_20: fix after the release")
    snapshot = replace(release, 20, b"int f_20(void) { return 20 * 2; }\n")
    drop = release  # a tree of the snapshot with the fix taken out again
    index = index_of("x.c", [(fix, release, snapshot)])
    base = {"version": None, "path": "x.c", "commit": fix.commit}
    ev = evidence_of(Candidate(base, diff(snapshot, drop)), index, None, new=drop, old=snapshot)
    assert [(h["origin"], h["reverts"]["commit"]) for h in ev["hunks"]] == [("revert", fix.commit)]


def test_a_resurrected_block_is_a_revert_of_the_commit_that_removed_it_not_upstreams_own() -> None:
    old = lines_of(C_LINES)
    block = [b"#ifdef LINUX_ONLY\n", b"\tsetup_linux();\n", b"#endif\n"]
    add, remove = pub(1, "0.5", "add the linux setup"), pub(2, "0.8", "drop the linux setup")
    with_block = lines_of(C_LINES[:10], block, C_LINES[10:])
    index = index_of("x.c", [(add, old, with_block), (remove, with_block, old)])
    history = StatesOf([(add, with_block), (remove, old)])
    release, drop = old, with_block  # 1.0 lacks the block; the vendor brought it back
    ev = evidence_of(
        Candidate({"version": "1.0", "path": "x.c"}, diff(release, drop)),
        index,
        None,
        new=drop,
        old=release,
        history=history,
    )
    [h] = ev["hunks"]
    # the index holds both commits: the opposite of the removal is what the drop did
    assert h["origin"] == "revert" and h["reverts"]["commit"] == remove.commit
    assert ev["origin"] == "vendor" and ev["reverts"][0]["subject"] == "drop the linux setup"
    # with the removal made together with another change (no opposite in the index): the commit that
    # added the block is found, and the state after it that lacks the block names the removal
    index = index_of("x.c", [(add, old, with_block)])
    ev = evidence_of(
        Candidate({"version": "1.0", "path": "x.c"}, diff(release, drop)),
        index,
        None,
        new=drop,
        old=release,
        history=history,
    )
    [h] = ev["hunks"]
    assert (h["origin"], h["reverts"]["commit"], h["redoes"]["commit"]) == (
        "revert",
        remove.commit,
        add.commit,
    )


def test_lines_an_earlier_state_held_and_no_commit_of_the_index_explains_are_brought_back() -> None:
    old = lines_of(C_LINES)
    gone = pub(3, "0.9", "rework f_5")
    with_line = lines_of(C_LINES[:6], [b"\tdepends on PLATFORM_LINUX\n"], C_LINES[6:])
    history = StatesOf([(pub(1, "0.1", "import"), with_line), (gone, old)])
    ev = evidence_of(
        Candidate({"version": "1.0", "path": "x.c"}, diff(old, with_line)),
        {},
        None,
        new=with_line,
        old=old,
        history=history,
    )
    assert [(h["origin"], h["reverts"]["commit"]) for h in ev["hunks"]] == [("revert", gone.commit)]


def test_a_single_line_is_upstream_only_where_the_commit_put_it() -> None:
    release = lines_of(C_LINES)
    fix = pub(4, None, "add errno.h")
    fixed = lines_of([b"#include <errno.h>\n"], C_LINES)
    index = index_of("x.c", [(fix, release, fixed)])
    history = StatesOf([(fix, fixed)])
    base = {"version": "1.0", "path": "x.c"}
    # the same line, where upstream put it: the backport
    ev = evidence_of(
        Candidate(base, diff(release, fixed)), index, None, new=fixed, old=release, history=history
    )
    assert [(h["origin"], h.get("commit")) for h in ev["hunks"]] == [("upstream", fix.commit)]
    # the same line elsewhere: a coincidence, the vendor's
    elsewhere = lines_of(C_LINES[:25], [b"#include <errno.h>\n"], C_LINES[25:])
    ev = evidence_of(
        Candidate(base, diff(release, elsewhere)), index, None, new=elsewhere, old=release, history=history
    )
    assert [h["origin"] for h in ev["hunks"]] == ["vendor"] and ev["origin"] == "vendor"
    # without the history to check its context, a lone line cites nothing
    ev = evidence_of(Candidate(base, diff(release, fixed)), index, None, new=fixed, old=release)
    assert [h["origin"] for h in ev["hunks"]] == ["vendor"]


def test_common_lines_are_common_and_a_specific_line_is_not() -> None:
    assert all(
        common(x, {})
        for x in (b"#endif\n", b"#if 0\n", b"}\n", b"\tdepends on FOO\n", b"//config:\tselect X\n")
    )
    assert not common(b"\tsetup_linux();\n", {})
    assert common(b"\tsetup_linux();\n", {b"setup_linux();": 3})  # recurring in the file


def test_a_lone_line_added_is_a_revert_only_where_the_commit_removed_it_from() -> None:
    # util-linux/mount.c in Debian's 1.37.0-6: a patch adds `#if 0` inside a function; upstream's commit
    # of 2000 removed an `#if 0` from the same file, elsewhere (its context long gone): no revert. A
    # line that says nothing alone (`#if 0`, as `#endif`) undoes a commit only where its context was
    old_era = lines_of(C_LINES[:5], [b"#if 0\n"], C_LINES[5:30])
    cleanup = pub(1, "0.46", "Use BB_FEATURE_CLEAN_UP where appropriate")
    then = lines_of(C_LINES[:30])
    release = lines_of(C_LINES)
    index = index_of("x.c", [(cleanup, old_era, then)])
    history = StatesOf(
        [(pub(0, "0.43", "import"), old_era), (cleanup, then), (pub(2, "1.0", "grow"), release)]
    )
    base = {"version": "1.0", "path": "x.c"}
    drop = lines_of(C_LINES[:20], [b"#if 0\n"], C_LINES[20:])
    ev = evidence_of(
        Candidate(base, diff(release, drop)), index, None, new=drop, old=release, history=history
    )
    assert [h["origin"] for h in ev["hunks"]] == ["vendor"] and "reverts" not in ev
    # the same line put back where the commit took it from: a revert of that commit
    back = lines_of(C_LINES[:5], [b"#if 0\n"], C_LINES[5:])
    ev = evidence_of(
        Candidate(base, diff(release, back)), index, None, new=back, old=release, history=history
    )
    assert [(h["origin"], h["reverts"]["commit"]) for h in ev["hunks"]] == [("revert", cleanup.commit)]

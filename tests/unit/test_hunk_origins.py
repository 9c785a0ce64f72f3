"""The pure rules of review evidence: hunks, noise, fingerprints, the base chosen, each file's origin."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dropscan.audit.hunk_origins import (
    Candidate,
    Hunk,
    Published,
    choose,
    diff,
    evidence_of,
    file_origin,
    fingerprint,
    middles,
    patch_text,
    settle,
)

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

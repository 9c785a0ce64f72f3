"""Review evidence: each modified file of a drop diffed against its upstream base, each hunk told apart
as upstream's own change (a backport, citing its commit and first release) or the vendor's.

The upstream is a small real git repository: release 1.0, then commits on master, then release 1.1.
The drop is 1.0 with some of those commits applied to some files, vendor edits to others, both to one.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from gitrepos import LICENCE, commit, git, sha

from dropscan.cli import main
from dropscan.git.repo import GitRepo
from dropscan.local.embedded import embedded
from dropscan.stages.ingest_git import GitIngestOptions, ingest_git
from dropscan.store.content import ContentStore
from dropscan.store.releases import Releases

from helpers.flows import cli_scan, scan_and_wait


def source(name: str, n: int = 60) -> list[str]:
    return [f"int {name}_{i}(void) {{ return {i}; }}\n" for i in range(n)]


def text(lines: list[str]) -> bytes:
    return "".join(lines).encode()


def edit(lines: list[str], at: int, new: str) -> list[str]:
    out = list(lines)
    out[at] = new
    return out


A0, B0, C0, D0, E0 = source("a"), source("b"), source("c"), source("d"), source("e")
A1 = edit(A0, 10, "int a_10(void) { return -10; /* fix: sign */ }\n")  # upstream, not in the drop
A2 = edit(A1, 40, "int a_40(void) { return 400; /* fix: overflow */ }\n")  # upstream, backported
C1 = edit(C0, 5, "int c_5(void) { return 55; /* fix: off by fifty */ }\n")  # upstream, backported
B1 = edit(B0, 30, "int b_30(void) { return 31; /* upstream, not taken */ }\n")
E1 = edit(E0, 3, "int e_3(void) { return 33; /* 1.1 only */ }\n")


def build_repo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """1_0; then a fix to a.c, a second fix to a.c, a fix to c.c, changes to b.c and e.c; then 1_1."""
    repo = tmp_path / "foo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    files = {"LICENSE": LICENCE, "a.c": text(A0), "b.c": text(B0), "c.c": text(C0), "d.c": text(D0)}
    files["e.c"] = text(E0)
    commit(repo, dict(files), "Initial import", "2001-01-01")
    git(repo, "tag", "1_0")
    commits = {
        "a1": commit(repo, {"a.c": text(A1)}, "a: fix the sign", "2001-02-01"),
        "a2": commit(repo, {"a.c": text(A2)}, "a: fix an overflow", "2001-03-01"),
        "c1": commit(repo, {"c.c": text(C1)}, "c: fix off by fifty", "2001-04-01"),
        "b1": commit(repo, {"b.c": text(B1)}, "b: change b_30", "2001-05-01"),
        "e1": commit(repo, {"e.c": text(E1)}, "e: change e_3", "2001-06-01"),
    }
    git(repo, "tag", "1_1")
    return repo, commits


def build_drop(tmp_path: Path) -> Path:
    """foo 1.0 with: a.c + the second a.c fix (backport), b.c + a vendor edit, c.c + the c.c fix and a
    vendor edit (mixed), d.c and e.c unchanged (e.c is what tells 1.0 from 1.1)."""
    a = edit(A0, 40, A2[40])
    b = edit(B0, 20, "int b_20(void) { return vendor_magic(); }\n")
    c = edit(C1, 50, "int c_50(void) { return vendor_tweak(50); }\n")
    tree = {
        "LICENSE": LICENCE,
        "a.c": text(a),
        "b.c": text(b),
        "c.c": text(c),
        "d.c": text(D0),
        "e.c": text(E0),
    }
    # added: a copy of d.c the vendor edited (a third of it), and a file of its own
    copy = [line.replace("return", "return 2 *") if i % 3 == 0 else line for i, line in enumerate(D0)]
    tree["vendor/d_copy.c"] = text(copy)
    tree["vendor/own.c"] = text(source("vendor_own"))
    return tar_drop(tmp_path, tree)


def tar_drop(tmp_path: Path, tree: dict[str, bytes]) -> Path:
    """``tree`` as the supplier's drop: a .tar.gz of one folder ``foo-1.0``."""
    folder = tmp_path / "drop" / "foo-1.0"
    for name, data in tree.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    out = tmp_path / "acme-foo-1.0.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(folder, arcname="foo-1.0")
    return out


def scan_with_history(repo: Path, drop: Path) -> dict[str, Any]:
    """The manifest of ``drop`` scanned against ``repo`` ingested as ``foo`` with its history."""
    with embedded() as es:
        releases = Releases(es.client.s3, es.names.upstream_bucket)
        content = ContentStore(es.client.s3, es.names.upstream_bucket)
        options = GitIngestOptions(history=True)
        ingest_git(GitRepo(str(repo / ".git")), "foo", es.client.db, releases, content, options)
        return scan_and_wait(es, drop).manifest


def by_path(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["path"].removeprefix("foo-1.0/"): f for f in manifest["files"]}


def test_backports_vendor_edits_and_mixed_files_are_told_apart_with_the_history(tmp_path: Path) -> None:
    repo, commits = build_repo(tmp_path)
    drop = build_drop(tmp_path)
    m = scan_with_history(repo, drop)
    files = by_path(m)
    comp = m["components"][0]
    assert (comp["package"], comp["version"]) == ("foo", "1.0")
    assert {p: f["class"] for p, f in files.items()} == {
        "LICENSE": "identical",
        "a.c": "modified",
        "b.c": "modified",
        "c.c": "modified",
        "d.c": "identical",
        "e.c": "identical",
        "vendor/d_copy.c": "added",
        "vendor/own.c": "added",
    }
    a, b, c = (files[p]["evidence"] for p in ("a.c", "b.c", "c.c"))
    # a.c: 1.0 plus the second fix, diffed against 1.0 (not against a later state that lacks the first)
    assert a["base"] == {"package": "foo", "version": "1.0", "path": "a.c", "sha256": sha(text(A0))}
    assert a["origin"] == "upstream"
    assert [(h["new_start"], h["origin"], h["commit"], h["release"]) for h in a["hunks"]] == [
        (41, "upstream", commits["a2"], "1.1")
    ]
    assert a["hunks"][0]["subject"] == "a: fix an overflow"
    # b.c: the vendor's own edit; the upstream change to b.c was not taken, and is not cited
    assert b["origin"] == "vendor"
    assert [(h["new_start"], h["origin"]) for h in b["hunks"]] == [(21, "vendor")]
    assert "+int b_20(void) { return vendor_magic(); }" in b["patch"]
    # c.c: the upstream fix and a vendor edit
    assert c["origin"] == "mixed"
    assert [(h["new_start"], h["origin"], h.get("commit")) for h in c["hunks"]] == [
        (6, "upstream", commits["c1"]),
        (51, "vendor", None),
    ]
    # counted apart: the backport leaves the review set, the component's baseline line says so
    assert m["summary"]["backported"] == 1
    assert m["summary"]["vendor_changed"] == 2
    assert m["summary"]["review"] == 4  # b.c, c.c and the two added files
    assert comp["baseline"] == {
        "release": "1.0",
        "backported": 1,
        "commits": sorted([commits["a2"], commits["c1"]]),
        "vendor_changed": 2,
        "added": 2,
    }
    # the edited copy is traced to the file it came from; the vendor's own file is not
    assert files["vendor/d_copy.c"]["similar"] == {
        "package": "foo",
        "version": "1.0",
        "path": "d.c",
        "sha256": sha(text(D0)),
        "similarity": 67,
    }
    assert "similar" not in files["vendor/own.c"]
    assert set(m["evidence"]["commits"]) == {commits["a2"], commits["c1"]}


def test_without_the_history_the_same_files_get_their_base_and_diffs_all_vendor(tmp_path: Path) -> None:
    repo, _ = build_repo(tmp_path)
    drop = build_drop(tmp_path)
    tarball = tmp_path / "foo-1.0.tar.gz"
    git(repo, "archive", "--prefix=foo-1.0/", "-o", str(tarball), "1_0")
    with embedded() as es:
        es.client.ingest(tarball, "foo", "1.0")
        m = scan_and_wait(es, drop).manifest
    files = by_path(m)
    for path, line in (("a.c", 41), ("b.c", 21)):
        ev = files[path]["evidence"]
        assert ev["base"] == {
            "package": "foo",
            "version": "1.0",
            "path": path,
            "sha256": ev["base"]["sha256"],
        }
        assert [(h["new_start"], h["origin"]) for h in ev["hunks"]] == [(line, "vendor")]
        assert ev["origin"] == "vendor"
    c = files["c.c"]["evidence"]
    assert c["base"]["sha256"] == sha(text(C0))
    assert [(h["new_start"], h["origin"]) for h in c["hunks"]] == [(6, "vendor"), (51, "vendor")]
    assert (c["lines_added"], c["lines_removed"]) == (2, 2)
    assert m["summary"]["backported"] == 0 and m["summary"]["review"] == 5
    assert files["vendor/d_copy.c"]["similar"]["path"] == "d.c"  # from the release alone too


def test_lines_upstream_published_in_another_file_are_not_upstream_here(tmp_path: Path) -> None:
    """Short hunks recur across a history (real BusyBox: a 2024 fix's `+#include <errno.h>` was first
    added to another file in 1999): the same lines added to another file are that file's change, not
    this one's, so a vendor adding them is the vendor, and a backport cites its own commit."""
    repo = tmp_path / "foo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    line = "#include <errno.h>\n"
    commit(
        repo, {"LICENSE": LICENCE, "a.c": text(A0), "x.c": text(B0), "y.c": text(C0)}, "Initial", "2001-01-01"
    )
    git(repo, "tag", "1_0")
    early = commit(repo, {"x.c": text([line, *B0])}, "x: errno", "2001-02-01")
    y1 = edit(C0, 30, "int c_30(void) { return 31; /* not taken */ }\n")
    commit(repo, {"y.c": text(y1)}, "y: change c_30", "2001-03-01")
    late = commit(repo, {"y.c": text([line, *y1])}, "y: errno", "2001-04-01")
    folder = tmp_path / "drop" / "foo-1.0"
    folder.mkdir(parents=True)
    tree = {
        "LICENSE": LICENCE,
        "a.c": text([*A0[:20], line, *A0[20:]]),
        "x.c": text(B0),
        "y.c": text([line, *C0]),
    }
    for name, data in tree.items():
        (folder / name).write_bytes(data)
    drop = tmp_path / "acme-foo-1.0.tar.gz"
    with tarfile.open(drop, "w:gz") as tar:
        tar.add(folder, arcname="foo-1.0")
    with embedded() as es:
        releases = Releases(es.client.s3, es.names.upstream_bucket)
        content = ContentStore(es.client.s3, es.names.upstream_bucket)
        options = GitIngestOptions(history=True)
        ingest_git(GitRepo(str(repo / ".git")), "foo", es.client.db, releases, content, options)
        files = by_path(scan_and_wait(es, drop).manifest)
    a, y = files["a.c"]["evidence"], files["y.c"]["evidence"]
    assert (a["origin"], [(h["new_start"], h["origin"]) for h in a["hunks"]]) == ("vendor", [(21, "vendor")])
    assert (y["origin"], [(h["new_start"], h["commit"]) for h in y["hunks"]]) == ("upstream", [(1, late)])
    assert early not in json.dumps(files)


def test_a_commit_the_base_already_holds_is_not_cited(tmp_path: Path) -> None:
    """One file's history can publish the same lines twice (real BusyBox: hash_md5_sha.c gained
    `# endif` in 2022, before 1.37.0, and again in 2024): the backport cites the later commit, which
    the base lacks, not the earlier one already in it."""
    repo = tmp_path / "foo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    line = "#endif\n"
    y1 = [*C0[:10], line, *C0[10:]]
    commit(repo, {"LICENSE": LICENCE, "y.c": text(C0), "a.c": text(A0)}, "Initial", "2001-01-01")
    held_commit = commit(repo, {"y.c": text(y1)}, "y: endif", "2001-02-01")
    git(repo, "tag", "1_0")
    y2 = edit(y1, 30, "int c_29(void) { return 30; /* not taken */ }\n")
    commit(repo, {"y.c": text(y2)}, "y: change c_29", "2001-03-01")
    late = commit(repo, {"y.c": text([*y2[:50], line, *y2[50:]])}, "y: endif again", "2001-04-01")
    tree = {"LICENSE": LICENCE, "a.c": text(A0), "y.c": text([*y1[:50], line, *y1[50:]])}
    y = by_path(scan_with_history(repo, tar_drop(tmp_path, tree)))["y.c"]["evidence"]
    assert (y["origin"], [(h["new_start"], h["commit"]) for h in y["hunks"]]) == ("upstream", [(51, late)])
    assert held_commit != late


def test_the_evidence_data_outlives_the_ingest_that_stored_it(tmp_path: Path) -> None:
    """`dropscan ingest-git` then `dropscan scan`, each its own run on one --data-dir, as a user runs
    them: the scan reads the texts, revisions and hunks the ingest stored (they are not in the dump)."""
    repo, commits = build_repo(tmp_path)
    drop = build_drop(tmp_path)
    data, out = tmp_path / "data", tmp_path / "m.json"
    assert (
        main(["ingest-git", str(repo), "--package", "foo", "--history", "--quiet", "--data-dir", str(data)])
        == 0
    )
    files = by_path(cli_scan(drop, data, out))
    a, c = files["a.c"]["evidence"], files["c.c"]["evidence"]
    assert "error" not in a
    assert (a["origin"], [h["commit"] for h in a["hunks"]]) == ("upstream", [commits["a2"]])
    assert (c["origin"], [h["origin"] for h in c["hunks"]]) == ("mixed", ["upstream", "vendor"])
    # a second ingest with nothing new keeps the contents and leaves the saved database as it was; the
    # next scan still reads them
    saved = {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file() and "logs" not in p.parts}
    assert (
        main(["ingest-git", str(repo), "--package", "foo", "--history", "--quiet", "--data-dir", str(data)])
        == 0
    )
    assert {p: p.stat().st_mtime_ns for p in saved} == saved
    assert by_path(cli_scan(drop, data, out))["a.c"]["evidence"]["origin"] == "upstream"


@pytest.fixture(autouse=True)
def _git_available() -> None:
    import shutil

    if shutil.which("git") is None:
        pytest.fail("git is needed to build the upstream repository")


def test_reverts_are_named_flagged_and_kept_in_review_and_a_lone_line_elsewhere_is_the_vendors(
    tmp_path: Path,
) -> None:
    """Issue 36, each rule on a real repository and a real scan: a vendor undoing an upstream fix the
    release holds, bringing back a block upstream removed, adding upstream's later one-line change in
    another place; beside a real backport; with a debian/patches series stating one revert."""
    repo = tmp_path / "foo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    block = ["#ifdef HAVE_LINUX\n", "\tsetup_linux(fd, flags | LINUX_ONLY);\n", "#endif\n"]
    # files left as they are: what identifies the release
    same: dict[str, bytes] = {f"same{n}.c": text(source(f"same{n}")) for n in range(8)}
    files: dict[str, bytes | None] = {"LICENSE": LICENCE, "a.c": text(A0), "r.c": text(B0)}
    files |= {"s.c": text(C0), "t.c": text(D0)}
    commit(repo, {**files, **same}, "Initial import", "2001-01-01")
    fixed = edit(B0, 10, "int b_10(void) { return 10 + check(); /* fix */ }\n")
    fix = commit(repo, {"r.c": text(fixed)}, "r: check b_10's result", "2001-02-01")
    with_block = [*C0[:20], *block, *C0[20:]]
    commit(repo, {"s.c": text(with_block)}, "s: set up linux", "2001-03-01")
    removal = commit(repo, {"s.c": text(C0)}, "s: no linux setup any more", "2001-04-01")
    git(repo, "tag", "1_0")
    errno = "#include <errno.h>\n"
    later = commit(repo, {"t.c": text([errno, *D0])}, "t: errno.h", "2001-05-01")
    commit(repo, {"a.c": text(A1)}, "a: fix the sign", "2001-06-01")  # not taken
    backport = commit(repo, {"a.c": text(A2)}, "a: fix an overflow", "2001-07-01")
    patch = (
        b"From: A Packager <p@example.org>\nSubject: Revert " + fix.encode() + b"\n\n"
        b"This reverts commit " + fix.encode() + b".\n---\n--- a/r.c\n+++ b/r.c\n@@ -11 +11 @@\n-x\n+y\n"
    )
    tree = {
        "LICENSE": LICENCE,
        "a.c": text(edit(A0, 40, A2[40])),  # the later fix backported, not the one before it
        # the release's fix undone, and a vendor edit (else the file is a state upstream once had)
        "r.c": text(edit(B0, 45, "int b_45(void) { return vendor(); }\n")),
        "s.c": text(edit(with_block, 50, "int c_47(void) { return vendor(); }\n")),  # the block back
        "t.c": text([*D0[:30], errno, *D0[30:]]),  # upstream's later line, in another place
        **same,
        "debian/patches/series": b"revert-fix.patch\n",
        "debian/patches/revert-fix.patch": patch,
    }
    m = scan_with_history(repo, tar_drop(tmp_path, tree))
    files_ = by_path(m)
    assert {n: files_[n]["class"] for n in ("a.c", "r.c", "s.c", "t.c")} == dict.fromkeys(
        ("a.c", "r.c", "s.c", "t.c"), "modified"
    )
    ev = {name: files_[name]["evidence"] for name in ("a.c", "r.c", "s.c", "t.c")}
    # every base is the release's file
    assert {name: (e["base"]["version"], e["base"].get("commit")) for name, e in ev.items()} == dict.fromkeys(
        ev, ("1.0", None)
    )
    assert (ev["a.c"]["origin"], [h["commit"] for h in ev["a.c"]["hunks"]]) == ("upstream", [backport])
    assert [(h["origin"], (h.get("reverts") or {}).get("commit")) for h in ev["r.c"]["hunks"]] == [
        ("revert", fix),
        ("vendor", None),
    ]
    assert [(h["origin"], (h.get("reverts") or {}).get("commit")) for h in ev["s.c"]["hunks"]] == [
        ("revert", removal),
        ("vendor", None),
    ]
    assert (ev["t.c"]["origin"], [h["origin"] for h in ev["t.c"]["hunks"]]) == ("vendor", ["vendor"])
    assert later not in json.dumps(ev["t.c"])
    # the reverts stay in review, flagged with the commit's own subject; only the backport is apart
    assert m["summary"]["backported"] == 1
    flagged = {f["path"].removeprefix("foo-1.0/"): f for f in m["flags"] if f["kind"] == "reverts-upstream"}
    assert set(flagged) == {"r.c", "s.c"}
    assert flagged["r.c"]["commit"] == fix and flagged["r.c"]["evidence"] == "r: check b_10's result"
    assert flagged["s.c"]["evidence"] == "s: no linux setup any more"
    assert m["summary"]["flags"]["review"] >= 2
    # what the patch series says of r.c, beside the content's answer
    [said] = ev["r.c"]["patches"]
    assert (said["patch"], said["states_reverts"]) == ("revert-fix.patch", [fix])


def test_a_commit_dated_before_its_parent_is_still_after_it_when_a_revert_is_named(tmp_path: Path) -> None:
    """Before and after by ancestry: upstream's removal of a block was made on a branch with a date
    before the block was added (a rebased or imported commit), then merged into 1.0. A drop putting the
    block back reverts that removal; ordered by date, the removal came "before" the block existed and
    the commit undone could not be told."""
    repo = tmp_path / "foo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    same: dict[str, bytes] = {f"same{n}.c": text(source(f"same{n}")) for n in range(8)}
    commit(repo, {"LICENSE": LICENCE, "s.c": text(C0), **same}, "Initial import", "2001-01-01")
    block = ["#ifdef HAVE_LINUX\n", "\tsetup_linux(fd, flags | LINUX_ONLY);\n", "#endif\n"]
    with_block = [*C0[:20], *block, *C0[20:]]
    commit(repo, {"s.c": text(with_block)}, "s: set up linux", "2001-03-01")
    git(repo, "checkout", "-q", "-b", "side")
    # the block removed together with a change to the line before it: no exact opposite in the index
    reworked = [*C0[:19], "int c_19(void) { return 19 + 0; }\n", *C0[20:]]
    removal = commit(repo, {"s.c": text(reworked)}, "s: no linux setup any more", "1999-06-01")
    git(repo, "checkout", "-q", "master")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge side", "side", date="2001-04-01T00:00:00Z")
    git(repo, "tag", "1_0")
    assert git(repo, "show", "-s", "--format=%cI", removal).startswith("1999")
    back = [*reworked[:20], *block, *reworked[20:]]
    tree = {"LICENSE": LICENCE, "s.c": text(back), **same}
    m = scan_with_history(repo, tar_drop(tmp_path, tree))
    ev = by_path(m)["s.c"]["evidence"]
    assert (ev["base"]["version"], ev["base"].get("commit")) == ("1.0", None)
    assert [(h["origin"], (h.get("reverts") or {}).get("commit")) for h in ev["hunks"]] == [
        ("revert", removal)
    ]
    assert ev["reverts"][0]["subject"] == "s: no linux setup any more"


def test_a_change_made_before_a_rename_is_found_at_the_path_the_file_had(tmp_path: Path) -> None:
    """Renames recorded at ingest: upstream removed a block from old.c, then renamed old.c to new.c,
    then released 1.0. A drop putting the block back into new.c reverts the removal, which the hunk
    index holds at old.c; the file's earlier states are old.c's."""
    repo = tmp_path / "foo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    same: dict[str, bytes] = {f"same{n}.c": text(source(f"same{n}")) for n in range(8)}
    block = ["#ifdef HAVE_LINUX\n", "\tsetup_linux(fd, flags | LINUX_ONLY);\n", "#endif\n"]
    with_block = [*C0[:20], *block, *C0[20:]]
    commit(repo, {"LICENSE": LICENCE, "old.c": text(with_block), **same}, "Initial import", "2001-01-01")
    removal = commit(repo, {"old.c": text(C0)}, "old: no linux setup any more", "2001-02-01")
    git(repo, "mv", "old.c", "new.c")
    git(repo, "commit", "-q", "-m", "rename old.c to new.c", date="2001-03-01T00:00:00Z")
    git(repo, "tag", "1_0")
    tree = {"LICENSE": LICENCE, "new.c": text(edit(with_block, 50, "int c_47(void) { return 0; }\n")), **same}
    m = scan_with_history(repo, tar_drop(tmp_path, tree))
    ev = by_path(m)["new.c"]["evidence"]
    assert (ev["base"]["version"], ev["base"]["path"]) == ("1.0", "new.c")
    assert [(h["origin"], (h.get("reverts") or {}).get("commit")) for h in ev["hunks"]] == [
        ("revert", removal),
        ("vendor", None),
    ]
    with embedded() as es:  # what the ingest recorded of the rename, in both paths' shards
        content = ContentStore(es.client.s3, es.names.upstream_bucket)
        ingest_git(
            GitRepo(str(repo / ".git")),
            "foo",
            es.client.db,
            Releases(es.client.s3, es.names.upstream_bucket),
            content,
            GitIngestOptions(history=True),
        )
        shards = content.shards("foo", "history", range(64)).values()
        moved = [e for s in shards for e in (s.get("renamed_from") or {}).get("new.c", ())]
        back = [e for s in shards for e in (s.get("renamed_to") or {}).get("old.c", ())]
    assert [e[0] for e in moved] == ["old.c"] and [e[0] for e in back] == ["new.c"]

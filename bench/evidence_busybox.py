"""Review evidence on real upstream history (issue 24): BusyBox 1.37.0 with real upstream commits made
after it applied to some files, vendor edits to others, and both to a few; scanned against a database
holding BusyBox's git history, and against one holding the 1.37.0 release alone.

    python bench/evidence_busybox.py [--tarball busybox_1.37.0.orig.tar.bz2] [--runs 3] [--out DIR]
        [--mirror CLONE_OF_mirror/busybox] [--w32 CLONE_OF_rmyorston/busybox-w32]
        [--debian-dsc busybox_1.37.0-6.dsc] [--reuse]

1. One repository with upstream's history up to and past 1.37.0: the GitHub mirror ``mirror/busybox``
   (every branch and tag, up to 1_36_1) plus the ``busybox`` branch of ``rmyorston/busybox-w32`` (upstream's
   master after July 2024) as ``master``, and tags 1_37_0 and 1_38_0 at upstream's "Bump version to ..."
   commits (where upstream's own tags are; 1_35_0 and 1_36_0 are there in both mirrors, and the 1.37.0
   tarball is checked to be that commit's tree). Ingested with ``dropscan ingest-git --history``.
2. The drop: the 1.37.0 release tarball (or ``git archive`` of 1_37_0 without one) with commits from
   ``1_37_0..master`` applied by ``git apply`` of their ``git format-patch`` text, each chosen by a fixed
   rule (below); marked vendor edits; the ground truth (``expected.json``) is written from how the drop
   was built, with git alone.
3. The drop scanned (``dropscan scan``) against the history database (``--runs`` times) and against a
   database holding only the 1.37.0 tarball; every file's ``evidence`` compared with the ground truth,
   and the precision of its upstream citations (a hunk cited to a commit not applied is a false one).
4. With Debian's source package (``--debian-dsc``, busybox 1.37.0-6 of trixie): the 1.37.0 tarball with
   Debian's patch series applied (``patch -p1``, the series in order) and ``debian/`` beside, scanned
   against the same history (issue 36): no file a patch changed may be cleared as upstream's own, every
   modified file is measured against 1.37.0, and every file that brings back lines a commit the
   patches' headers say they revert removed (by git: that commit's removed lines, in the drop, not in
   1.37.0) names that commit.

Writes ``<out>/result.json`` and prints a table; exits 1 when a classification is wrong.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests")]
from helpers.busybox_debian import debian_truth, series  # noqa: E402 - the tests' truth, the same rule

BIN = Path(sys.executable).parent
MIRROR = "/work/.mirror/mirror+busybox/repo"
W32 = "/work/.mirror/rmyorston+busybox-w32/repo"
PREFIX = "busybox-1.37.0"
#: how many files of each kind the drop gets
BACKPORTED, VENDOR, MIXED = 8, 10, 5
#: a commit's patch is taken only when it changes at most this many lines (small, reviewable fixes)
MAX_CHANGED = 40
#: a vendor edit lies at least this many lines away from any upstream change (else the two are one hunk)
GAP = 8
MARK = "acme-vendor-edit"
#: the ingest of the same mirror before review evidence existed (issue 23's note, seconds)
ISSUE_23 = {"total": 145, "tags": 15, "history": 74, "merge": 50}


def git(repo: str | Path, *args: str, input: bytes | None = None) -> str:
    out = subprocess.run(
        ["git", "--git-dir", str(repo), *args], input=input, capture_output=True, check=True
    ).stdout
    return out.decode("utf-8", "replace")


def run(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB, stdout) of a child; its stderr goes to ours."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(list(argv), stdout=out, env=None if env is None else {**os.environ, **env})
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    if status != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} exited with {status}: {text[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, text


# ------------------------------------------------------------------ 1. the repository
def build_repo(repo: Path, mirror: str = MIRROR, w32: str = W32) -> dict[str, str]:
    """The combined bare repository; returns the release tags added (name -> commit)."""
    if not (repo / "HEAD").is_file():
        tmp = repo.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--mirror", mirror, str(tmp)], check=True)
        git(tmp, "fetch", "-q", w32, "+refs/heads/busybox:refs/heads/master")
        tmp.rename(repo)
    added: dict[str, str] = {}
    for version in ("1.37.0", "1.38.0"):
        tag = version.replace(".", "_")
        found = git(repo, "log", "--format=%H", f"--grep=^Bump version to {version}$", "master").split()
        if len(found) != 1:
            raise SystemExit(f"no single 'Bump version to {version}' commit on master: {found}")
        makefile = git(repo, "show", f"{found[0]}:Makefile")
        if f"PATCHLEVEL = {version.split('.')[1]}" not in makefile:
            raise SystemExit(f"{found[0]} does not say version {version} in its Makefile")
        git(repo, "tag", "-f", tag, found[0])
        added[tag] = found[0]
    return added


# ------------------------------------------------------------------ 2. the drop
@dataclass
class Picked:
    """A drop file and what was done to it."""

    path: str
    kind: str  # backported | vendor | mixed
    commits: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # earlier commits to the file NOT applied
    vendor_edits: int = 0


def release_tree(repo: Path, tarball: Path | None, into: Path) -> str:
    """The 1.37.0 tree in ``into/PREFIX``; returns what it came from."""
    if tarball is not None:
        with tarfile.open(tarball) as tar:
            tar.extractall(into, filter="tar")
        if not (into / PREFIX).is_dir():
            raise SystemExit(f"{tarball} has no {PREFIX}/")
        return f"the release tarball {tarball.name}"
    data = subprocess.run(
        ["git", "--git-dir", str(repo), "archive", f"--prefix={PREFIX}/", "1_37_0"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "x", "-C", str(into)], input=data, check=True)
    return "git archive of the tag 1_37_0"


def check_tarball(repo: Path, tree: Path) -> list[str]:
    """Files whose content differs between the tarball and the tag (the tag's .gitignore files aside)."""
    listed = git(repo, "ls-tree", "-r", "1_37_0").splitlines()
    differ: list[str] = []
    for line in listed:
        meta, path = line.split("\t", 1)
        mode, _, blob = meta.split()
        if path.endswith(".gitignore") or mode == "120000":
            continue
        f = tree / path
        if not f.is_file() or git(repo, "hash-object", str(f)).strip() != blob:
            differ.append(path)
    return differ


def commit_files(repo: Path, commit: str) -> list[tuple[str, str]]:
    """(status, path) of a commit against its parent."""
    out = git(repo, "diff-tree", "--no-commit-id", "-r", "--name-status", "--no-renames", commit)
    return [tuple(line.split("\t", 1)) for line in out.splitlines()]  # type: ignore[misc]


def changed_lines(repo: Path, commit: str) -> int:
    out = git(repo, "diff-tree", "--no-commit-id", "--numstat", commit)
    return sum(int(a) + int(d) for a, d, _ in (line.split("\t", 2) for line in out.splitlines()))


def _outside(tree: Path) -> dict[str, str]:
    """git apply's environment: ``tree`` is no repository's, even below a checkout (a patch tool)."""
    return {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.resolve().parent)}


def applies(tree: Path, patch: bytes) -> bool:
    argv = ["git", "apply", "--check", "-"]
    return (
        subprocess.run(argv, cwd=tree, input=patch, capture_output=True, env=_outside(tree)).returncode == 0
    )


def apply(tree: Path, patch: bytes) -> None:
    argv = ["git", "apply", "-"]
    subprocess.run(argv, cwd=tree, input=patch, capture_output=True, check=True, env=_outside(tree))


def in_repo(repo: Path, data: bytes) -> bool:
    """Whether upstream ever had this exact content (at any path, in any commit)."""
    blob = git(repo, "hash-object", "--stdin", input=data).strip()
    return (
        subprocess.run(
            ["git", "--git-dir", str(repo), "cat-file", "-e", blob], capture_output=True
        ).returncode
        == 0
    )


def vendor_edit(text: list[str], n: int, away_from: set[int]) -> tuple[list[str], int]:
    """Two vendor edits (a line inserted, a line changed) at least GAP lines from ``away_from``
    (0-based line numbers already changed); returns the new text and the edits made."""
    ok = [
        i
        for i, line in enumerate(text)
        if line.strip() not in ("", "{", "}")
        and not line.rstrip().endswith("\\")
        and "*/" not in line
        and "/*" not in line
        and all(abs(i - j) > GAP for j in away_from)
    ]
    if len(ok) < 10:
        return text, 0
    out = list(text)
    change = ok[(2 * len(ok)) // 3]
    out[change] = out[change].rstrip("\n") + f" /* {MARK} {n}b */\n"
    insert = ok[len(ok) // 3]
    out.insert(insert, f"/* {MARK} {n}a: acme board support */\n")
    return out, 2


def _changed_in(before: list[str], after: list[str]) -> set[int]:
    """0-based lines of ``after`` that differ from ``before`` (difflib: not the diff dropscan uses)."""
    out: set[int] = set()
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag != "equal":
            out.update(range(j1, max(j2, j1 + 1)))
    return out


class _Upstream:
    """The commits after 1.37.0, by path, and their patches."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.release = set(git(repo, "ls-tree", "-r", "--name-only", "1_37_0").splitlines())
        self.order = git(repo, "rev-list", "--reverse", "--no-merges", "1_37_0..master").split()
        self.touching: dict[str, list[str]] = {}  # path -> post-1.37.0 commits touching it, oldest first
        self.single: dict[str, str] = {}  # commit -> its path, for one-parent commits changing one .c/.h
        for c in self.order:
            files = commit_files(repo, c)
            for _, p in files:
                self.touching.setdefault(p, []).append(c)
            one = files[0][1] if len(files) == 1 and files[0][0] == "M" else ""
            parents = len(git(repo, "rev-list", "--parents", "-1", c).split()) - 1
            if one.endswith((".c", ".h")) and one in self.release and parents == 1:
                self.single[c] = one
        self._patches: dict[str, bytes] = {}

    def small(self, c: str, path: str) -> bool:
        return self.single.get(c) == path and changed_lines(self.repo, c) <= MAX_CHANGED

    def patch(self, c: str) -> bytes:
        if c not in self._patches:
            argv = ["git", "--git-dir", str(self.repo), "format-patch", "-1", "--stdout", c]
            self._patches[c] = subprocess.run(argv, capture_output=True, check=True).stdout
        return self._patches[c]


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="surrogateescape").splitlines(keepends=True)


def _backports(up: _Upstream, root: Path, picked: dict[str, Picked]) -> None:
    """Files left equal to no upstream state: one or two later commits to each applied, never the
    first post-1.37.0 commit to it (the busiest paths first)."""
    for path in sorted(up.touching, key=lambda p: (-len(up.touching[p]), p)):
        if sum(p.kind == "backported" for p in picked.values()) >= BACKPORTED:
            return
        if path not in up.release or not path.endswith((".c", ".h")) or len(up.touching[path]) < 2:
            continue
        before = (root / path).read_bytes()
        took: list[str] = []
        for c in (c for c in up.touching[path][1:] if up.small(c, path)):
            if len(took) < 2 and applies(root, up.patch(c)):
                apply(root, up.patch(c))
                took.append(c)
        if took and in_repo(up.repo, (root / path).read_bytes()):
            (root / path).write_bytes(before)  # equals an upstream state: not what this tests
            took = []
        if took:
            last = up.order.index(took[-1])
            skipped = [c for c in up.touching[path] if c not in took and up.order.index(c) < last]
            picked[path] = Picked(path, "backported", took, skipped)


def _mixed(up: _Upstream, root: Path, picked: dict[str, Picked]) -> None:
    """Files with one upstream commit (the oldest that applies) and vendor edits far from it."""
    for c in up.order:
        if sum(p.kind == "mixed" for p in picked.values()) >= MIXED:
            return
        path = up.single.get(c)
        if path is None or path in picked or not path.endswith(".c") or not up.small(c, path):
            continue
        before = _lines(root / path)
        if not applies(root, up.patch(c)):
            continue
        apply(root, up.patch(c))
        after = _lines(root / path)
        edited, n = vendor_edit(after, len(picked), _changed_in(before, after))
        (root / path).write_text("".join(edited if n else before), errors="surrogateescape")
        if n:
            picked[path] = Picked(path, "mixed", [c], vendor_edits=n)


def _vendor(up: _Upstream, root: Path, picked: dict[str, Picked]) -> None:
    """Vendor edits alone, to .c files no post-1.37.0 commit touched, spread over the tree."""
    untouched = sorted(p for p in up.release if p.endswith(".c") and p not in up.touching and p not in picked)
    step = max(1, len(untouched) // (VENDOR + 1))
    for path in untouched[step::step]:
        if sum(p.kind == "vendor" for p in picked.values()) >= VENDOR:
            return
        edited, n = vendor_edit(_lines(root / path), len(picked), set())
        if n:
            (root / path).write_text("".join(edited), errors="surrogateescape")
            picked[path] = Picked(path, "vendor", vendor_edits=n)


def build_drop(repo: Path, tree: Path, out: Path) -> tuple[Path, dict[str, Any]]:
    """Apply the chosen commits and vendor edits to ``tree``; returns the drop and its ground truth."""
    root = tree / PREFIX
    up = _Upstream(repo)
    picked: dict[str, Picked] = {}
    _backports(up, root, picked)
    _mixed(up, root, picked)
    _vendor(up, root, picked)
    drop = out / "acme-busybox-1.37.0-gpl.tar.gz"
    with tarfile.open(drop, "w:gz") as tar:
        tar.add(root, arcname=PREFIX)
    return drop, truth_of(repo, root, picked)


def truth_of(repo: Path, root: Path, picked: Mapping[str, Picked]) -> dict[str, Any]:
    """The ground truth, from the construction and git (not from dropscan)."""
    releases = {"1.37.0": "1_37_0", "1.38.0": "1_38_0"}

    def first_release(c: str) -> str | None:
        for version, tag in releases.items():
            if (
                subprocess.run(
                    ["git", "--git-dir", str(repo), "merge-base", "--is-ancestor", c, tag]
                ).returncode
                == 0
            ):
                return version
        return None

    files: dict[str, Any] = {}
    for path, p in sorted(picked.items()):
        data = (root / path).read_bytes()
        lines = data.decode("utf-8", "surrogateescape").splitlines()
        added, removed = numstat(repo, f"1_37_0:{path}", root / path)
        files[f"{PREFIX}/{path}"] = {
            "kind": p.kind,
            "origin": {"backported": "upstream", "vendor": "vendor", "mixed": "mixed"}[p.kind],
            "base_sha256": hashlib.sha256(git_bytes(repo, f"1_37_0:{path}")).hexdigest(),
            "commits": [
                {
                    "id": c,
                    "release": first_release(c),
                    "subject": git(repo, "log", "-1", "--format=%s", c).strip(),
                }
                for c in p.commits
            ],
            "skipped_earlier": p.skipped,
            "vendor_lines": [i + 1 for i, line in enumerate(lines) if MARK in line],
            "lines_added": added,
            "lines_removed": removed,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    return {"files": files}


def git_bytes(repo: Path, spec: str) -> bytes:
    return subprocess.run(
        ["git", "--git-dir", str(repo), "show", spec], capture_output=True, check=True
    ).stdout


def numstat(repo: Path, spec: str, new: Path) -> tuple[int, int]:
    """(added, removed) lines from ``spec`` to ``new`` by git's own diff."""
    with tempfile.NamedTemporaryFile() as old:
        old.write(git_bytes(repo, spec))
        old.flush()
        got = subprocess.run(
            ["git", "diff", "--no-index", "--numstat", old.name, str(new)], capture_output=True
        )
    added, removed, _ = got.stdout.decode().split("\t", 2)
    return int(added), int(removed)


# ------------------------------------------------------------------ 3. scans against the ground truth
def check_history(files: Mapping[str, Any], truth: Mapping[str, Any]) -> dict[str, list[str]]:
    """path -> what is wrong with its evidence (empty: right), with the history in the database."""
    wrong: dict[str, list[str]] = {}
    for path, want in truth["files"].items():
        bad = _common(files.get(path), path, want)
        if not bad:
            ev = files[path]["evidence"]
            bad = _hunks(ev["hunks"], want)
            if ev["origin"] != want["origin"]:
                bad.append(f"origin {ev['origin']}, expected {want['origin']}")
        if bad:
            wrong[path] = bad
    return wrong


def _hunks(hunks: Sequence[Mapping[str, Any]], want: Mapping[str, Any]) -> list[str]:
    """A hunk over a vendor edit's line is vendor; every other hunk upstream, citing a commit applied
    to the file with its first release; every applied commit cited."""
    bad: list[str] = []
    cited: set[str] = set()
    vendor_hunks = 0
    release = {c["id"]: c["release"] for c in want["commits"]}
    for h in hunks:
        where = f"hunk @{h['new_start']},{h['new_lines']}"
        if set(range(h["new_start"], h["new_start"] + h["new_lines"])) & set(want["vendor_lines"]):
            vendor_hunks += 1
            if h["origin"] != "vendor":
                bad.append(f"{where}: a vendor edit called {h['origin']} ({h.get('commit')})")
        elif h["origin"] != "upstream":
            bad.append(f"{where}: upstream's change called {h['origin']}")
        elif h.get("commit") not in release:
            bad.append(f"{where}: cites {h.get('commit')}, applied {sorted(release)}")
        else:
            cited.add(h["commit"])
            if h.get("release") != release[h["commit"]]:
                bad.append(f"{where}: release {h.get('release')}, expected {release[h['commit']]}")
    if set(release) - cited:
        bad.append(f"applied commits not cited: {sorted(set(release) - cited)}")
    if vendor_hunks != len(want["vendor_lines"]):
        bad.append(f"{vendor_hunks} hunks hold the {len(want['vendor_lines'])} vendor edits")
    return bad


def check_release_only(files: Mapping[str, Any], truth: Mapping[str, Any]) -> dict[str, list[str]]:
    """path -> what is wrong, with the 1.37.0 release alone in the database: every hunk vendor."""
    wrong: dict[str, list[str]] = {}
    for path, want in truth["files"].items():
        bad = _common(files.get(path), path, want)
        ev = (files.get(path) or {}).get("evidence") or {}
        if not bad:
            bad += [f"hunk @{h['new_start']}: {h['origin']}" for h in ev["hunks"] if h["origin"] != "vendor"]
            if ev["origin"] != "vendor":
                bad.append(f"origin {ev['origin']}, expected vendor")
        if bad:
            wrong[path] = bad
    return wrong


def _common(f: Mapping[str, Any] | None, path: str, want: Mapping[str, Any]) -> list[str]:
    """Class, base and line counts: the same with or without the history."""
    if f is None:
        return ["not in the manifest"]
    if f["class"] != "modified":
        return [f"class {f['class']}, expected modified"]
    ev = f.get("evidence")
    if not ev or ev.get("error"):
        return [f"no evidence: {ev and ev.get('error')}"]
    bad: list[str] = []
    base = ev["base"]
    expected_base = {"package": "busybox", "version": "1.37.0", "path": path.removeprefix(PREFIX + "/")}
    if {k: base.get(k) for k in expected_base} != expected_base or base.get("commit"):
        bad.append(f"base {base}")
    if base.get("sha256") != want["base_sha256"]:
        bad.append("base sha256 is not 1.37.0's")
    if (ev["lines_added"], ev["lines_removed"]) != (want["lines_added"], want["lines_removed"]):
        bad.append(
            f"+{ev['lines_added']} -{ev['lines_removed']}, git diff says "
            f"+{want['lines_added']} -{want['lines_removed']}"
        )
    return bad


def precision(files: Mapping[str, Any], truth: Mapping[str, Any]) -> dict[str, Any]:
    """Upstream citations of the history scan: right (a hunk off the vendor lines citing a commit
    applied to the file) and false (any other), over the drop's every modified file."""
    right = false = 0
    wrong: list[str] = []
    for path, f in files.items():
        ev = f.get("evidence") or {}
        want = truth["files"].get(path)
        applied = {c["id"] for c in want["commits"]} if want else set()
        vendor_lines = set(want["vendor_lines"]) if want else set()
        for h in ev.get("hunks", ()):
            if h.get("origin") != "upstream":
                continue
            span = set(range(h["new_start"], h["new_start"] + h["new_lines"]))
            if h.get("commit") in applied and not span & vendor_lines:
                right += 1
            else:
                false += 1
                wrong.append(f"{path}@{h['new_start']}: {h.get('commit')}")
    cited = right + false
    return {
        "upstream_citations": cited,
        "false_upstream_citations": false,
        "precision": round(right / cited, 4) if cited else None,
        "false": wrong,
    }


def debian_tree(dsc: Path, into: Path) -> Path:
    """The source package's tree: its orig tarball, ``debian/`` from its debian tarball, and the
    series applied in order with ``patch -p1`` (what dpkg-source -x makes, without dpkg-dev)."""
    folder = dsc.parent
    orig = next(folder.glob("busybox_1.37.0.orig.tar.*"))
    deb = next(folder.glob(dsc.name.removesuffix(".dsc") + ".debian.tar.*"))
    with tarfile.open(orig) as tar:
        tar.extractall(into, filter="tar")
    root = into / PREFIX
    with tarfile.open(deb) as tar:
        tar.extractall(root, filter="tar")
    for name in series(root):
        patch = (root / "debian" / "patches" / name).resolve()
        subprocess.run(["patch", "-p1", "-s", "-i", str(patch)], cwd=root, check=True)
    return root


def check_debian(files: Mapping[str, Any], truth: Mapping[str, Any]) -> dict[str, Any]:
    """What issue 36 asks of the Debian drop's evidence (each list empty when right)."""
    ev = {p.removeprefix(PREFIX + "/"): (f.get("evidence") or {}) for p, f in files.items()}

    def named(path: str) -> list[dict[str, Any]]:
        return list(ev.get(path, {}).get("reverts") or [])

    modified = {p for p, f in files.items() if f["class"] == "modified" and f.get("evidence")}
    cleared = sorted(p for p in truth["patched"] if ev.get(p, {}).get("origin") == "upstream")
    not_release = sorted(
        p.removeprefix(PREFIX + "/")
        for p in modified
        if (files[p]["evidence"].get("base") or {}).get("version") != "1.37.0"
        or (files[p]["evidence"].get("base") or {}).get("commit")
    )
    unnamed = [
        f"{f} does not name {c[:12]} (names {[str(r.get('commit'))[:12] for r in named(f)]})"
        for f, c in truth["reverts"]
        if c not in {r.get("commit") for r in named(f)}
    ]
    reverting = {
        p: [r.get("commit") for r in e.get("reverts") or []] for p, e in ev.items() if e.get("reverts")
    }
    cited = [
        f"{p}@{h['new_start']}: {h.get('commit')}"
        for p, e in ev.items()
        for h in e.get("hunks", ())
        if h.get("origin") == "upstream"
    ]
    return {
        "modified": len(modified),
        "patched_files": len(truth["patched"]),
        "cleared_as_upstream": cleared,
        "base_not_1_37_0": not_release,
        "revert_truth": len(truth["reverts"]),
        "reverts_not_named": unnamed,
        "files_flagged_reverting": reverting,
        "upstream_citations": cited,
        "with_patch_statements": sum(1 for e in ev.values() if e.get("patches")),
    }


def others(files: Mapping[str, Any], truth: Mapping[str, Any]) -> dict[str, Any]:
    """The drop's other files: every one should be identical to 1.37.0."""
    rest = [f for p, f in files.items() if p not in truth["files"]]
    classes: dict[str, int] = {}
    for f in rest:
        classes[f["class"]] = classes.get(f["class"], 0) + 1
    return {"classes": classes, "not_identical": sorted(f["path"] for f in rest if f["class"] != "identical")}


def without_evidence(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as it would be without the evidence step (its keys removed)."""
    m: dict[str, Any] = json.loads(json.dumps(manifest))
    for f in m["files"]:
        f.pop("evidence", None)
    m.pop("evidence", None)
    m["stats"].pop("evidence", None)
    for c in m.get("components") or []:
        c.pop("baseline", None)
    for k in ("backported", "vendor_changed"):
        m["summary"].pop(k, None)
    return m


def scan(drop: Path, data: Path, out: Path) -> dict[str, Any]:
    manifest = out / "manifest.json"
    argv = [
        str(BIN / "dropscan"),
        "scan",
        str(drop),
        "--supplier",
        "acme",
        "--quiet",
        "--data-dir",
        str(data),
    ]
    argv += ["--manifest-out", str(manifest)]
    seconds, rss, _ = run(argv)
    m = json.loads(manifest.read_text())
    return {"wall": seconds, "rss": rss, "manifest": m, "bytes": manifest.stat().st_size}


def scan_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    from dropscan.audit.manifest import to_json

    m = runs[-1]["manifest"]
    ev = m["stats"].get("evidence") or {}
    return {
        "runs": len(runs),
        "wall_seconds": [round(r["wall"], 1) for r in runs],
        "wall_seconds_median": round(statistics.median(r["wall"] for r in runs), 1),
        "triage_seconds_median": statistics.median(r["manifest"]["stats"]["seconds"]["triage"] for r in runs),
        "evidence_seconds": [r["manifest"]["stats"]["evidence"].get("seconds") for r in runs],
        "evidence_seconds_median": statistics.median(
            r["manifest"]["stats"]["evidence"].get("seconds", 0) for r in runs
        ),
        "peak_rss_mib": round(max(r["rss"] for r in runs)),
        "evidence_stats": ev,
        "manifest_bytes": len(to_json(m).encode()),
        "manifest_bytes_without_evidence": len(to_json(without_evidence(m)).encode()),
        "component": {k: m["components"][0].get(k) for k in ("package", "version", "nearest", "baseline")},
        "summary": {k: m["summary"].get(k) for k in ("review", "backported", "vendor_changed")},
    }


def table(truth: Mapping[str, Any], hist: Mapping[str, Any], rel: Mapping[str, Any]) -> list[str]:
    rows = [f"{'file':44} {'built as':10} {'history: origin (hunks)':34} {'release only':14} verdict"]
    for path, want in truth["files"].items():
        h = (hist["files"].get(path) or {}).get("evidence") or {}
        r = (rel["files"].get(path) or {}).get("evidence") or {}
        kinds = ",".join(
            x["origin"][0] + (f":{x['commit'][:7]}" if x.get("commit") else "") for x in h.get("hunks", ())
        )
        verdict = "ok" if path not in hist["wrong"] and path not in rel["wrong"] else "WRONG"
        got = f"{h.get('origin')} ({kinds})"
        name = path.removeprefix(PREFIX + "/")
        rows.append(f"{name:44} {want['kind']:10} {got:34.34} {r.get('origin')!s:14} {verdict}")
    return rows


def ingest_history(repo: Path, data: Path, code: Path | None = None) -> dict[str, Any]:
    """``dropscan ingest-git --history`` of the combined repository into a fresh embedded stack (with
    ``code``: the library found there instead of this checkout's, on the same interpreter)."""
    shutil.rmtree(data, ignore_errors=True)
    # ``-m dropscan.cli`` rather than the script: the script's entry point is this checkout's
    ingest = [
        sys.executable,
        "-m",
        "dropscan.cli",
        "ingest-git",
        str(repo),
        "--package",
        "busybox",
        "--history",
    ]
    ingest.append("--quiet")
    env = {"PYTHONPATH": str(code), "DROPSCAN_HOME": str(code.parent)} if code else None
    seconds, rss, text = run([*ingest, "--data-dir", str(data)], env)
    report = json.loads(text)
    out = {
        "runs": 1,
        "wall_seconds": round(seconds, 1),
        "peak_rss_mib": round(rss),
        "seconds": report["seconds"],
        "issue_23_seconds": ISSUE_23,
        "tags": report["tags"]["new"],
        "commits": report["commits"],
        "evidence": report.get("evidence"),
        "content_bytes": _size(data, "content"),
        "data_dir_bytes": _size(data, ""),
    }
    print(json.dumps({"ingest" if code is None else "ingest_before": out}), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tarball", help="busybox_1.37.0.orig.tar.bz2 (default: git archive of 1_37_0)")
    ap.add_argument("--mirror", default=MIRROR, help="a clone of github.com/mirror/busybox")
    ap.add_argument(
        "--w32", default=W32, help="a clone of github.com/rmyorston/busybox-w32 (its busybox branch)"
    )
    ap.add_argument("--runs", type=int, default=3, help="scans against the history database")
    ap.add_argument("--cache", default=".cache/bench/evidence", help="the combined repository is kept here")
    ap.add_argument("--out", default="bench-out/evidence")
    ap.add_argument(
        "--before",
        default="568d8ef",
        help="this project's commit before review evidence: its ingest is timed in the same run ('' not)",
    )
    ap.add_argument(
        "--reuse", action="store_true", help="scan the databases a previous run left (no ingest measured)"
    )
    ap.add_argument(
        "--debian-dsc",
        help="Debian's busybox 1.37.0 source package (.dsc beside its tarballs; default: the cache's)",
    )
    a = ap.parse_args(argv)
    out, cache = Path(a.out), Path(a.cache)
    out.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    repo = cache / "busybox.git"
    result: dict[str, Any] = {"tags_added": build_repo(repo, a.mirror, a.w32)}
    tarball = Path(a.tarball) if a.tarball else None
    with tempfile.TemporaryDirectory(dir=cache) as work:
        w = Path(work)
        tree = w / "tree"
        tree.mkdir()
        result["drop_from"] = release_tree(repo, tarball, tree)
        if tarball is not None:
            result["tarball_differs_from_tag"] = check_tarball(repo, tree / PREFIX)
        drop, truth = build_drop(repo, tree, out)
        (out / "expected.json").write_text(json.dumps(truth, indent=1))
        result["drop"] = {
            "files": {
                k: sum(1 for v in truth["files"].values() if v["kind"] == k)
                for k in ("backported", "vendor", "mixed")
            },
            "commits": sorted({c["id"] for v in truth["files"].values() for c in v["commits"]}),
        }
        print(json.dumps({"drop": result["drop"]}), flush=True)

        # the history database: one ingest (it takes minutes), then the scans
        hist_data = cache / "data-history"
        measured = out / "ingest.json"  # kept for --reuse: the ingest of the database scanned
        if a.reuse:
            result |= json.loads(measured.read_text()) if measured.is_file() else {}
        else:
            result["ingest"] = ingest_history(repo, hist_data)
            measured.write_text(json.dumps({"ingest": result["ingest"]}))
            if a.before:  # the same ingest by the library as it was before review evidence
                code = cache / f"code-{a.before}"
                if not (code / "template.yaml").is_file():  # its library, and the stack it deploys
                    code.mkdir(exist_ok=True)
                    src = subprocess.run(
                        ["git", "archive", a.before, "shared", "functions", "template.yaml"],
                        capture_output=True,
                        check=True,
                    )
                    subprocess.run(["tar", "x", "-C", str(code)], input=src.stdout, check=True)
                result["ingest_before_evidence"] = ingest_history(
                    repo, cache / "data-before", code / "shared"
                )
                shutil.rmtree(cache / "data-before", ignore_errors=True)
                measured.write_text(json.dumps({k: result[k] for k in ("ingest", "ingest_before_evidence")}))
        runs = [scan(drop, hist_data, w) for _ in range(a.runs)]
        hist = {"files": {f["path"]: f for f in runs[-1]["manifest"]["files"]}}
        hist["wrong"] = check_history(hist["files"], truth)
        result["history"] = scan_figures(runs) | {
            "wrong": hist["wrong"],
            "others": others(hist["files"], truth),
            "precision": precision(hist["files"], truth),
        }
        dsc = (
            Path(a.debian_dsc)
            if a.debian_dsc
            else next(iter(sorted(cache.glob("busybox_1.37.0-*.dsc"))), None)
        )
        if dsc is not None:
            deb = w / "debian"
            deb.mkdir()
            root = debian_tree(dsc, deb)
            deb_truth = debian_truth(repo, root, real=True)
            deb_drop = out / "debian-busybox-1.37.0.tar.gz"
            with tarfile.open(deb_drop, "w:gz") as tar:
                tar.add(root, arcname=PREFIX)
            deb_run = scan(deb_drop, hist_data, w)
            deb_files = {f["path"]: f for f in deb_run["manifest"]["files"]}
            result["debian"] = {
                "dsc": dsc.name,
                "evidence_seconds": deb_run["manifest"]["stats"]["evidence"].get("seconds"),
            }
            result["debian"] |= check_debian(deb_files, deb_truth)
            print(json.dumps({"debian": result["debian"]}), flush=True)

        # the release alone: the tarball (or the tag's archive) ingested as an archive
        rel_data = cache / "data-release"
        shutil.rmtree(rel_data, ignore_errors=True)
        archive = tarball
        if archive is None:
            archive = w / "busybox-1.37.0.tar.gz"
            git(repo, "archive", f"--prefix={PREFIX}/", "-o", str(archive), "1_37_0")
        run([str(BIN / "dropscan"), "ingest", str(archive), "--package", "busybox", "--version", "1.37.0",
             "--quiet", "--data-dir", str(rel_data)])  # fmt: skip
        rel_runs = [scan(drop, rel_data, w)]
        rel = {"files": {f["path"]: f for f in rel_runs[-1]["manifest"]["files"]}}
        rel["wrong"] = check_release_only(rel["files"], truth)
        result["release_only"] = scan_figures(rel_runs) | {
            "wrong": rel["wrong"],
            "others": others(rel["files"], truth),
        }
        # the same hunks either way: one base, one diff
        result["same_hunks_both_ways"] = sorted(
            p
            for p in truth["files"]
            if [
                (h["new_start"], h["new_lines"])
                for h in (hist["files"].get(p) or {}).get("evidence", {}).get("hunks", [])
            ]
            == [
                (h["new_start"], h["new_lines"])
                for h in (rel["files"].get(p) or {}).get("evidence", {}).get("hunks", [])
            ]
        )
    rows = table(truth, hist, rel)
    print("\n".join(rows))
    deb_ok = "debian" not in result or not any(
        result["debian"][k] for k in ("cleared_as_upstream", "base_not_1_37_0", "reverts_not_named")
    )
    ok = (
        not hist["wrong"]
        and not rel["wrong"]
        and not result["history"]["others"]["not_identical"]
        and len(result["same_hunks_both_ways"]) == len(truth["files"])
        and deb_ok
    )
    result["ok"] = ok
    result["table"] = rows
    (out / "result.json").write_text(json.dumps(result, indent=1))
    for name in ("history", "release_only"):
        r = result[name]
        print(f"{name}: {json.dumps({k: r[k] for k in ('wrong', 'summary', 'component')})}")
    right = len(truth["files"]) - len(set(hist["wrong"]) | set(rel["wrong"]))
    p = result["history"]["precision"]
    print(
        f"files right: {right}/{len(truth['files'])}; upstream citations {p['upstream_citations']}, "
        f"false {p['false_upstream_citations']}, precision {p['precision']}"
    )
    if "debian" in result:
        d = result["debian"]
        print(
            f"debian {d['dsc']}: {d['patched_files']} files patched, {len(d['cleared_as_upstream'])} cleared "
            f"as upstream's, {len(d['base_not_1_37_0'])} of {d['modified']} modified not measured against "
            f"1.37.0, {d['revert_truth'] - len(d['reverts_not_named'])}/{d['revert_truth']} reverts named, "
            f"{len(d['files_flagged_reverting'])} files flagged reverts-upstream, "
            f"{len(d['upstream_citations'])} upstream citations"
        )
    print(f"{'all right' if ok else 'WRONG'}: {out / 'result.json'}")
    return 0 if ok else 1


def _size(root: Path, under: str) -> int:
    """Bytes of the files under ``root`` whose path holds ``under``."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and under in str(p.relative_to(root)))


if __name__ == "__main__":
    raise SystemExit(main())

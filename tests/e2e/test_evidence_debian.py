"""Review evidence on real data (issue 36): Debian's busybox 1.37.0-6 patch series applied to BusyBox
1.37.0, scanned against BusyBox's real history ingested with ``ingest-git --history``.

The data is ``make evidence-cases``' (:mod:`helpers.busybox_debian`): the drop, the ingested stack and
what git alone says of the series (the files each patch changes, and where a commit a patch's header
says it reverts removed lines the drop brings back). No network here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from helpers.busybox_debian import PREFIX, evidence_case
from helpers.flows import cli_scan


def _linked_copy(src: Path, dst: Path) -> None:
    """The ingested stack, its packs hard-linked (never rewritten), the rest copied: a scan adds to it."""
    shutil.copytree(src / "content", dst / "content", copy_function=os.link)
    for p in src.iterdir():
        if p.name != "content":
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, dst / p.name)


def _in_release(repo: Path, commit: str) -> bool:
    argv = ["git", "--git-dir", str(repo), "merge-base", "--is-ancestor", commit, "1_37_0"]
    return subprocess.run(argv, capture_output=True).returncode == 0


def test_debians_series_is_measured_against_1_37_0_not_cleared_and_its_reverts_named(tmp_path: Path) -> None:
    cache = evidence_case()
    truth: dict[str, Any] = json.loads((cache / "truth.json").read_text())
    real = truth["history"]["kind"] == "git"
    _linked_copy(cache / "data", tmp_path / "data")
    m = cli_scan(cache / "debian-busybox-1.37.0.tar.gz", tmp_path / "data", tmp_path / "manifest.json")
    [comp] = [c for c in m["components"] if c.get("identified")]
    assert (comp["package"], comp["version"]) == ("busybox", "1.37.0")
    files = {f["path"].removeprefix(PREFIX + "/"): f for f in m["files"]}
    ev = {p: f["evidence"] for p, f in files.items() if f["class"] == "modified" and f.get("evidence")}
    assert len(ev) > 100  # nearly every file of the 126 the series patches

    # every modified file measured against release 1.37.0's own file, never a commit's
    assert [p for p, e in ev.items() if e["base"].get("version") != "1.37.0" or e["base"].get("commit")] == []
    # no file a patch changed cleared as upstream's own (a backport)
    patched = set(truth["patched"])
    assert sorted(p for p in patched if ev.get(p, {}).get("origin") == "upstream") == []
    assert m["summary"]["backported"] == 0
    # what upstream is cited for is a commit 1.37.0 lacks (git's ancestry, not dates)
    cited = {h["commit"] for e in ev.values() for h in e["hunks"] if h["origin"] == "upstream"}
    repo = cache / "busybox.git"
    assert [c for c in cited if _in_release(repo, c)] == []
    if not real:  # releases as commits: nothing after 1.37.0, and too coarse to name an old commit
        assert cited == set()
        return
    # every file that brings back what a commit the patches say they revert removed names it
    assert truth["reverts"], "git finds the reverting files of the series"
    named = {p: {r.get("commit") for r in e.get("reverts") or ()} for p, e in ev.items()}
    assert [(f, c[:12]) for f, c in truth["reverts"] if c not in named.get(f, set())] == []
    flagged = {fl["path"].removeprefix(PREFIX + "/") for fl in m["flags"] if fl["kind"] == "reverts-upstream"}
    assert {f for f, _ in truth["reverts"]} <= flagged
    # a lone `#if 0` Debian adds to mount.c is no revert of the 2000 commit that removed one elsewhere
    assert not any(str(c).startswith("b040d4f3") for c in named.get("util-linux/mount.c", ()))

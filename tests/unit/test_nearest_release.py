"""The nearest release among many: ranked by the digests' ranges, decided by a few path lists."""

from __future__ import annotations

import hashlib
from typing import Any

from dropscan.audit.components import TOP_CANDIDATES, rank_releases, releases_holding, resolve_component
from dropscan.models import PackageInfo, Release, Trust

VERSIONS = tuple(f"1.{i}" for i in range(200))


def digest(path: str, version: int) -> str:
    return hashlib.sha256(f"{path}@{version}".encode()).hexdigest()


def release_files(v: int) -> dict[str, str]:
    """Release 1.v: 50 files that never change, and file k changes in every release that k divides."""
    files = {f"pkg-1.{v}/stable{k}.c": digest(f"stable{k}", 0) for k in range(50)}
    for k in range(1, 30):
        files[f"pkg-1.{v}/moving{k}.c"] = digest(f"moving{k}", v - v % k)
    return files


def ranges() -> dict[str, tuple[int, int]]:
    """digest -> (first, last) release holding it."""
    out: dict[str, tuple[int, int]] = {}
    for v in range(len(VERSIONS)):
        for d in release_files(v).values():
            lo, hi = out.get(d, (v, v))
            out[d] = (min(lo, v), max(hi, v))
    return out


def drop_of(v: int, changed: int = 0) -> list[dict[str, Any]]:
    """The component as finalize holds it: release 1.v, with ``changed`` files modified."""
    known = ranges()
    files = []
    items = sorted(release_files(v).items(), key=lambda i: ("moving" in i[0], i[0]))  # stable files first
    for n, (path, d) in enumerate(items):
        inner = "drop/" + path.split("/", 1)[1]
        if n < changed:
            files.append({"path": inner, "size": 10, "sha256": "0" * 64, "class": None})
            continue
        lo, hi = known[d]
        files.append(
            {
                "path": inner,
                "size": 10,
                "sha256": d,
                "class": "identical",
                "upstream": [{"package": "pkg", "versions": [VERSIONS[lo], VERSIONS[hi]]}],
            }
        )
    return files


PACKAGES = {"pkg": PackageInfo("pkg", Trust.HIGH, VERSIONS)}


def test_the_nearest_release_among_200_reads_three_path_lists() -> None:
    loaded: list[str] = []

    def load(package: str, version: str) -> Release:
        loaded.append(version)
        v = int(version.split(".")[1])
        return Release(package, version, release_files(v))

    files = drop_of(150, changed=2)
    entry = resolve_component("drop/", files, PACKAGES, load)
    assert (entry["package"], entry["version"]) == ("pkg", "1.150")
    assert len(loaded) == TOP_CANDIDATES  # whatever the number of releases in range
    assert entry["nearest"] == {
        "package": "pkg",
        "version": "1.150",
        "files": 77,
        "match_pct": 97.47,
        "missing": 0,
    }
    runner = entry["runner_up"]
    assert runner is not None and runner["version"] != "1.150" and runner["files"] < 77
    assert entry["releases_in_range"] == 200
    # the two changed files are modified (their paths are in 1.150), the rest say how many releases hold them
    assert [f["class"] for f in files[:2]] == ["modified", "modified"]
    stable = next(f for f in files if f["path"] == "drop/stable9.c")
    assert stable["upstream"][0]["releases"] == 200


def test_ranking_counts_each_file_in_every_release_of_its_range() -> None:
    files = [
        {"size": 1, "upstream": [{"package": "pkg", "versions": ["1.10", "1.12"]}]},
        {"size": 1, "upstream": [{"package": "pkg", "versions": ["1.11"]}]},
        {"size": 0, "upstream": [{"package": "pkg", "versions": ["1.0", "1.199"]}]},  # empty: no evidence
        {"size": 1, "upstream": [{"package": "pkg", "versions": []}]},  # history only: no release
    ]
    assert rank_releases(files, PACKAGES) == [("pkg", "1.11", 2), ("pkg", "1.12", 1), ("pkg", "1.10", 1)]


def test_releases_holding_a_range() -> None:
    assert releases_holding({"package": "pkg", "versions": ["1.9", "1.11"]}, PACKAGES) == 3
    assert releases_holding({"package": "pkg", "versions": ["1.9"]}, PACKAGES) == 1
    assert releases_holding({"package": "pkg", "versions": []}, PACKAGES) == 0


def test_the_summary_names_the_runner_up_and_spdx_the_commit_of_a_history_match() -> None:
    from dropscan.reports.spdx_elements import upstream_text
    from dropscan.reports.summary import component_line

    entry = resolve_component(
        "drop/",
        drop_of(150, changed=2),
        PACKAGES,
        lambda p, v: Release(p, v, release_files(int(v.split(".")[1]))),
    )
    line = component_line(entry)
    runner = entry["runner_up"]
    assert line.startswith("pkg 1.150 [drop/] — ")
    assert f"nearest of 200 releases; runner-up {runner['version']} ({runner['files']:,} files" in line
    history = {
        "package": "busybox",
        "versions": [],
        "commit": {"id": "d417193cf37ca1005830d7e16f5fa7e1d8a44209"},
    }
    assert upstream_text(history) == "busybox history, commit d417193cf37c"
    assert upstream_text({"package": "busybox", "versions": ["1.35.0", "1.36.1"]}) == "busybox 1.35.0–1.36.1"

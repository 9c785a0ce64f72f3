"""Components are identified as upstream releases; paths decide modified versus added."""

from __future__ import annotations

from typing import Any

from dropscan.audit.components import best_alignment, component_of, identify, release_paths, resolve_component
from dropscan.models import PackageInfo, Release, Trust


def files_of(tree: dict[str, str], cls: str | None = "identical", pkg: str = "foo") -> list[dict[str, Any]]:
    return [
        {
            "path": p,
            "size": 1,
            "sha256": d,
            "kind": "text",
            "class": cls,
            "upstream": [{"package": pkg, "versions": ["1.0", "1.2"]}],
        }
        for p, d in tree.items()
    ]


REL_10 = Release("foo", "1.0", {"foo-1.0/a.c": "1" * 64, "foo-1.0/b.c": "2" * 64, "foo-1.0/old.c": "9" * 64})
REL_12 = Release("foo", "1.2", {"foo-1.2/a.c": "1" * 64, "foo-1.2/b.c": "3" * 64, "foo-1.2/c.c": "4" * 64})


def test_component_of_nested_archive_folder_and_loose_file() -> None:
    assert component_of("acme/linux.tar.xz!/linux/Makefile") == "acme/linux.tar.xz!/"
    assert component_of("busybox-1.35.0-acme/Makefile") == "busybox-1.35.0-acme/"
    assert component_of("README") == ""


def test_release_paths_drop_the_common_top_folder() -> None:
    assert set(release_paths(REL_12)) == {"a.c", "b.c", "c.c"}


def test_alignment_ignores_vendor_top_folder_and_an_extra_leading_folder() -> None:
    known = {"a.c": "", "lib/b.c": ""}
    assert best_alignment(["linux-acme/a.c", "linux-acme/lib/b.c"], known) == 1
    assert best_alignment(["vendor/linux-acme/a.c", "vendor/linux-acme/lib/b.c"], known) == 2


def test_identify_picks_the_release_explaining_most_files() -> None:
    drop = files_of({"foo-acme/a.c": "1" * 64, "foo-acme/b.c": "3" * 64, "foo-acme/c.c": "4" * 64})
    ident = identify(drop, "foo-acme/", [REL_10, REL_12])
    assert ident.release is REL_12
    assert ident.match_pct == 100.0
    assert ident.missing == []


def test_identify_refuses_a_release_explaining_under_30_percent() -> None:
    drop = files_of({f"x/f{i}.c": f"{i:064d}" for i in range(10)} | {"x/a.c": "1" * 64})
    assert identify(drop, "x/", [REL_12]).release is None


def test_resolve_marks_modified_added_and_missing() -> None:
    drop = files_of({"foo-acme/a.c": "1" * 64, "foo-acme/c.c": "4" * 64})
    drop += files_of({"foo-acme/b.c": "5" * 64, "foo-acme/new.c": "6" * 64}, cls=None)
    packages = {"foo": PackageInfo("foo", Trust.HIGH, ("1.0", "1.2"))}
    releases = {("foo", "1.0"): REL_10, ("foo", "1.2"): REL_12}
    entry = resolve_component("foo-acme/", drop, packages, lambda p, v: releases.get((p, v)))
    classes = {f["path"]: f["class"] for f in drop}
    assert classes["foo-acme/b.c"] == "modified"
    assert classes["foo-acme/new.c"] == "added"
    assert (entry["package"], entry["version"], entry["missing"]) == ("foo", "1.2", [])
    assert entry["classes"]["modified"] == 1 and entry["classes"]["added"] == 1


def test_resolve_lists_upstream_files_absent_from_the_drop() -> None:
    drop = files_of({"foo-acme/a.c": "1" * 64, "foo-acme/b.c": "3" * 64})
    packages = {"foo": PackageInfo("foo", Trust.HIGH, ("1.2",))}
    entry = resolve_component("foo-acme/", drop, packages, lambda p, v: REL_12)
    assert entry["missing"] == ["c.c"]

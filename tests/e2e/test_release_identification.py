"""Which upstream release each component of a drop is, among many releases of many packages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dropscan.local.embedded import EmbeddedStack

from helpers.builders import make_tar, tar_bytes
from helpers.flows import scan_and_wait

VERSIONS = [f"2.{minor}.0" for minor in range(25, 33)]  # eight releases, like requests 2.25-2.32


def release_files(version: str, top: str | None = None) -> dict[str, bytes]:
    """A package whose files change a little from one release to the next, as real projects do."""
    minor = int(version.split(".")[1])
    top = top or f"lib-{version}"
    files = {f"{top}/COPYING": b"Apache License 2.0\n", f"{top}/lib/const.py": b"PI = 3.14159\n"}
    for i in range(40):
        settled = 25 + i % 8  # module i changes in every release up to 2.<settled>, then stays
        files[f"{top}/lib/mod{i:02d}.py"] = f"# module {i}\nREVISION = {min(minor, settled)}\n".encode()
    files[f"{top}/lib/version.py"] = f"__version__ = '{version}'\n".encode()
    if minor >= 29:
        files[f"{top}/lib/new_in_2_29.py"] = b"FEATURE = True\n"
    return files


@pytest.fixture
def many_releases(stack: EmbeddedStack, tmp_path: Path) -> EmbeddedStack:
    for v in VERSIONS:
        stack.client.ingest(make_tar(tmp_path / f"lib-{v}.tar.gz", release_files(v)), "lib", v)
    other = {"tool-1.0/main.c": b"int main(void) { return 0; }\n", "tool-1.0/README": b"a tool\n"}
    stack.client.ingest(make_tar(tmp_path / "tool-1.0.tar.gz", other), "tool", "1.0")
    return stack


def scan(stack: EmbeddedStack, drop: Path, metadata: dict[str, str] | None = None) -> dict[str, Any]:
    return scan_and_wait(stack, drop, metadata=metadata).manifest


@pytest.mark.parametrize("version", ["2.25.0", "2.28.0", "2.29.0", "2.32.0"])
def test_drop_is_identified_as_exactly_its_release(
    many_releases: EmbeddedStack, tmp_path: Path, version: str
) -> None:
    files = release_files(version, top=f"lib-{version}-vendor")
    files[f"lib-{version}-vendor/lib/mod03.py"] += b"# vendor tweak\n"
    manifest = scan(many_releases, make_tar(tmp_path / "drop.tar.gz", files))
    [component] = manifest["components"]
    assert (component["package"], component["version"]) == ("lib", version)
    assert component["missing"] == []
    assert component["classes"]["modified"] == 1


def test_each_nested_archive_is_its_own_component(many_releases: EmbeddedStack, tmp_path: Path) -> None:
    lib = tar_bytes(release_files("2.27.0"), "bz2")
    tool = tar_bytes(
        {"tool-1.0/main.c": b"int main(void) { return 0; }\n", "tool-1.0/extra.c": b"int x;\n"}, "xz"
    )
    drop = make_tar(tmp_path / "bundle.tar", {"src/lib-2.27.0.tar.bz2": lib, "src/tool-1.0.tar.xz": tool}, "")
    manifest = scan(many_releases, drop)
    found = {c["prefix"]: (c["package"], c["version"], c["missing"]) for c in manifest["components"]}
    assert found == {
        "src/lib-2.27.0.tar.bz2!/": ("lib", "2.27.0", []),
        "src/tool-1.0.tar.xz!/": ("tool", "1.0", ["README"]),
    }


def test_component_with_few_upstream_files_is_unidentified(
    many_releases: EmbeddedStack, tmp_path: Path
) -> None:
    files = {f"vendor/f{i}.c": f"int f{i};\n".encode() for i in range(10)}
    files["vendor/COPYING"] = b"Apache License 2.0\n"
    manifest = scan(many_releases, make_tar(tmp_path / "drop.tar.gz", files))
    [component] = manifest["components"]
    assert (component["identified"], component["package"]) == (False, None)
    assert component["classes"]["added"] == 10


def test_declared_components_that_do_not_match_are_reported(
    many_releases: EmbeddedStack, tmp_path: Path
) -> None:
    drop = make_tar(tmp_path / "drop.tar.gz", release_files("2.30.0"))
    manifest = scan(many_releases, drop, metadata={"components": "lib@2.31.0,busybox@1.35.0"})
    assert manifest["mismatches"] == [
        {
            "kind": "other-release",
            "component": "lib-2.30.0/",
            "found": "lib@2.30.0",
            "declared": "lib@2.31.0",
        },
        {"kind": "not-found", "component": None, "found": None, "declared": "busybox@1.35.0"},
    ]
    assert manifest["verdict"] == "action-required"
    many_releases.dispatcher.drain(timeout=30)
    [note] = many_releases.mailbox.for_scan(manifest["scan_id"])
    assert "declared lib@2.31.0, delivered lib@2.30.0" in note.message

"""Two releases ingested in version order (the second in the open mode, issue 23): scans still class
files and name releases as they did when every range was closed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dropscan.local.embedded import EmbeddedStack
from dropscan.store.releases import Releases

from helpers.builders import make_tar
from helpers.flows import scan_and_wait

COPYING = b"GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991\n"


def release(version: str) -> dict[str, bytes]:
    top = f"foo-{version}"
    files = {
        f"{top}/COPYING": COPYING,
        f"{top}/src/a.c": b"int a(void) { return 1; }\n",
        f"{top}/src/b.c": f"int b(void) {{ return {version!r}[0]; }}\n".encode(),
        f"{top}/src/c.c": b"int c(void) { return 3; }\n",
    }
    if version == "1.0":
        files[f"{top}/src/gone.c"] = b"int gone(void) { return 0; }\n"
    else:
        files[f"{top}/src/new.c"] = b"int new(void) { return 2; }\n"
    return files


def vendored(version: str) -> dict[str, bytes]:
    files = {p.replace(f"foo-{version}/", f"foo-{version}-acme/"): b for p, b in release(version).items()}
    files[f"foo-{version}-acme/src/c.c"] += b"/* acme */\n"
    files[f"foo-{version}-acme/src/extra.c"] = b"int extra;\n"
    return files


def by_path(manifest: dict[str, Any], top: str) -> dict[str, tuple[str, list[list[str]]]]:
    return {
        f["path"].removeprefix(top): (f["class"], [r.get("versions") for r in f.get("upstream", [])])
        for f in manifest["files"]
    }


def test_scans_against_releases_ingested_in_order(stack: EmbeddedStack, tmp_path: Path) -> None:
    # Given foo 1.0 and then 1.1 ingested (1.1 drops gone.c, changes b.c, adds new.c)
    for v in ("1.0", "1.1"):
        stack.client.ingest(make_tar(tmp_path / f"foo-{v}.tar.gz", release(v)), "foo", v)
    reports = Releases(stack.client.s3, stack.client.names.upstream_bucket)
    second = reports.report("foo", "1.1")
    assert second is not None
    # the second wrote its new digests and closed the two that left (b.c and gone.c of 1.0)
    assert second["ranges"] == {"mode": "open", "departed": 2}
    assert second["items_written"] == 4

    # When a vendored 1.1 and a vendored 1.0 are scanned
    new = scan_and_wait(stack, make_tar(tmp_path / "new.tar.gz", vendored("1.1"))).manifest
    old = scan_and_wait(stack, make_tar(tmp_path / "old.tar.gz", vendored("1.0"))).manifest

    # Then each is its release, and each file's upstream range is its exact hull
    assert [(c["package"], c["version"]) for c in new["components"]] == [("foo", "1.1")]
    assert [(c["package"], c["version"]) for c in old["components"]] == [("foo", "1.0")]
    assert by_path(new, "foo-1.1-acme/") == {
        "COPYING": ("identical", [["1.0", "1.1"]]),
        "src/a.c": ("identical", [["1.0", "1.1"]]),
        "src/b.c": ("identical", [["1.1"]]),
        "src/c.c": ("modified", []),
        "src/new.c": ("identical", [["1.1"]]),
        "src/extra.c": ("added", []),
    }
    assert by_path(old, "foo-1.0-acme/") == {
        "COPYING": ("identical", [["1.0", "1.1"]]),
        "src/a.c": ("identical", [["1.0", "1.1"]]),
        "src/b.c": ("identical", [["1.0"]]),
        "src/c.c": ("modified", []),
        "src/gone.c": ("identical", [["1.0"]]),
        "src/extra.c": ("added", []),
    }

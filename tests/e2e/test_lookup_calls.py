"""Each digest of a scan is asked for once: ceil(unique digests / 100) BatchGetItem calls per scan (and
one for the package items of the open ranges each lookup found)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dropscan.local.embedded import EmbeddedStack

from helpers.builders import make_tar
from helpers.flows import scan_and_wait


def classes_of_scan(stack: EmbeddedStack, drop: Path) -> tuple[dict[str, str], dict[str, Any]]:
    manifest = scan_and_wait(stack, drop).manifest
    return {f["path"]: f["class"] for f in manifest["files"]}, manifest["stats"]


def test_duplicates_across_chunks_cost_no_extra_calls(tmp_path: Path, fast_stack: EmbeddedStack) -> None:
    upstream = {f"foo-1.0/src/f{i:03d}.c": f"int f{i}(void) {{ return {i}; }}\n".encode() for i in range(260)}
    upstream["foo-1.0/src/id.c"] = b"/* $Id: id.c 7 2020-01-01 $ */\nint id;\n"
    fast_stack.client.ingest(make_tar(tmp_path / "foo-1.0.tar.gz", upstream), "foo", "1.0")
    drop = {p.replace("foo-1.0/", "foo-1.0-acme/"): data for p, data in upstream.items()}
    drop["foo-1.0-acme/src/id.c"] = b"/* $Id: id.c 9 2024-05-05 acme $ */\nint id;\n"  # keyword-only change
    # copies of early files far down the archive, in chunks of their own (ChunkSize is 10 here)
    drop |= {f"foo-1.0-acme/copy/f{i:03d}.c": upstream[f"foo-1.0/src/f{i:03d}.c"] for i in range(120)}
    drop |= {f"foo-1.0-acme/new/n{i:03d}.c": f"int n{i};\n".encode() for i in range(45)}
    drop |= {f"foo-1.0-acme/new/m{i:03d}.c": f"int n{i};\n".encode() for i in range(45)}  # same again
    got, stats = classes_of_scan(fast_stack, make_tar(tmp_path / "foo-1.0-acme.tar.gz", drop))

    # distinct digests: 260 upstream files, the keyword file's raw and kw (= ws) forms, 45 new contents
    unique = 260 + 2 + 45
    dynamo = stats["dynamodb"]
    # the digests, each once; a call for the package item of their open ranges after each lookup that
    # found any (foo 1.0 is its open release: see docs/design.md); in finalize, the package index and
    # then its one package item (what the database held, the manifest's ``database``)
    package_reads = dynamo["batch_get_calls"] - math.ceil(unique / 100) - 2
    assert 1 <= package_reads <= math.ceil(unique / 100)
    assert dynamo["keys_requested"] == unique + package_reads + 2
    assert stats["chunks"] >= len(drop) // 10
    assert {got[f"foo-1.0-acme/copy/f{i:03d}.c"] for i in range(120)} == {"identical"}
    assert got["foo-1.0-acme/src/id.c"] == "vcs-keywords"
    assert {got[f"foo-1.0-acme/new/m{i:03d}.c"] for i in range(45)} == {"added"}

"""Triage fanned out across invocations (issue 22): the cut, the parts' results as JSON, and the assembly,
which gives the manifest one invocation without limits would have given."""

from __future__ import annotations

import copy
import json
from typing import Any

from dropscan.audit.findings import PartTriage, apply, triage_manifest, triage_part
from dropscan.audit.manifest import validate
from dropscan.audit.triage_plan import (
    FULL,
    TAGS_ONLY,
    Entry,
    TriageLimits,
    assembly_plan,
    cut,
    needs_parts,
    part_entries,
    part_plan,
    read_plan,
)

from helpers.review import LICENSED, RESTRICTED, CountingDetector, manifest_of

GPL = b"/* SPDX-License-Identifier: GPL-2.0-only */\n"
COPYING = b"SPDX-License-Identifier: GPL-2.0-only\nThe GNU General Public License, version 2.\n"
CONFIG = b"CONFIG_X86=y\nCONFIG_SMP=y\n"


def drop(distinct: int) -> dict[str, bytes]:
    """``distinct`` contents (tagged, restricted, plain by turns), 20 copies of one, a kernel config."""
    files = {
        f"bsp/src/u{i:04d}.c": [GPL, RESTRICTED, b""][i % 3] + f"int u{i};\n".encode()
        for i in range(distinct)
    }
    files |= {f"bsp/gen/copy{i:02d}.c": LICENSED for i in range(20)}
    files["bsp/configs/board_defconfig"] = CONFIG
    return files


def entries(n: int, size: int = 100) -> list[Entry]:
    return [(f"{i:064x}", size, "text", None) for i in range(n)]


def test_the_cut_keeps_each_part_within_the_file_and_byte_limits() -> None:
    limits = TriageLimits(max_files=50, max_mib=1, max_parts=100)
    assert [len(p) for p in cut(entries(600), limits)] == [50] * 12
    # 300 KiB contents: three fit in 1 MiB, the fourth starts a part
    assert [len(p) for p in cut(entries(10, 300 << 10), limits)] == [3, 3, 3, 1]
    # one content bigger than the budget still gets a part (it is read up to CONTENT_LIMIT)
    assert [len(p) for p in cut(entries(2, 2 << 20), limits)] == [1, 1]
    assert cut([], limits) == []


def test_past_the_parts_ceiling_the_last_part_holds_the_rest_and_reads_it_for_tags() -> None:
    limits = TriageLimits(max_files=50, max_mib=1, max_parts=4)
    parts = cut(entries(300), limits)
    assert [len(p) for p in parts] == [50, 50, 50, 150]
    last = part_plan(parts[-1], limits)
    assert (last.count(FULL), last.count(TAGS_ONLY)) == (50, 100)
    assert part_plan(parts[0], limits).count(FULL) == 50 and not part_plan(parts[0], limits).reasons


def test_a_review_set_fans_out_only_past_a_limit_and_with_parts_allowed() -> None:
    manifest = manifest_of(drop(60))
    for limits, fans in [
        (TriageLimits(max_files=10, max_parts=8), True),
        (TriageLimits(max_files=10, max_parts=1), False),  # TriageMaxParts 1: no fan-out
        (TriageLimits(max_files=1000, max_parts=8), False),  # within one invocation's limits
    ]:
        assert needs_parts(read_plan(manifest, limits), limits) is fans


def _fanned_out(
    manifest: dict[str, Any], limits: TriageLimits, contents: dict[str, bytes]
) -> list[PartTriage]:
    """What the parts of ``manifest``'s triage write, each from the bytes its own plan reads, as JSON."""
    by_digest = {f["sha256"]: contents[f["path"]] for f in manifest["files"]}
    declared = manifest["source"]["metadata"]["arch"]
    out = []
    for n, part in enumerate(cut(part_entries(manifest), limits)):
        read = part_plan(part, limits)
        content = {d: by_digest[d][: read.caps.get(d, len(by_digest[d]))] for d in read.wanted}
        found = triage_part(
            n, part, content, detector=CountingDetector(), limits=limits, read=read, declared=declared
        )
        out.append(PartTriage.from_json(json.loads(json.dumps(found.to_json()))))
    return out


def test_assembled_parts_give_the_manifest_of_one_invocation_without_limits() -> None:
    contents = drop(120) | {"bsp/COPYING": COPYING}
    manifest = manifest_of({p: d for p, d in contents.items() if p != "bsp/COPYING"}, copying=COPYING)
    manifest["source"]["metadata"] = {"arch": "arm"}
    by_digest = {f["sha256"]: contents[f["path"]] for f in manifest["files"]}

    whole = copy.deepcopy(manifest)
    one = triage_manifest(
        whole, by_digest, detector=CountingDetector(), limits=TriageLimits(max_files=10_000)
    )
    apply(whole, one)

    limits = TriageLimits(max_files=10, max_parts=100)
    parts = _fanned_out(manifest, limits, contents)
    assert len(parts) == 13  # 122 distinct contents (120, the copies' one, the config), 10 a part
    assembler = assembly_plan(manifest, limits)
    assert set(assembler.wanted) == {f["sha256"] for f in manifest["files"] if f["path"] == "bsp/COPYING"}
    detector = CountingDetector()
    found = triage_manifest(
        manifest,
        {d: by_digest[d] for d in assembler.wanted},
        detector=detector,
        limits=limits,
        read=assembler,
        parts=parts,
    )
    apply(manifest, found)
    validate(manifest)

    assert len(detector.texts) == 1  # the assembler detected only the component's licence file
    assert manifest["triage"]["parts"] == 13 and "limited" not in manifest["triage"]
    assert {k: v for k, v in manifest["triage"].items() if k not in ("parts", "seconds")} == {
        k: v for k, v in whole["triage"].items() if k != "seconds"
    }
    assert manifest["flags"] == whole["flags"] and manifest["files"] == whole["files"]
    assert manifest["components"] == whole["components"] and manifest["verdict"] == whole["verdict"]
    kinds = {f["kind"] for f in manifest["flags"]}
    assert {"arch-mismatch", "non-commercial"} <= kinds  # computed in the parts, re-pathed here
    assert sum(1 for f in manifest["files"] if f.get("licenses")) >= 40 + 20


def test_contents_past_the_parts_ceiling_are_said_plainly() -> None:
    contents = drop(120)
    manifest = manifest_of(contents)
    manifest["source"]["metadata"] = {"arch": "arm"}
    limits = TriageLimits(max_files=10, max_parts=3)
    parts = _fanned_out(manifest, limits, contents)
    found = triage_manifest(manifest, {}, detector=CountingDetector(), limits=limits, parts=parts)
    apply(manifest, found)
    validate(manifest)

    limited = manifest["triage"]["limited"]
    assert (limited["tags_only"], limited["not_read"]) == (122 - 30, 0)
    assert limited["reasons"][0] == (
        "the review set was cut into 3 triage invocations, the most TriageMaxParts (3) allows; "
        "the last one held the rest"
    )
    # in path order the config and the copies' content come first: the units past the first 28 are left
    assert [f["path"] for f in manifest["files"] if f.get("triage") == TAGS_ONLY] == [
        f"bsp/src/u{i:04d}.c" for i in range(28, 120)
    ]
    [flag] = [f for f in manifest["flags"] if f["kind"] == "review-limit"]
    assert flag["evidence"] == "; ".join(limited["reasons"])


def test_a_part_whose_detector_broke_is_recorded_in_the_manifest() -> None:
    manifest = manifest_of(drop(30))
    broken = PartTriage(0, error="RuntimeError: index damaged")
    found = triage_manifest(
        manifest, {}, detector=CountingDetector(), limits=TriageLimits(max_files=10), parts=[broken]
    )
    apply(manifest, found)
    assert manifest["triage"]["error"] == "triage part 0: RuntimeError: index damaged"
    assert manifest["triage"]["not_found"] == manifest["triage"]["files"]
    assert manifest["verdict"] != "clean"

"""What triage reads of a review set, and how far it looks at each content: the limits of one invocation.

A drop nothing upstream explains makes its whole tree the review set (issue 22: 120,000 files). Triage
works once per distinct content, and within the template's limits:

- ``TriageMaxFiles``: the distinct contents detected in full (ScanCode, about 30 ms each on a kernel's
  review files); those past it are read for SPDX tags and the restriction terms only, in their first
  ``head_bytes``;
- ``TriageMaxMiB``: the bytes of content held for triage at once (every read file's bytes are kept until
  detection); contents that no longer fit are not read at all;
- ``TriageBudgetSeconds``: detection time; contents still waiting for a full detection when it runs out
  are read for tags only.

Each file past a limit says so (``files[].triage``), ``triage.limited`` counts them, and one
``review-limit`` flag tells the reader the review set was larger than one invocation reads in full.

A review set past one invocation's limits is *cut* (:func:`cut`) into parts of distinct contents, each
within ``TriageMaxFiles`` and ``TriageMaxMiB``, detected by invocations of their own (at most
``TriageMaxParts``); the last part takes whatever is left past that ceiling, and plans it as above.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dropscan.archive.extract import CONTENT_LIMIT
from dropscan.audit import component_licence
from dropscan.audit.flags import LICENSE_FILE_NAMES, is_config

FULL = "full"
TAGS_ONLY = "tags-only"
NOT_READ = "not-read"


@dataclass(frozen=True, slots=True)
class TriageLimits:
    """The template's triage limits (TriageMaxFiles, TriageMaxMiB, TriageBudgetSeconds)."""

    max_files: int = 20_000
    max_mib: int = 512
    budget_seconds: float = 600.0
    head_bytes: int = 16 * 1024  # a tags-only read: SPDX tags and notices sit in a file's head
    max_parts: int = 1  # invocations a review set past the other limits is cut into (TriageMaxParts)


@dataclass
class Plan:
    """Which contents triage reads (``wanted``: SHA-256 -> size), how much of each, and how deeply."""

    wanted: dict[str, int] = field(default_factory=dict)
    caps: dict[str, int] = field(default_factory=dict)  # bytes kept of a content read only in part
    modes: dict[str, str] = field(default_factory=dict)  # review content -> FULL | TAGS_ONLY | NOT_READ
    held: int = 0  # bytes of content the plan holds at most
    reasons: list[str] = field(default_factory=list)

    def count(self, mode: str) -> int:
        return sum(1 for m in self.modes.values() if m == mode)


def plan(
    review: Iterable[Mapping[str, Any]], licence_files: Iterable[Mapping[str, Any]], limits: TriageLimits
) -> Plan:
    """The reads of one triage: components' licence files first, then each distinct review content in
    the order of the drop, in full while the file and byte limits allow, then heads, then nothing."""
    out = Plan()
    budget = limits.max_mib << 20
    for f in licence_files:
        out.wanted[f["sha256"]] = int(f["size"])
        out.held += min(int(f["size"]), CONTENT_LIMIT)
    full = 0
    for f in review:
        digest, size = f["sha256"], int(f.get("size") or 0)
        if digest in out.modes:
            continue
        whole, head = min(size, CONTENT_LIMIT), min(size, limits.head_bytes)
        if full < limits.max_files and out.held + whole <= budget:
            mode, kept = FULL, whole
            full += 1
        elif out.held + head <= budget:
            mode, kept = TAGS_ONLY, head
        else:
            out.modes[digest] = NOT_READ
            continue
        out.modes[digest] = mode
        if digest not in out.wanted:
            out.wanted[digest] = size
            out.held += kept
            if kept < whole:
                out.caps[digest] = kept
        elif mode == FULL:  # also a licence file: read whole already
            out.caps.pop(digest, None)
    tags, unread = out.count(TAGS_ONLY), out.count(NOT_READ)
    if tags:
        out.reasons.append(
            f"{len(out.modes):,} distinct contents to review, over TriageMaxFiles ({limits.max_files:,}) "
            "or TriageMaxMiB: "
            f"{tags:,} read for licence tags and restriction terms in their first "
            f"{limits.head_bytes // 1024} KiB only"
        )
    if unread:
        out.reasons.append(
            f"{unread:,} distinct contents not read: the review set holds more than TriageMaxMiB "
            f"({limits.max_mib:,} MiB)"
        )
    return out


#: one distinct content of a part: SHA-256, size, kind, and a configuration path it lies at (or None)
Entry = tuple[str, int, str, str | None]


def needs_parts(read: Plan, limits: TriageLimits) -> bool:
    """Whether a review set read by ``read`` is cut into parts: something past a limit, and parts allowed."""
    return limits.max_parts > 1 and any(m != FULL for m in read.modes.values())


def cut(contents: Iterable[Entry], limits: TriageLimits) -> list[list[Entry]]:
    """The distinct review contents, in the order of the drop, cut into parts that each hold at most
    ``max_files`` contents and ``max_mib`` of bytes; past ``max_parts`` the last part takes the rest
    (and its own plan reads the contents past its limits for tags only, or not at all)."""
    budget = limits.max_mib << 20
    parts: list[list[Entry]] = [[]]
    held = 0
    for entry in contents:
        whole = min(entry[1], CONTENT_LIMIT)
        last = parts[-1]
        full = len(last) >= max(limits.max_files, 1) or (last and held + whole > budget)
        if full and len(parts) < limits.max_parts:
            parts.append([])
            held = 0
        parts[-1].append(entry)
        held += whole
    return [p for p in parts if p]


def part_plan(part: Iterable[Entry], limits: TriageLimits) -> Plan:
    """What one part reads: its contents in full within the limits (the last part past the ceiling may
    hold more, and reads those for tags only, or not at all)."""
    return plan(({"sha256": d, "size": size} for d, size, _, _ in part), (), limits)


# ------------------------------------------------------------------ the plans of a manifest
def license_files(files: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Component prefix -> its top-level licence files (COPYING, LICENSE...)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for f in files:
        prefix = f.get("component", "")
        rest = f["path"][len(prefix) :]
        if "/" not in rest and rest.lower() in LICENSE_FILE_NAMES and f.get("size"):
            out.setdefault(prefix, []).append(f)
    return out


def review_files(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The files triage reviews: modified and added, and readable."""
    return [f for f in manifest["files"] if f["class"] in ("modified", "added") and not f.get("unreadable")]


def wanted_digests(manifest: Mapping[str, Any]) -> dict[str, int]:
    """SHA-256 -> size of every file triage reads: the review set and the components' licence files."""
    chosen = {f["sha256"]: int(f["size"]) for f in review_files(manifest)}
    return chosen | component_licence.wanted(manifest["files"])


def read_plan(manifest: Mapping[str, Any], limits: TriageLimits | None = None) -> Plan:
    """What triage reads of ``manifest``'s drop under ``limits`` (:func:`plan`)."""
    licence = [f for fs in license_files(manifest["files"]).values() for f in fs]
    return plan(review_files(manifest), licence, limits or TriageLimits())


def assembly_plan(manifest: Mapping[str, Any], limits: TriageLimits) -> Plan:
    """What the assembler of a fanned-out triage reads itself: the components' licence files, and the
    review files of identified components (the evidence step diffs them against upstream), within the
    limits; the parts detected the review set."""
    identified = {c["prefix"] for c in manifest.get("components") or [] if c.get("identified")}
    licence = [f for fs in license_files(manifest["files"]).values() for f in fs]
    evidence = [f for f in review_files(manifest) if f.get("component", "") in identified]
    return plan(evidence, licence, limits)


def part_entries(manifest: Mapping[str, Any]) -> list[Entry]:
    """The distinct review contents of ``manifest`` in the order of the drop, for :func:`cut`."""
    seen: dict[str, Entry] = {}
    for f in review_files(manifest):
        digest = f["sha256"]
        config = f["path"] if is_config(f["path"]) else None
        if digest not in seen:
            seen[digest] = (digest, int(f.get("size") or 0), f["kind"], config)
        elif config and seen[digest][3] is None:
            seen[digest] = (*seen[digest][:3], config)
    return list(seen.values())

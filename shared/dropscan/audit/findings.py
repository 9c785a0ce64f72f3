"""What triage finds in a review set: licences per file and red flags with file, line and evidence,
from the files' bytes, and the report written into the manifest (:func:`apply`).

Pure rules: the stage (dropscan.stages.triage) reads the bytes (dropscan.audit.triage_plan says which)
and hands in the way to spread detection over processes (``spread``: dropscan.forked.spread); nothing
here forks, reads or writes.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from dropscan.audit import component_licence
from dropscan.audit.flags import (
    REVIEW,
    SEVERITIES,
    FileTriage,
    Flag,
    arch_flags,
    binary_flags,
    decode,
    is_config,
    licence_flags,
    term_flags,
)
from dropscan.audit.licenses import RESTRICTED_CATEGORIES, Detector, LicenseFinding, spdx_tags
from dropscan.audit.triage_plan import (
    FULL,
    NOT_READ,
    TAGS_ONLY,
    Entry,
    Plan,
    TriageLimits,
    read_plan,
    review_files,
)


def triage_file(
    entry: Mapping[str, Any],
    data: bytes | None,
    *,
    detector: Detector,
    component_license: str | None,
    declared_arch: str | None,
) -> FileTriage:
    """Licences and red flags of one review file (``data`` None: its bytes were not found again)."""
    path, component, kind = entry["path"], entry.get("component", ""), entry["kind"]
    out = FileTriage()
    if data is None:
        return out
    out.flags += binary_flags(path, component, kind, data[:64])
    if kind != "text":
        return out
    text = decode(data)
    out.licenses = detector.detect(text)
    out.flags += term_flags(path, component, text, out.licenses)
    out.flags += licence_flags(entry, component_license, out.licenses)
    out.flags += arch_flags(path, component, text, declared_arch)
    return out


def component_license(findings: Iterable[LicenseFinding]) -> str | None:
    """The licence a component's licence file states: the longest confident match (the full text)."""
    best = max(
        (f for f in findings if f.confidence >= 80 and f.category not in RESTRICTED_CATEGORIES),
        key=lambda f: (f.end_line - f.line, f.confidence),
        default=None,
    )
    return best.expression if best else None


def severity_counts(flags: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(SEVERITIES, 0)
    for f in flags:
        counts[f["severity"]] += 1
    return counts


# ------------------------------------------------------------------ a whole manifest
@dataclass
class TriageReport:
    """What triage adds to a manifest (``apply`` writes it in)."""

    detector: str
    files: int = 0
    bytes: int = 0
    not_found: int = 0
    truncated: int = 0
    seconds: float = 0.0
    licenses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    component_licenses: dict[str, dict[str, Any]] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)
    error: str | None = None
    workers: int = 1
    distinct: int = 0  # distinct contents of the review set
    limited: dict[str, str] = field(default_factory=dict)  # path -> TAGS_ONLY | NOT_READ, past a limit
    limit_reasons: list[str] = field(default_factory=list)
    parts: int = 0  # invocations the review set was detected in (0: this one)

    def stats(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"error": self.error} if self.error else {}
        if self.parts:
            extra["parts"] = self.parts
        if self.limited:
            modes = list(self.limited.values())
            extra["limited"] = {
                "tags_only": modes.count(TAGS_ONLY),
                "not_read": modes.count(NOT_READ),
                "reasons": self.limit_reasons,
            }
        return extra | {
            "detector": self.detector,
            "files": self.files,
            "bytes": self.bytes,
            "not_found": self.not_found,
            "truncated": self.truncated,
            "seconds": round(self.seconds, 3),
            "workers": self.workers,
            "distinct": self.distinct,
        }


@dataclass(frozen=True, slots=True)
class ContentTriage:
    """What one distinct content says, wherever it lies: licences and restriction terms (paths left
    empty), how deeply it was read, and its head (for the binary flags, which name the file).

    ``size``: the bytes read of it; ``arch``: the architecture flags of a configuration content (a part of
    a fanned-out triage computes them, since the assembler does not hold the bytes)."""

    mode: str
    licenses: list[LicenseFinding]
    terms: list[Flag]
    head: bytes
    size: int = 0
    arch: list[Flag] | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable: what a triage part writes for the assembler."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "licenses": [x.to_json() for x in self.licenses],
            "terms": [x.to_json() for x in self.terms],
            "head": base64.b64encode(self.head).decode(),
            "size": self.size,
        }
        if self.arch is not None:
            out["arch"] = [x.to_json() for x in self.arch]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContentTriage:
        arch = data.get("arch")
        return cls(
            data["mode"],
            [LicenseFinding(**x) for x in data["licenses"]],
            [Flag(**x) for x in data["terms"]],
            base64.b64decode(data["head"]),
            int(data["size"]),
            None if arch is None else [Flag(**x) for x in arch],
        )


@dataclass
class PartTriage:
    """What one part of a fanned-out triage found: each content it read, those it could not read past
    its limits, those it did not find in the drop, and why any were not read in full."""

    part: int
    results: dict[str, ContentTriage] = field(default_factory=dict)
    not_read: list[str] = field(default_factory=list)
    truncated: int = 0
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "results": {d: r.to_json() for d, r in self.results.items()},
            "not_read": self.not_read,
            "truncated": self.truncated,
            "reasons": self.reasons,
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartTriage:
        return cls(
            part=int(data["part"]),
            results={d: ContentTriage.from_json(r) for d, r in data["results"].items()},
            not_read=list(data["not_read"]),
            truncated=int(data["truncated"]),
            reasons=list(data["reasons"]),
            seconds=float(data["seconds"]),
            error=data.get("error"),
        )


def triage_part(
    part: int,
    entries: list[Entry],
    content: Mapping[str, bytes],
    *,
    detector: Detector,
    limits: TriageLimits,
    read: Plan,
    declared: str | None,
    truncated: Iterable[str] = (),
    workers: int = 1,
    spread: Spread | None = None,
) -> PartTriage:
    """Detect the contents of one part (``read``: its plan), as triage_manifest does for a whole set."""
    started = time.perf_counter()
    out = PartTriage(part, truncated=len(set(truncated)))
    jobs = [
        (digest, read.modes.get(digest, FULL), kind)
        for digest, _, kind, _ in entries
        if digest in content and read.modes.get(digest, FULL) != NOT_READ
    ]
    workers = _worth_forking(workers, len(jobs), spread)
    done = _triage_all(jobs, content, detector, time.monotonic() + limits.budget_seconds, workers, spread)
    out.results = dict(zip((digest for digest, _, _ in jobs), done, strict=True))
    for digest, _, kind, config in entries:
        if read.modes.get(digest) == NOT_READ:
            out.not_read.append(digest)
        elif digest in out.results and config and declared and kind == "text":
            arch = arch_flags(config, "", decode(content[digest]), declared)
            out.results[digest] = replace(out.results[digest], arch=[replace(x, path="") for x in arch])
    late = sum(1 for d, mode, _ in jobs if mode == FULL and out.results[d].mode != FULL)
    out.reasons = _limit_reasons(read, late, limits)
    out.seconds = time.perf_counter() - started
    return out


def triage_manifest(
    manifest: Mapping[str, Any],
    content: Mapping[str, bytes],
    *,
    detector: Detector,
    truncated: Iterable[str] = (),
    workers: int = 1,
    limits: TriageLimits | None = None,
    read: Plan | None = None,
    releases: Mapping[str, Mapping[str, Any] | None] | None = None,
    parts: Sequence[PartTriage] | None = None,
    spread: Spread | None = None,
) -> TriageReport:
    """Licences of the components and of each review file, and the red flags, from the files' bytes.

    Detection runs once per distinct content (a drop of 120,000 copies of one file detects one), within
    ``limits`` (``read``: the plan the content was read by). ``workers`` > 1 with a ``spread``
    (dropscan.forked.spread) shares the contents among that many processes forked after the detector's
    index is loaded (the component licences are detected first), so they share it copy-on-write.
    ``releases``: component prefix -> the licence record of its release (component_licence).
    ``parts``: the review contents were detected by the parts of a fanned-out triage (``content`` then
    holds the licence files and what the evidence step reads).
    """
    started = time.perf_counter()
    limits = limits or TriageLimits()
    read = read or read_plan(manifest, limits)
    report = TriageReport(detector=detector.name, truncated=len(set(truncated)))
    found = component_licence.resolve_all(manifest, content, detector, releases or {})
    report.component_licenses = {prefix: lic.to_json() for prefix, lic in found.items()}
    report.flags += component_licence.flags(found)
    review = review_files(manifest)
    kinds: dict[str, str] = {}
    for f in review:
        kinds.setdefault(f["sha256"], f["kind"])
    report.distinct = len(kinds)
    if parts is None:
        jobs = [
            (digest, read.modes.get(digest, FULL), kind)
            for digest, kind in kinds.items()
            if digest in content and read.modes.get(digest, FULL) != NOT_READ
        ]
        report.workers = _worth_forking(workers, len(jobs), spread)
        deadline = time.monotonic() + limits.budget_seconds
        done = _triage_all(jobs, content, detector, deadline, report.workers, spread)
        results = dict(zip((digest for digest, _, _ in jobs), done, strict=True))
        unread = {d for d, mode in read.modes.items() if mode == NOT_READ}
        late = sum(1 for d, mode, _ in jobs if mode == FULL and results[d].mode != FULL)
        reasons = _limit_reasons(read, late, limits)
    else:  # detected by the parts of a fanned-out triage: what is left is per file
        results, unread, reasons = _assembled(report, parts, limits)
    files = _FileFlags(report, content, (manifest.get("source", {}).get("metadata") or {}).get("arch"))
    for f in review:
        report.files += 1
        result = results.get(f["sha256"])
        if result is not None:
            files.add(f, result)
        elif f["sha256"] in unread:
            report.limited[f["path"]] = NOT_READ
        else:
            report.not_found += 1
    if report.limited:
        report.limit_reasons = reasons
    report.seconds = time.perf_counter() - started
    return report


def _assembled(
    report: TriageReport, parts: Sequence[PartTriage], limits: TriageLimits
) -> tuple[dict[str, ContentTriage], set[str], list[str]]:
    """The parts' results merged: contents -> triage, contents not read, why any was not read in full."""
    results: dict[str, ContentTriage] = {}
    unread: set[str] = set()
    reasons: list[str] = []
    for p in sorted(parts, key=lambda p: p.part):
        results.update(p.results)
        unread.update(p.not_read)
        report.truncated += p.truncated
        reasons += p.reasons
        if p.error and not report.error:
            report.error = f"triage part {p.part}: {p.error}"[:300]
    report.parts = len(parts)
    if reasons:
        reasons.insert(
            0,
            f"the review set was cut into {len(parts)} triage invocations, the most TriageMaxParts "
            f"({limits.max_parts}) allows; the last one held the rest",
        )
    return results, unread, reasons


class _FileFlags:
    """Each review file's licences and flags from its content's triage: the licence flags once per
    content, component licence and class (parsing expressions is most of their cost), then re-pathed."""

    def __init__(self, report: TriageReport, content: Mapping[str, bytes], declared: str | None) -> None:
        self.report, self.content, self.declared = report, content, declared
        self.licence_flags: dict[tuple[str, str | None, str], list[Flag]] = {}
        self.licence_json: dict[str, list[dict[str, Any]]] = {}

    def add(self, f: Mapping[str, Any], result: ContentTriage) -> None:
        report, digest, path, component = self.report, f["sha256"], f["path"], f.get("component", "")
        report.bytes += result.size
        if result.mode != FULL:
            report.limited[path] = result.mode
        if result.licenses:
            if digest not in self.licence_json:
                self.licence_json[digest] = [x.to_json() for x in result.licenses]
            report.licenses[path] = self.licence_json[digest]
        report.flags += binary_flags(path, component, f["kind"], result.head)
        if f["kind"] != "text":
            return
        report.flags += [replace(x, path=path, component=component) for x in result.terms]
        comp = report.component_licenses.get(component, {}).get("license")
        key = (digest, comp, f["class"])
        if key not in self.licence_flags:
            self.licence_flags[key] = licence_flags(f, comp, result.licenses)
        report.flags += [replace(x, path=path, component=component) for x in self.licence_flags[key]]
        if self.declared and is_config(path):
            if result.arch is not None:  # a part computed them: the bytes are not here
                report.flags += [replace(x, path=path, component=component) for x in result.arch]
            elif digest in self.content:
                report.flags += arch_flags(path, component, decode(self.content[digest]), self.declared)


def _limit_reasons(read: Plan, late: int, limits: TriageLimits) -> list[str]:
    reasons = list(read.reasons)
    if late:
        reasons.append(
            f"detection ran past TriageBudgetSeconds ({limits.budget_seconds:g} s): {late:,} distinct "
            "contents still waiting were read for licence tags and restriction terms only"
        )
    return reasons


#: fewer contents than this per worker are not worth a fork
MIN_FILES_PER_WORKER = 50

_Job = tuple[str, str, str]  # digest, mode, kind

#: ``(fn, jobs, n)`` -> ``fn`` over shares of ``jobs`` on ``n`` processes, the results in the order of
#: ``jobs`` (dropscan.forked.spread: the stage passes it in, so that these rules fork nothing)
Spread = Callable[[Callable[[list[_Job]], list[ContentTriage]], list[_Job], int], list[ContentTriage]]


def _worth_forking(workers: int, jobs: int, spread: Spread | None) -> int:
    """The processes ``jobs`` contents are detected on: at most ``workers``, each with at least
    MIN_FILES_PER_WORKER contents, and one without a ``spread``."""
    if spread is None:
        return 1
    return max(1, min(workers, jobs // MIN_FILES_PER_WORKER))


def _triage_content(
    digest: str, mode: str, kind: str, data: bytes, detector: Detector, deadline: float
) -> ContentTriage:
    head = data[:64]
    if kind != "text":
        return ContentTriage(mode, [], [], head, len(data))
    if mode == FULL and time.monotonic() > deadline:
        mode = TAGS_ONLY
    text = decode(data)
    found = detector.detect(text) if mode == FULL else spdx_tags(text)
    return ContentTriage(mode, found, term_flags("", "", text, found), head, len(data))


def _triage_some(
    jobs: list[_Job], content: Mapping[str, bytes], detector: Detector, deadline: float
) -> list[ContentTriage]:
    return [_triage_content(d, mode, kind, content[d], detector, deadline) for d, mode, kind in jobs]


def _triage_all(
    jobs: list[_Job],
    content: Mapping[str, bytes],
    detector: Detector,
    deadline: float,
    workers: int,
    spread: Spread | None,
) -> list[ContentTriage]:
    """_triage_content of every job, in order, on ``workers`` processes (through ``spread``)."""
    some = partial(_triage_some, content=content, detector=detector, deadline=deadline)
    if workers <= 1 or spread is None:
        return some(jobs)
    return spread(some, jobs, workers)  # ForkedError: the triage records it


def review_limit_flag(report: TriageReport) -> Flag:
    """One flag for the whole drop (path ""): its review set was more than one triage reads in full."""
    modes = list(report.limited.values())
    counts = [f"{modes.count(TAGS_ONLY):,} read for tags only", f"{modes.count(NOT_READ):,} not read"]
    detail = (
        f"{len(modes):,} of {report.files:,} review files were not examined in full ({', '.join(counts)}; "
        "files[].triage in the manifest names them): their licences and red flags may be incomplete"
    )
    return Flag("review-limit", REVIEW, "", None, "; ".join(report.limit_reasons), "", detail)


def apply(manifest: dict[str, Any], report: TriageReport) -> dict[str, Any]:
    """The manifest with the triage written in: file licences, component licences, flags, verdict."""
    from dropscan.audit.manifest import verdict

    for f in manifest["files"]:
        if f["path"] in report.licenses:
            f["licenses"] = report.licenses[f["path"]]
        if f["path"] in report.limited:
            f["triage"] = report.limited[f["path"]]
    unknown: dict[str, Any] = {"license": None}
    if report.error:
        unknown["license_reason"] = "licence triage did not finish"
    for c in manifest["components"]:
        c.update(report.component_licenses.get(c["prefix"]) or unknown)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    if report.limited:
        report.flags.append(review_limit_flag(report))
    flags = sorted(report.flags, key=lambda x: (order[x.severity], x.path, x.line or 0, x.kind))
    manifest["flags"] = [x.to_json() for x in flags]
    manifest["summary"]["flags"] = severity_counts(manifest["flags"])
    manifest["triage"] = report.stats()
    manifest["verdict"] = verdict(manifest["status"], manifest["summary"])
    if report.error and manifest["verdict"] == "clean":
        manifest["verdict"] = "review"  # nothing was flagged because nothing was read
    return manifest

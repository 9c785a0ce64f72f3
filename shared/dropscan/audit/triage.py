"""Triage of the review set: licence findings per file and red flags with file, line and evidence."""

from __future__ import annotations

import os
import re
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from license_expression import AND, OR, BaseSymbol, ExpressionError, LicenseWithExceptionSymbol

from dropscan.audit import component_licence
from dropscan.audit.licenses import RESTRICTED_CATEGORIES, Detector, LicenseFinding, spdx_licensing, spdx_tags
from dropscan.audit.triage_plan import FULL, NOT_READ, TAGS_ONLY, Plan, TriageLimits, plan
from dropscan.forked import Forked
from dropscan.models import PREBUILT_KINDS

ACTION = "action-required"
REVIEW = "review"
SEVERITIES = (ACTION, REVIEW)

#: licence files whose text tells a component's licence (the top of the component only)
LICENSE_FILE_NAMES = frozenset(
    {
        "copying",
        "copying.txt",
        "license",
        "license.txt",
        "license.md",
        "licence",
        "licence.txt",
        "license.rst",
    }
)

_NONCOMMERCIAL = re.compile(
    r"non[- ]?commercial|not for commercial|commercial use is (?:prohibited|not)", re.I
)
# permissive grants say "for any purpose, commercial or non-commercial": that is no restriction
_ANY_PURPOSE = re.compile(r"commercial (?:or|and|and/or) non[- ]?commercial", re.I)
_EVALUATION = re.compile(
    r"evaluation (?:purposes? |use )?only|for evaluation|evaluation (?:copy|version)", re.I
)
_PROPRIETARY = re.compile(r"\bconfidential\b|\bproprietary\b|\btrade secret", re.I)
_RESERVED = re.compile(r"all rights reserved", re.I)
_GRANT = re.compile(
    r"permission is hereby granted|redistribution and use|licensed under|you (?:can|may) redistribute"
    r"|free software|under the terms of",
    re.I,
)
_CONFIG_LINE = re.compile(r"^CONFIG_([A-Z0-9_]+)=y\s*$", re.M)

#: Kconfig's architecture symbols (kernel and U-Boot) -> architecture family
KCONFIG_ARCH = {
    "ALPHA": "alpha",
    "ARC": "arc",
    "ARM": "arm",
    "ARM64": "arm64",
    "CSKY": "csky",
    "HEXAGON": "hexagon",
    "IA64": "ia64",
    "LOONGARCH": "loongarch",
    "M68K": "m68k",
    "MICROBLAZE": "microblaze",
    "MIPS": "mips",
    "NIOS2": "nios2",
    "OPENRISC": "openrisc",
    "PARISC": "parisc",
    "PPC": "powerpc",
    "RISCV": "riscv",
    "S390": "s390",
    "SANDBOX": "sandbox",
    "SH": "sh",
    "SPARC": "sparc",
    "X86": "x86",
    "XTENSA": "xtensa",
}
_ARCH_ALIASES = {
    "aarch64": "arm64",
    "armv7": "arm",
    "armhf": "arm",
    "armel": "arm",
    "mipsel": "mips",
    "mips64": "mips",
    "mips64el": "mips",
    "x86_64": "x86",
    "amd64": "x86",
    "i386": "x86",
    "i686": "x86",
    "ppc": "powerpc",
    "ppc64": "powerpc",
    "ppc64le": "powerpc",
    "riscv64": "riscv",
    "riscv32": "riscv",
}

# Licences known not to combine with GPL-2.0 (FSF's list of GPL-incompatible licences, the common
# ones). Anything else that is neither the component's licence nor on the compatible list is
# "different": a reviewer decides, dropscan does not guess.
_GPL2_INCOMPATIBLE = frozenset(
    {
        "Apache-1.0",
        "Apache-1.1",
        "Apache-2.0",
        "BSD-4-Clause",
        "BSD-4-Clause-UC",
        "BSD-4-Clause-Shortened",
        "GPL-3.0-only",
        "GPL-3.0-or-later",
        "LGPL-3.0-only",
        "LGPL-3.0-or-later",
        "AGPL-3.0-only",
        "AGPL-3.0-or-later",
        "CDDL-1.0",
        "CDDL-1.1",
        "EPL-1.0",
        "EPL-2.0",
        "MPL-1.0",
        "MPL-1.1",
        "OpenSSL",
        "SSLeay-standalone",
        "CC-BY-NC-4.0",
        "CC-BY-NC-SA-4.0",
    }
)
_GPL3_EXTRA = frozenset(
    {"GPL-3.0-only", "GPL-3.0-or-later", "LGPL-3.0-only", "LGPL-3.0-or-later", "Apache-2.0", "MPL-2.0"}
)


@dataclass(frozen=True, slots=True)
class Flag:
    kind: str
    severity: str
    path: str
    line: int | None
    evidence: str
    component: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FileTriage:
    licenses: list[LicenseFinding] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)


# ------------------------------------------------------------------ licences
def incompatible_set(component_license: str) -> frozenset[str]:
    """Licences known not to combine with ``component_license`` (empty: none known)."""
    keys = _keys(component_license)
    if keys & {"GPL-3.0-only", "GPL-3.0-or-later"} or keys == {"GPL-2.0-or-later"}:
        # GPL-2.0-or-later may be taken as GPL-3.0: what GPL-3.0 admits is fine, the rest is not
        return _GPL2_INCOMPATIBLE - _GPL3_EXTRA
    if keys & {"GPL-2.0-only", "GPL-1.0-or-later"}:
        return _GPL2_INCOMPATIBLE
    return frozenset()  # a permissive or unknown component licence: nothing is known to clash


def _keys(expression: str) -> set[str]:
    try:
        return set(spdx_licensing().license_keys(expression))
    except ExpressionError:
        return set()


def fits(expression: str, allowed: Callable[[str], bool]) -> bool:
    """True if some choice the expression offers uses only ``allowed`` licences (OR: any, AND: all)."""
    try:
        parsed = spdx_licensing().parse(expression)
    except ExpressionError:
        return False
    return _fits(parsed, allowed)


def _fits(node: Any, allowed: Callable[[str], bool]) -> bool:
    if isinstance(node, OR):
        return any(_fits(a, allowed) for a in node.args)
    if isinstance(node, AND):
        return all(_fits(a, allowed) for a in node.args)
    if isinstance(node, LicenseWithExceptionSymbol):
        return allowed(str(node.license_symbol.key))
    if isinstance(node, BaseSymbol):
        return allowed(str(getattr(node, "key", node)))
    return False


def _same_licence(expression: str, component_license: str) -> bool:
    """The file offers its component's own licence (GPL-2.0+ and GPL-1.0+ count as GPL-2.0's)."""
    same = _keys(component_license) | {"Linux-syscall-note"}
    if "GPL-2.0-only" in same:
        same |= {"GPL-2.0-or-later", "GPL-1.0-or-later"}
    return fits(expression, same.__contains__)


def licence_flags(
    entry: Mapping[str, Any], component_license: str | None, found: list[LicenseFinding]
) -> list[Flag]:
    """A file licensed differently from its component: review, or action if known incompatible.

    In a ``modified`` upstream file the notice most likely came from upstream itself, so a known
    incompatibility there is for review; what the supplier added is what needs action.
    """
    if not component_license:
        return []
    path, component = entry["path"], entry.get("component", "")
    clash = incompatible_set(component_license)
    flags: dict[tuple[str, str], Flag] = {}
    for f in found:
        if f.category in RESTRICTED_CATEGORIES or f.confidence < 80:
            continue
        if _same_licence(f.expression, component_license):
            continue
        if clash and not fits(f.expression, lambda key: key not in clash):
            kind = "license-incompatible"
            severity = ACTION if entry["class"] == "added" else REVIEW
            detail = f"{f.expression} cannot be distributed as part of a {component_license} component"
            if severity == REVIEW:
                detail += " (in a modified upstream file: check whether upstream carries it)"
        else:
            kind, severity = "license-different", REVIEW
            detail = f"{f.expression} in a component licensed {component_license}"
        flags.setdefault((kind, f.expression), Flag(kind, severity, path, f.line, f.text, component, detail))
    return list(flags.values())


# ------------------------------------------------------------------ restrictive terms
def term_flags(path: str, component: str, text: str, found: list[LicenseFinding]) -> list[Flag]:
    """Non-commercial and evaluation-only terms anywhere; proprietary notices without a licence grant."""
    flags: list[Flag] = []
    lines = text.splitlines()
    granted = any(f.category not in RESTRICTED_CATEGORIES for f in found) or bool(_GRANT.search(text))
    for f in found:
        if f.category in RESTRICTED_CATEGORIES:
            kind = _restriction_kind(f.text)
            flags.append(Flag(kind, ACTION, path, f.line, f.text, component, _detail(kind, f.expression)))
    for no, line in enumerate(lines, 1):
        if _NONCOMMERCIAL.search(line) and not _ANY_PURPOSE.search(line):
            flags.append(
                Flag("non-commercial", ACTION, path, no, line.strip(), component, _detail("non-commercial"))
            )
        elif _EVALUATION.search(line):
            flags.append(
                Flag("evaluation-only", ACTION, path, no, line.strip(), component, _detail("evaluation-only"))
            )
        elif not granted and _PROPRIETARY.search(line):
            flags.append(
                Flag("proprietary", ACTION, path, no, line.strip(), component, _detail("proprietary"))
            )
        elif not granted and _RESERVED.search(line):
            flags.append(
                Flag(
                    "no-license-grant", ACTION, path, no, line.strip(), component, _detail("no-license-grant")
                )
            )
    return _first_per_kind(flags)


def _restriction_kind(text: str) -> str:
    if _NONCOMMERCIAL.search(text) and not _ANY_PURPOSE.search(text):
        return "non-commercial"
    if _EVALUATION.search(text):
        return "evaluation-only"
    return "proprietary"


_DETAILS = {
    "non-commercial": "licensed for non-commercial use only: a product cannot ship it",
    "evaluation-only": "licensed for evaluation only: a product cannot ship it",
    "proprietary": "a proprietary or confidential notice and no licence that allows distribution",
    "no-license-grant": "all rights reserved and no licence grant: no right to redistribute",
}


def _detail(kind: str, expression: str | None = None) -> str:
    text = _DETAILS[kind]
    return f"{text} ({expression})" if expression else text


_RESTRICTIONS = ("non-commercial", "evaluation-only", "proprietary", "no-license-grant")


def _first_per_kind(flags: Iterable[Flag]) -> list[Flag]:
    """One restriction flag per file, the most specific one, at its first line."""
    ranked = sorted(flags, key=lambda f: (_RESTRICTIONS.index(f.kind), f.line or 0))
    return ranked[:1]


# ------------------------------------------------------------------ binaries and configurations
_ELF_TYPES = {1: "relocatable object", 2: "executable", 3: "shared object", 4: "core dump"}
_ELF_MACHINES = {
    3: "x86",
    8: "MIPS",
    20: "PowerPC",
    21: "PowerPC64",
    40: "ARM",
    62: "x86-64",
    183: "AArch64",
    243: "RISC-V",
}


def describe_binary(kind: str, head: bytes, path: str) -> str:
    if kind == "elf" and len(head) >= 20:
        bits = {1: "32-bit", 2: "64-bit"}.get(head[4], "?-bit")
        order = "<" if head[5] == 1 else ">"
        e_type, e_machine = struct.unpack(order + "HH", head[16:20])
        what = _ELF_TYPES.get(e_type, f"type {e_type}")
        if path.endswith(".ko") and e_type == 1:
            what = "kernel module"
        return f"ELF {bits} {what}, {_ELF_MACHINES.get(e_machine, f'machine {e_machine}')}"
    return {"static-library": "ar archive of objects (static library)", "pe": "PE executable (Windows)"}.get(
        kind, f"prebuilt {kind}"
    )


def binary_flags(path: str, component: str, kind: str, head: bytes) -> list[Flag]:
    if kind not in PREBUILT_KINDS:
        return []
    detail = "prebuilt machine code delivered as source: its corresponding source is missing"
    return [Flag("prebuilt-binary", ACTION, path, None, describe_binary(kind, head, path), component, detail)]


def normalise_arch(arch: str) -> str:
    a = arch.strip().lower()
    return _ARCH_ALIASES.get(a, a)


def is_config(path: str) -> bool:
    name = os.path.basename(path)
    return name == ".config" or name.endswith(("_defconfig", ".config", "defconfig"))


def arch_flags(path: str, component: str, text: str, declared: str | None) -> list[Flag]:
    """A kernel/U-Boot configuration selecting another architecture than the device's."""
    if not declared or not is_config(path):
        return []
    want = normalise_arch(declared)
    for m in _CONFIG_LINE.finditer(text):
        arch = KCONFIG_ARCH.get(m.group(1))
        if arch and arch != want:
            line = text.count("\n", 0, m.start()) + 1
            detail = f"selects {arch} but the device is declared {declared}"
            return [Flag("arch-mismatch", ACTION, path, line, m.group(0).strip(), component, detail)]
    return []


# ------------------------------------------------------------------ one file, one component
def decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


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


def license_files(files: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Component prefix -> its top-level licence files (COPYING, LICENSE...)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for f in files:
        prefix = f.get("component", "")
        rest = f["path"][len(prefix) :]
        if "/" not in rest and rest.lower() in LICENSE_FILE_NAMES and f.get("size"):
            out.setdefault(prefix, []).append(f)
    return out


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

    def stats(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"error": self.error} if self.error else {}
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


def review_files(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [f for f in manifest["files"] if f["class"] in ("modified", "added") and not f.get("unreadable")]


def wanted_digests(manifest: Mapping[str, Any]) -> dict[str, int]:
    """SHA-256 -> size of every file triage reads: the review set and the components' licence files."""
    chosen = {f["sha256"]: int(f["size"]) for f in review_files(manifest)}
    return chosen | component_licence.wanted(manifest["files"])


def read_plan(manifest: Mapping[str, Any], limits: TriageLimits | None = None) -> Plan:
    """What triage reads of ``manifest``'s drop under ``limits`` (dropscan.audit.triage_plan)."""
    licence = [f for fs in license_files(manifest["files"]).values() for f in fs]
    return plan(review_files(manifest), licence, limits or TriageLimits())


@dataclass(frozen=True, slots=True)
class ContentTriage:
    """What one distinct content says, wherever it lies: licences and restriction terms (paths left
    empty), how deeply it was read, and its head (for the binary flags, which name the file)."""

    mode: str
    licenses: list[LicenseFinding]
    terms: list[Flag]
    head: bytes


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
) -> TriageReport:
    """Licences of the components and of each review file, and the red flags, from the files' bytes.

    Detection runs once per distinct content (a drop of 120,000 copies of one file detects one), within
    ``limits`` (``read``: the plan the content was read by). ``workers`` > 1 shares the contents among
    that many processes forked after the detector's index is loaded (the component licences are detected
    first), so they share it copy-on-write. ``releases``: component prefix -> the licence record of its
    release (component_licence).
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
    jobs = [
        (digest, read.modes.get(digest, FULL), kind)
        for digest, kind in kinds.items()
        if digest in content and read.modes.get(digest, FULL) != NOT_READ
    ]
    report.distinct = len(kinds)
    report.workers = max(1, min(workers, len(jobs) // MIN_FILES_PER_WORKER))
    deadline = time.monotonic() + limits.budget_seconds
    done = _triage_all(jobs, content, detector, deadline, report.workers)
    results = dict(zip((digest for digest, _, _ in jobs), done, strict=True))
    files = _FileFlags(report, content, (manifest.get("source", {}).get("metadata") or {}).get("arch"))
    for f in review:
        report.files += 1
        result = results.get(f["sha256"])
        if result is not None:
            files.add(f, result)
        elif read.modes.get(f["sha256"]) == NOT_READ:
            report.limited[f["path"]] = NOT_READ
        else:
            report.not_found += 1
    if report.limited:
        late = sum(1 for d, mode, _ in jobs if mode == FULL and results[d].mode != FULL)
        report.limit_reasons = _limit_reasons(read, late, limits)
    report.seconds = time.perf_counter() - started
    return report


class _FileFlags:
    """Each review file's licences and flags from its content's triage: the licence flags once per
    content, component licence and class (parsing expressions is most of their cost), then re-pathed."""

    def __init__(self, report: TriageReport, content: Mapping[str, bytes], declared: str | None) -> None:
        self.report, self.content, self.declared = report, content, declared
        self.licence_flags: dict[tuple[str, str | None, str], list[Flag]] = {}
        self.licence_json: dict[str, list[dict[str, Any]]] = {}

    def add(self, f: Mapping[str, Any], result: ContentTriage) -> None:
        report, digest, path, component = self.report, f["sha256"], f["path"], f.get("component", "")
        report.bytes += len(self.content[digest])
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


def _triage_content(
    digest: str, mode: str, kind: str, data: bytes, detector: Detector, deadline: float
) -> ContentTriage:
    head = data[:64]
    if kind != "text":
        return ContentTriage(mode, [], [], head)
    if mode == FULL and time.monotonic() > deadline:
        mode = TAGS_ONLY
    text = decode(data)
    found = detector.detect(text) if mode == FULL else spdx_tags(text)
    return ContentTriage(mode, found, term_flags("", "", text, found), head)


def _triage_some(
    jobs: list[_Job], content: Mapping[str, bytes], detector: Detector, deadline: float
) -> list[ContentTriage]:
    return [_triage_content(d, mode, kind, content[d], detector, deadline) for d, mode, kind in jobs]


def _triage_all(
    jobs: list[_Job], content: Mapping[str, bytes], detector: Detector, deadline: float, workers: int
) -> list[ContentTriage]:
    """_triage_content of every job, in order, on ``workers`` processes."""
    if workers <= 1:
        return _triage_some(jobs, content, detector, deadline)
    # interleaved shares, so that each worker gets big and small files alike
    shares = [jobs[i::workers] for i in range(workers)]
    children = [Forked(_triage_some, share, content, detector, deadline) for share in shares[1:]]
    results = [_triage_some(shares[0], content, detector, deadline)]
    results += [child.result() for child in children]  # ForkedError: the triage records it
    ordered: list[ContentTriage] = [ContentTriage(FULL, [], [], b"")] * len(jobs)
    for i, done in enumerate(results):
        ordered[i::workers] = done
    return ordered


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

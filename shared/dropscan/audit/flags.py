"""The red-flag rules of one file: licences against its component's, restriction terms, prebuilt
binaries, kernel configurations for another architecture. Pure: text and bytes in, flags out."""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from license_expression import AND, OR, BaseSymbol, ExpressionError, LicenseWithExceptionSymbol

from dropscan.audit.licenses import RESTRICTED_CATEGORIES, LicenseFinding, spdx_licensing
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


# ------------------------------------------------------------------ whose line a flag is on
#: flags about what a file's text says; the others (a binary, a configuration's target) are the file's
TEXT_KINDS = frozenset(
    {"non-commercial", "evaluation-only", "proprietary", "no-license-grant", "license-incompatible",
     "license-different", "license-unknown", "license-file-changed"}
)  # fmt: skip
UPSTREAM_TEXT_NOTE = " The line is upstream's own text: the vendor's changes to this file do not touch it."


def mark_upstream_text(manifest: dict[str, Any]) -> int:
    """Mark the text flags of modified files that sit on a line no vendor hunk of the file's review
    evidence wrote: upstream published that text, so the flag says so (``upstream_text``), is at most
    ``review`` and ranks below the vendor's own; a flag on a vendor line keeps its severity. Files
    without a diff (no evidence, or evidence with an error) are left as they are. Returns how many."""
    vendor_lines: dict[str, list[tuple[int, int]]] = {}
    for f in manifest.get("files") or []:
        ev = f.get("evidence")
        if f.get("class") != "modified" or not isinstance(ev, dict) or ev.get("error") or not ev.get("base"):
            continue
        vendor_lines[f["path"]] = [
            (int(h["new_start"]), int(h["new_start"]) + int(h["new_lines"]))
            for h in ev.get("hunks") or []
            if h.get("new_lines") and h.get("origin") != "upstream"
        ]
    marked = 0
    for fl in manifest.get("flags") or []:
        spans, line = vendor_lines.get(fl.get("path", "")), fl.get("line")
        if spans is None or not line or fl.get("kind") not in TEXT_KINDS or fl.get("upstream_text"):
            continue
        if any(start <= line < end for start, end in spans):
            continue
        fl["upstream_text"] = True
        fl["severity"] = REVIEW
        fl["detail"] = str(fl.get("detail") or "") + UPSTREAM_TEXT_NOTE
        marked += 1
    if marked:
        order = {s: i for i, s in enumerate(SEVERITIES)}
        manifest["flags"].sort(
            key=lambda x: (
                order[x["severity"]],
                bool(x.get("upstream_text")),
                x["path"],
                x["line"] or 0,
                x["kind"],
            )
        )
    return marked

"""Plain value types shared by every stage: file records, classes, kinds, what the upstream database
knows of a digest, a package and a release, and the state of a scan. No I/O."""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any

from dropscan.keys import ROOT


class Kind(StrEnum):
    """What a file's bytes are, as far as an auditor cares."""

    TEXT = "text"
    BINARY = "binary"
    ELF = "elf"  # executables, shared objects, relocatable objects, kernel modules
    STATIC_LIBRARY = "static-library"  # ar archives of objects (.a, .lib)
    PE = "pe"
    MACH_O = "mach-o"
    JAVA_CLASS = "java-class"
    ARCHIVE = "archive"  # a nested archive kept as one file (known upstream, or unreadable)
    # Members with no content of their own: recorded, never followed or read. Size 0 and the digest of
    # no bytes (so the class is "empty"); ``link`` holds a link's target, ``note`` says what it is.
    SYMLINK = "symlink"
    HARDLINK = "hardlink"  # a hard link carrying data (cpio does that) is digested like a file
    SPECIAL = "special"  # device nodes, FIFOs, sockets


#: kinds that are prebuilt machine code rather than source
PREBUILT_KINDS = frozenset({Kind.ELF, Kind.STATIC_LIBRARY, Kind.PE, Kind.MACH_O, Kind.JAVA_CLASS})


class FileClass(StrEnum):
    """Exactly one per file of a drop; MODIFIED and ADDED form the review set."""

    EMPTY = "empty"
    IDENTICAL = "identical"
    VCS_KEYWORDS = "vcs-keywords"
    WHITESPACE = "whitespace"
    LOW_TRUST = "low-trust"
    MODIFIED = "modified"
    ADDED = "added"


CLASS_ORDER: tuple[FileClass, ...] = tuple(FileClass)
REVIEW_CLASSES = frozenset({FileClass.MODIFIED, FileClass.ADDED})


#: a scan's status once it has its manifest
TERMINAL = ("complete", "rejected", "failed")


class Trust(StrEnum):
    HIGH = "high"
    LOW = "low"


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One regular file of an archive, as the unpack stage sees it.

    ``kw`` and ``ws`` equal ``sha256`` for binary files and for text that normalisation leaves unchanged.
    ``unreadable`` is set on a nested archive that could not be opened (corrupt, encrypted, unknown).
    ``container`` marks a nested archive that was unpacked (its members follow as records of their own).
    ``link`` is the target of a symbolic or hard link (escaped like paths are), never followed.
    ``note`` says what was odd about the member: an escaped, shortened, absolute or duplicate name, a
    link leaving the archive, the type of a special file; None for an ordinary member.
    """

    path: str
    size: int
    sha256: str
    kw: str
    ws: str
    kind: str
    unreadable: str | None = None
    container: bool = False
    link: str | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        # by hand, not dataclasses.asdict: that deep-copies every field and cost more than the hashing
        out: dict[str, Any] = {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "kw": self.kw,
            "ws": self.ws,
            "kind": self.kind,
        }
        if self.unreadable is not None:
            out["unreadable"] = self.unreadable
        if self.container:
            out["container"] = True
        if self.link is not None:
            out["link"] = self.link
        if self.note is not None:
            out["note"] = self.note
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileRecord:
        return cls(
            path=data["path"],
            size=int(data["size"]),
            sha256=data["sha256"],
            kw=data.get("kw") or data["sha256"],
            ws=data.get("ws") or data["sha256"],
            kind=data["kind"],
            unreadable=data.get("unreadable"),
            container=bool(data.get("container", False)),
            link=data.get("link"),
            note=data.get("note"),
        )


# ------------------------------------------------------------------ the upstream database's answers
_VERSION_PART = re.compile(r"(\d+)")


@lru_cache(maxsize=4096)  # a scan compares the same few versions hundreds of thousands of times
def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Natural order: 1.9 < 1.10 < 1.10.1; letters sort after numbers at the same place."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _VERSION_PART.split(version) if p)


@dataclass(frozen=True, slots=True)
class VersionRange:
    lo: str
    hi: str

    def widen(self, version: str) -> VersionRange:
        return VersionRange(min(self.lo, version, key=version_key), max(self.hi, version, key=version_key))

    def as_list(self) -> list[str]:
        return [self.lo] if self.lo == self.hi else [self.lo, self.hi]


@dataclass(frozen=True, slots=True)
class DigestInfo:
    """What the database knows of one digest.

    ``packages``: the lowest and highest release of each package holding it; ``history``: for a package
    ingested from git with its history, where the content comes from (:data:`Provenance`). A package
    whose history holds the content but none of its releases is in ``history`` only.
    """

    forms: frozenset[str]
    packages: Mapping[str, VersionRange]
    history: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def names(self) -> set[str]:
        """Every package holding the content, in a release or in its history."""
        return set(self.packages) | set(self.history)


#: a digest's provenance in a package's git history: ``c`` the first commit that holds it, ``t`` its
#: date (ISO 8601, UTC), ``s`` its subject (at most 120 characters), ``p`` up to 4 paths it was
#: committed at, ``r`` the first release tag holding it (absent: none does)
Provenance = Mapping[str, Any]
PROVENANCE_PATHS = 4
PROVENANCE_SUBJECT = 120


def info_to_json(info: DigestInfo) -> dict[str, Any]:
    """The ``v`` value of a digest item (also what a lookup hands on to finalize)."""
    out: dict[str, Any] = {
        "f": sorted(info.forms),
        "p": {p: r.as_list() for p, r in sorted(info.packages.items())},
    }
    if info.history:
        out["h"] = {p: dict(h) for p, h in sorted(info.history.items())}
    return out


def info_from_json(v: Mapping[str, Any]) -> DigestInfo:
    """The inverse of info_to_json (a range of one version is a list of one). An item's open range
    (``[lo, hi, 1]``) reads as its stored ``hi``: only the store knows where it really ends."""
    return DigestInfo(
        frozenset(v.get("f", ())),
        {
            p: VersionRange(r[0], r[-1] if isinstance(r[-1], str) else r[-2])
            for p, r in v.get("p", {}).items()
            if r
        },
        dict(v.get("h") or {}),
    )


def earlier_provenance(a: Provenance | None, b: Provenance | None) -> Provenance | None:
    """The provenance of the earlier commit (by date, then id), with the paths of both (at most 4) and
    the first release tag either knows: merging is commutative, so concurrent writers agree."""
    if a is None or b is None:
        return a or b
    if "c" not in a or "c" not in b:  # a first release tag alone, noted on the provenance a run wrote before
        full, note = sorted((a, b), key=lambda h: ("c" not in h, str(h.get("r", ""))))
        merged = dict(full)
        if "r" not in merged and "r" in note:
            merged["r"] = note["r"]
        return merged
    # the same commit with two first tags (runs of different --tags): the lower name, either way
    first, other = sorted(
        (a, b), key=lambda h: (h.get("t", ""), h.get("c", ""), "r" not in h, str(h.get("r")))
    )
    merged = dict(first)
    merged["p"] = sorted(set(first.get("p", ())) | set(other.get("p", ())))[:PROVENANCE_PATHS]
    if "r" not in merged and "r" in other:
        merged["r"] = other["r"]
    return merged


@dataclass(frozen=True, slots=True)
class PackageInfo:
    name: str
    trust: Trust
    versions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FileDigests:
    """The three digests of one upstream file."""

    sha256: str
    kw: str
    ws: str


@dataclass(frozen=True, slots=True)
class Release:
    """One upstream release: every path it holds and that file's SHA-256."""

    package: str
    version: str
    files: dict[str, str]

    @property
    def digests(self) -> frozenset[str]:
        return frozenset(self.files.values())


# ------------------------------------------------------------------ scans
@dataclass(frozen=True, slots=True)
class Upload:
    """The object a scan is about."""

    bucket: str
    key: str
    etag: str | None
    version_id: str | None
    supplier: str
    metadata: dict[str, str]


@dataclass(frozen=True, slots=True)
class Scan:
    """A scan's bookkeeping as the scans table holds it: its upload, its parts and chunks, its claim.

    A part is *opened* (``parts_open``) before its message is sent and *closed* once (``parts_closed``,
    its chunk count added to ``chunks_total``); the scan is complete when every opened part is closed and
    ``chunks_done`` has reached ``chunks_total``.
    """

    scan_id: str
    supplier: str
    bucket: str
    key: str
    created_at: str
    etag: str | None = None
    version_id: str | None = None
    status: str = "scanning"
    reason: str | None = None
    source_size: int | None = None
    source_sha256: str | None = None
    chunks_total: int | None = None
    unpack_seconds: float = 0.0
    chunks_done: int = 0
    done_chunks: AbstractSet[str] = frozenset()
    parts_open: AbstractSet[str] | None = None  # None on scans of the earlier layout (one unpack)
    parts_closed: AbstractSet[str] = frozenset()
    unpacked_bytes: int = 0  # member bytes read, every part together
    members: int = 0  # archive members seen, every part together
    part_reason: str | None = None  # why a part other than the root rejected the scan
    metadata: dict[str, Any] = field(default_factory=dict)  # the upload's x-amz-meta-*
    finalized_at: str | None = None
    finalizer: str | None = None  # the finalize message that claimed the scan
    pending: str | None = None  # "open" until the scan has its manifest
    triage_parts: int = 0  # invocations triage was fanned out to (0: one, the usual case)
    triage_done: AbstractSet[str] = frozenset()  # the triage parts counted done
    # part -> (archive members, member bytes) its walk had got to when it last said, while it walks
    unpacking: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def unpacked_so_far(self) -> tuple[int, int]:
        """(members, bytes) unpacked: the closed parts' counts and how far the open ones have got."""
        walking = self.unfinished_parts()
        live = [counts for part, counts in self.unpacking.items() if part in walking]
        return self.members + sum(m for m, _ in live), self.unpacked_bytes + sum(b for _, b in live)

    def part_closed(self, part: str = ROOT) -> bool:
        """Whether ``part`` counted its chunks (on a scan of the earlier layout: whether the unpack did)."""
        if self.parts_open is None and part == ROOT:
            return self.chunks_total is not None
        return part in self.parts_closed

    def unfinished_parts(self) -> set[str]:
        """The parts opened and not closed yet."""
        return set(self.parts_open or ()) - set(self.parts_closed)

    def is_complete(self) -> bool:
        """Every part opened is closed, and every chunk they counted is done."""
        if self.chunks_total is None or self.unfinished_parts():
            return False
        return self.chunks_done >= self.chunks_total


# ------------------------------------------------------------------ auditors' decisions
VERDICTS = ("accepted", "needs-action", "rejected")
SCOPES = ("supplier", "global")


@dataclass(frozen=True, slots=True)
class Decision:
    """An auditor's decision on a file's content (``subject`` = ``sha256:<hex>``), in a scope.

    ``supplier`` is the supplier whose drop it was decided on (for ``supplier`` scope, the only one it
    applies to); ``flags`` (``kind: detail``) and ``licenses`` (expressions) are what the file carried
    when it was decided: a later scan that finds more re-opens it.
    """

    subject: str
    scope: str  # "supplier" | "global"
    supplier: str
    verdict: str
    by: str
    at: str
    note: str = ""
    scan_id: str = ""
    path: str = ""
    flags: tuple[str, ...] = ()
    licenses: tuple[str, ...] = ()

    @property
    def scope_key(self) -> str:
        """The table's sort key: ``global`` or ``supplier:<name>``."""
        return scope_key(self.scope, self.supplier)

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "scope": self.scope,
            "supplier": self.supplier,
            "verdict": self.verdict,
            "by": self.by,
            "at": self.at,
            "note": self.note,
            "scan_id": self.scan_id,
            "path": self.path,
            "flags": list(self.flags),
            "licenses": list(self.licenses),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Decision:
        return cls(
            subject=str(data["subject"]),
            scope=str(data["scope"]),
            supplier=str(data.get("supplier") or ""),
            verdict=str(data["verdict"]),
            by=str(data["by"]),
            at=str(data["at"]),
            note=str(data.get("note") or ""),
            scan_id=str(data.get("scan_id") or ""),
            path=str(data.get("path") or ""),
            flags=tuple(sorted(data.get("flags") or ())),
            licenses=tuple(sorted(data.get("licenses") or ())),
        )


def scope_key(scope: str, supplier: str) -> str:
    return "global" if scope == "global" else f"supplier:{supplier}"


def content_subject(sha256: str) -> str:
    return f"sha256:{sha256}"

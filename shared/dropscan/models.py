"""Plain data shared by every stage: file records, classes, kinds."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


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

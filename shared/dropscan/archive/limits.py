"""What one upload may cost, what a walk has used of it, and the value types walks hand to each other."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import IO, Protocol

from dropscan.models import FileRecord

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """What one upload may cost; every bound is checked while the data streams, never after.

    The defaults leave wide room for real drops and stop bombs early (the figures behind each are in
    docs/design.md, "The archive package"):

    - ``total_bytes`` unpacked, all nesting levels together: tens of kernel trees, still walked within
      the function timeout.
    - ``files`` archive members (folders and links included): twice a full Android source tree.
    - ``depth`` nesting levels: real drops nest two or three deep (tarball > patch tarball > test data).
    - ``ratio``: real source compresses far less, and deflate cannot pass 1032:1 at all. It is enforced
      for a member, and for a whole archive level against its own size, only past ``ratio_after`` of
      output: small files of padding or test vectors compress further and cost nothing.
    - ``member_bytes`` for one member: more than any source file, firmware and disk images included.
    - ``spool_bytes`` for nested archives spooled at once: within the unpack function's ephemeral
      storage. A nested archive that does not fit is hashed and kept as one unreadable file.

    ``total_bytes`` and ``files`` end the whole walk (LimitExceeded); the others make the archive they
    trip in one unreadable file, or end the walk when they trip in the top-level archive.
    """

    total_bytes: int = 64 * GiB
    files: int = 2_000_000
    depth: int = 8
    ratio: int = 1000
    ratio_after: int = 64 * MiB
    member_bytes: int = 16 * GiB
    spool_bytes: int = 8 * GiB


class ArchiveReadError(Exception):
    """The top-level archive could not be read to its end; the message is libarchive's reason."""


class LimitExceeded(ArchiveReadError):
    """The upload would cost more than its :class:`Limits` allow; ``reason`` says which bound and where."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Readable(Protocol):
    """Anything with ``read(n)``: an open file, io.BytesIO, a boto3 StreamingBody..."""

    def read(self, size: int = ..., /) -> bytes: ...


@dataclasses.dataclass
class Progress:
    """How much of the upload's limits a walk has used: where it starts from, and where it ended."""

    members: int = 0  # archive entries seen, at every level
    total: int = 0  # member bytes read, at every level


@dataclasses.dataclass(frozen=True, slots=True)
class Nested:
    """A nested archive handed to another invocation, to be walked by :func:`walk_nested` there."""

    record: FileRecord  # the archive as one file: its path, digests (and their kind) and notes
    fmt: str  # the archive or compressor its first bytes show
    depth: int  # the nesting depth of its members
    member: int  # its number among the entries of this walk (deterministic: it names the part)
    spent: Progress  # what this walk had used of the limits when it handed the archive over


@dataclasses.dataclass
class Split:
    """Stopping the walk of a top-level tar at a member boundary, for another invocation to go on from.

    ``stop`` is asked after each member of the top level (never before the first); once it says so,
    the walk ends there and ``offset`` is where the next member's headers start in the uncompressed
    tar, ``codec`` the compressor before it (None: a plain tar). Other formats never stop: a zip is
    cut before its walk, by ranges of its central directory (:mod:`dropscan.archive.zipsplit`); a 7z
    or a compressor outside ``inflate.CODECS`` is not split.
    """

    stop: Callable[[Progress], bool]
    offset: int | None = None
    codec: str | None = None


class FanOut(Protocol):
    """Where nested archives of at least ``threshold`` bytes go instead of being unpacked in this walk."""

    threshold: int

    def hand_over(self, spool: IO[bytes], nested: Nested) -> None:
        """Take the archive (``spool``, read from the start) away; called once it is whole and unknown."""


def check_spent(limits: Limits, spent: Progress) -> None:
    """LimitExceeded, worded as the walk words it, if ``spent`` is beyond ``limits``' totals."""
    if spent.members > limits.files:
        raise LimitExceeded(f"more than {limits.files:,} archive members")
    if spent.total > limits.total_bytes:
        raise LimitExceeded(f"more than {size_text(limits.total_bytes)} unpacked")


def size_text(count: int) -> str:
    """``count`` bytes as the limits' messages word it: whole GiB, MiB or KiB, else bytes."""
    for unit, factor in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if count >= factor and count % factor == 0:
            return f"{count // factor:,} {unit}"
    return f"{count:,} bytes"

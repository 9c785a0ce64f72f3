"""Cutting a big zip upload into ranges of its central directory, each walked by an invocation of its own."""

from __future__ import annotations

import itertools
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: an empty end-of-central-directory record: libarchive's streaming zip reader ends at it cleanly,
#: where the next range's local header would otherwise start (and a range ends mid-archive)
END_OF_ARCHIVE = b"PK\x05\x06" + bytes(18)


@dataclass(frozen=True, slots=True)
class ZipRange:
    """Bytes ``[start, end)`` of the zip: ``entries`` whole members from local header to local header."""

    index: int  # 1-based: the range's part is the upload's segment of that number
    start: int
    end: int
    entries: int
    members_before: int  # entries of the central directory before this range
    bytes_before: int  # their uncompressed sizes as the central directory declares them

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "start": self.start,
            "end": self.end,
            "entries": self.entries,
            "spent": [self.members_before, self.bytes_before],
        }


def plan(source: Any, part_bytes: int) -> list[ZipRange] | None:
    """Ranges of about ``part_bytes`` each (cut at the first local header at or past it), or None.

    None when ``source`` (seekable, from its start) is not a zip whose central directory can be
    trusted to cut it: unreadable, with data before its first member (a self-extractor), or listing
    members whose local headers are out of order or overlap (the unsplit walk reads those as it can).
    """
    try:
        with zipfile.ZipFile(source) as zf:
            infos = zf.infolist()
            directory = int(zf.start_dir)  # type: ignore[attr-defined]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, KeyError):
        return None
    return cut([(i.header_offset, i.file_size) for i in infos], directory, part_bytes)


def cut(entries: Sequence[tuple[int, int]], directory: int, part_bytes: int) -> list[ZipRange] | None:
    """The ranges of :func:`plan` from (local header offset, uncompressed size) in directory order."""
    if not entries or entries[0][0] != 0 or part_bytes <= 0:
        return None
    offsets = [offset for offset, _ in entries]
    if any(b <= a for a, b in itertools.pairwise(offsets)) or offsets[-1] >= directory:
        return None
    ranges: list[ZipRange] = []
    first, declared = 0, 0  # the current range's first entry; bytes declared before it
    for i in range(1, len(entries) + 1):
        end = offsets[i] if i < len(entries) else directory
        if end - offsets[first] >= part_bytes or i == len(entries):
            ranges.append(ZipRange(len(ranges) + 1, offsets[first], end, i - first, first, declared))
            declared += sum(size for _, size in entries[first:i])
            first = i
    return ranges


class Terminated:
    """A range of a zip read as a stream, followed by :data:`END_OF_ARCHIVE`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._tail = END_OF_ARCHIVE

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._stream.read(size)
        if data or not self._tail:
            return data
        data, self._tail = (self._tail, b"") if size < 0 else (self._tail[:size], self._tail[size:])
        return data

"""What the walker keeps while it reads: the archive levels open, and the records of a nested archive."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

from dropscan.archive.binding import Reader
from dropscan.archive.digest import Digest
from dropscan.models import FileRecord, Kind


def record(
    path: str,
    digest: Digest,
    kind: Kind | None = None,
    *,
    unreadable: str | None = None,
    container: bool = False,
    link: str | None = None,
    notes: Iterable[str] = (),
) -> FileRecord:
    """The record of a file at ``path`` with ``digest``: of the digest's kind unless ``kind`` is given."""
    return FileRecord(
        path=path,
        size=digest.size,
        sha256=digest.sha256,
        kw=digest.kw,
        ws=digest.ws,
        kind=(kind or digest.kind).value,
        unreadable=unreadable,
        container=container,
        link=link,
        note="; ".join(notes) or None,
    )


class Level:
    """One archive being read: the top-level upload (depth 0) or a spooled nested archive."""

    __slots__ = ("check_at", "depth", "expanded", "prefix", "reader", "size")

    reader: Reader

    def __init__(self, reader: Reader | None, prefix: str, depth: int, size: int | None, after: int) -> None:
        if reader is not None:
            self.reader = reader
        self.prefix = prefix
        self.depth = depth
        self.size = size  # None for the top level: as much as has been read of it
        self.expanded = 0  # member bytes of this archive and of every archive nested in it
        self.check_at = after  # expanded beyond which its ratio is evaluated again

    def compressed(self) -> int:
        """The size of the archive as far as it has been read."""
        if self.size is not None:
            return self.size
        # a seekable source may be read more than once (zip seeks back and forth): how far it goes
        return self.reader.high if self.reader.seekable else self.reader.consumed()


class Records:
    """The records of one nested archive until it is complete: in memory, then spilled to disk."""

    def __init__(self, spool_dir: str | None, in_memory: int) -> None:
        self._spool_dir = spool_dir
        self._in_memory = in_memory
        self._memory: list[FileRecord] = []
        self._disk: IO[bytes] | None = None
        self.count = 0

    def insert_first(self, record: FileRecord) -> None:
        self._memory.insert(0, record)
        self.count += 1

    def extend(self, records: Iterable[FileRecord]) -> None:
        for record in records:
            self.count += 1
            if len(self._memory) < self._in_memory:
                self._memory.append(record)
                continue
            if self._disk is None:
                self._disk = tempfile.TemporaryFile(dir=self._spool_dir)  # noqa: SIM115 (closed by close())
            self._disk.write(json.dumps(record.to_json()).encode() + b"\n")

    def __iter__(self) -> Iterator[FileRecord]:
        yield from self._memory
        if self._disk is not None:
            self._disk.seek(0)
            for line in self._disk:
                yield FileRecord.from_json(json.loads(line))

    def close(self) -> None:
        self._memory = []
        if self._disk is not None:
            self._disk.close()
            self._disk = None

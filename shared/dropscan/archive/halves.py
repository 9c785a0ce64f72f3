"""A big local plain tar walked as two halves in two processes, cut at a member boundary near its middle."""

from __future__ import annotations

import dataclasses
import os
import pickle
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from dropscan.archive.binding import tar_member_at
from dropscan.archive.limits import ArchiveReadError, Limits, Progress, check_spent
from dropscan.archive.paths import Names
from dropscan.archive.walker import walk
from dropscan.forked import Forked, ForkedError, portable, usable_cpus
from dropscan.models import FileRecord

__all__ = ["MIN_BYTES", "Window", "walk_file"]

#: below this a second process saves less than it costs (a fork, the cut's header scan, and the
#: second half's records read back; figures in docs/design.md, "The archive package")
MIN_BYTES = 64 * 1024 * 1024
#: where the cut goes, as a share of the file: the first half's process also reads back and hands on
#: every record of the second, yet on the kernel tar the middle measured fastest (docs/design.md)
CUT_SHARE = 0.5
#: records per batch the second half writes to its spool
BATCH = 2048


class Window:
    """Bytes ``start`` to ``end`` of a file, as a seekable stream of their own (position 0 = ``start``)."""

    def __init__(self, path: str | os.PathLike[str], start: int, end: int) -> None:
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by close()
        self._start, self._end = start, end
        self._file.seek(start)

    def read(self, size: int = -1) -> bytes:
        left = self._end - self._file.tell()
        if left <= 0:
            return b""
        return self._file.read(left if size < 0 else min(size, left))

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: self._start, os.SEEK_CUR: self._file.tell(), os.SEEK_END: self._end}[whence]
        self._file.seek(min(max(base + offset, self._start), self._end))
        return self.tell()

    def tell(self) -> int:
        return self._file.tell() - self._start

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def walk_file(
    path: str | os.PathLike[str],
    name: str,
    *,
    is_known: Callable[[str], bool] = lambda sha: False,
    emit_containers: bool = False,
    limits: Limits | None = None,
) -> Iterator[FileRecord]:
    """The records :func:`dropscan.archive.walk` yields for the file at ``path``, in the same order.

    A plain tar of at least MIN_BYTES, with a second usable core, is cut at the first member whose
    headers start past CUT_SHARE of it: a forked child walks the rest, spooling its records to a
    temporary file, while this process walks up to the cut (libarchive ends a tar that stops at a
    header boundary without complaint). The second half's records follow the first's; a path the
    first half already gave is renamed as one walk renames it (paths.Names). The limits hold for the
    two halves together: if their sum is beyond a bound, LimitExceeded as the single walk words it
    (what the halves read before is bounded by the limits each half keeps on its own).
    """
    limits = limits or Limits()
    options: dict[str, Any] = {"is_known": is_known, "emit_containers": emit_containers, "limits": limits}
    size = Path(path).stat().st_size
    cut = None
    if size >= MIN_BYTES and usable_cpus() > 1 and hasattr(os, "fork"):
        with open(path, "rb") as stream:
            cut = tar_member_at(stream, int(size * CUT_SHARE))
    if not cut:
        yield from walk(path, name, **options)
        return
    yield from _two_halves(path, name, cut, size, options, limits)


def _two_halves(
    path: str | os.PathLike[str], name: str, cut: int, size: int, options: dict[str, Any], limits: Limits
) -> Iterator[FileRecord]:
    with (
        tempfile.TemporaryFile() as spool,
        Forked(_second_half, spool, path, name, cut, size, options) as second_half,
    ):
        names = Names()
        first = Progress()
        with Window(path, 0, cut) as window:
            for rec in walk(window, name, progress=first, **options):
                names.claim(rec.path)  # already distinct within the half: nothing is renamed
                yield rec
        try:
            error, second = second_half.result()
        except ForkedError as died:
            raise ArchiveReadError(f"the walk of the second half ended without a word: {died}") from None
        check_spent(limits, Progress(first.members + second.members, first.total + second.total))
        spool.seek(0)
        yield from _records(spool, names)
        if error is not None:
            raise error


def _records(spool: IO[bytes], names: Names) -> Iterator[FileRecord]:
    while True:
        try:
            batch: list[FileRecord] = pickle.load(spool)
        except EOFError:
            return
        for rec in batch:
            path, note = names.claim(rec.path)
            if note:  # a path of the first half, or of a rename made there
                rec = dataclasses.replace(rec, path=path, note="; ".join(n for n in (rec.note, note) if n))
            yield rec


def _second_half(
    spool: IO[bytes], path: str | os.PathLike[str], name: str, cut: int, size: int, options: dict[str, Any]
) -> tuple[Exception | None, Progress]:
    """The walk from ``cut`` on, its records pickled into ``spool``: its error, and what it spent."""
    spent = Progress()
    batch: list[FileRecord] = []
    error = None
    try:
        with Window(path, cut, size) as window:
            for rec in walk(window, name, progress=spent, **options):
                batch.append(rec)
                if len(batch) == BATCH:
                    pickle.dump(batch, spool)
                    batch = []
    except Exception as e:  # raised by the parent after the records before it, as one walk does
        error = portable(e, ArchiveReadError)
    pickle.dump(batch, spool)
    spool.flush()
    return error, spent

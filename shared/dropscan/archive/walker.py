"""The walker: every member of a (nested) archive, hashed, in bounded time, memory and disk."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Callable, Generator, Iterator
from typing import IO, cast

from dropscan.archive.binding import (
    DIRECTORY,
    READ_BLOCK,
    SYMLINK,
    TYPE_MASK,
    Broken,
    Reader,
    Replay,
    Unrecognised,
    decompression_error,
    entry_filetype,
    entry_hardlink,
    entry_hardlink_utf8,
    entry_is_data_encrypted,
    entry_rdevmajor,
    entry_rdevminor,
    entry_size,
    entry_size_is_set,
    entry_symlink,
    entry_symlink_utf8,
    has_data,
    open_reader,
    raw_name,
)
from dropscan.archive.digest import Digest, Digester, digest_bytes
from dropscan.archive.inflate import CODECS, InflateError, inflate_mode, plain_stream
from dropscan.archive.limits import (
    ArchiveReadError,
    FanOut,
    LimitExceeded,
    Limits,
    MiB,
    Nested,
    Progress,
    Readable,
    Split,
    check_spent,
    size_text,
)
from dropscan.archive.magic import COMPRESSORS, MAGIC_SPAN, nested_format
from dropscan.archive.paths import Names
from dropscan.archive.records import Level, Records, record
from dropscan.models import FileRecord, Kind

#: a nested archive is spooled in memory up to this size (halved at each deeper level), then to disk
SPOOL_MEMORY = 64 * MiB
#: bytes of a non-seekable source kept in memory (then on disk) until libarchive has found a format
HEAD_SPOOL_MEMORY = 8 * MiB
#: records of a nested archive held in memory until it is complete; beyond, they wait in the spool dir
RECORDS_IN_MEMORY = 4096

_SPECIAL_TYPES = {
    0o020000: "character device",
    0o060000: "block device",
    0o010000: "FIFO",
    0o140000: "socket",
}
_EMPTY = digest_bytes(b"")


class _Bomb(Exception):
    """A bound of :class:`Limits` tripped inside the nested archive at ``depth``: it becomes unreadable."""

    def __init__(self, reason: str, depth: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.depth = depth


def walk(
    source: Readable | str | os.PathLike[str],
    name: str,
    *,
    is_known: Callable[[str], bool] = lambda sha: False,
    emit_containers: bool = False,
    max_depth: int | None = None,
    spool_dir: str | None = None,
    limits: Limits | None = None,
    fan_out: FanOut | None = None,
    progress: Progress | None = None,
    split: Split | None = None,
) -> Iterator[FileRecord]:
    """Yield one record per member of ``source`` but folders, unpacking nested archives on the way.

    ``name`` is the path of the single record yielded when ``source`` is not an archive at all.
    Links and special files are records of their own kinds, never followed or read.
    A nested archive whose SHA-256 ``is_known`` is yielded as one file of kind archive, unopened.
    A nested archive that was unpacked is yielded itself (``container=True``, before its members)
    only if ``emit_containers``. Members of nested archives are named ``outer!/inner``.
    Nothing is written to disk but spooled nested archives (and records), in ``spool_dir``.
    Raises ArchiveReadError if the top-level archive breaks midway, after yielding what was read, and
    LimitExceeded when the upload goes beyond ``limits`` (``max_depth`` overrides ``limits.depth``).
    With ``fan_out``, a nested archive member of the top level at least ``fan_out.threshold`` bytes big is
    handed over instead of unpacked, and yields nothing here. ``progress`` (counted on from where it
    stands) receives what the walk used of the limits, as each member starts and at the end. ``split``
    may end the walk of a tar early.
    """
    limits = limits or Limits()
    if max_depth is not None:
        limits = dataclasses.replace(limits, depth=max_depth)
    walker = _Walker(is_known, emit_containers, limits, spool_dir, fan_out, progress, split)
    try:
        if isinstance(source, str | os.PathLike):
            with open(source, "rb") as stream:
                yield from walker.top(stream, name)
        else:
            yield from walker.top(source, name)
    finally:
        walker.report()


def walk_nested(
    spool: IO[bytes],
    nested: Nested,
    *,
    is_known: Callable[[str], bool] = lambda sha: False,
    spool_dir: str | None = None,
    limits: Limits | None = None,
    fan_out: FanOut | None = None,
    progress: Progress | None = None,
) -> Iterator[FileRecord]:
    """The records the walk that handed ``nested`` over would have yielded for it, had it unpacked it.

    All or nothing, as there: its members, or the archive as one (unreadable) file. ``spool`` holds the
    archive (seekable, as the spool of the walk in-process is). Members of ``nested`` that are archives
    of at least ``fan_out.threshold`` bytes are handed over in turn; ``progress`` starts from
    ``nested.spent`` when not given.
    """
    limits = limits or Limits()
    progress = progress or dataclasses.replace(nested.spent)
    walker = _Walker(is_known, False, limits, spool_dir, fan_out, progress)
    try:
        records = walker.handed_over_archive(spool, nested)
        try:
            yield from records
        finally:
            records.close()
    finally:
        walker.report()


def _seekable(stream: Readable) -> bool:
    try:
        return bool(getattr(stream, "seekable", lambda: False)())
    except (OSError, ValueError):
        return False


class _Walker:
    def __init__(
        self,
        is_known: Callable[[str], bool],
        emit_containers: bool,
        limits: Limits,
        spool_dir: str | None,
        fan_out: FanOut | None = None,
        progress: Progress | None = None,
        split: Split | None = None,
    ) -> None:
        self.is_known = is_known
        self.emit_containers = emit_containers
        self.limits = limits
        self.spool_dir = spool_dir
        self.names = Names()
        self.progress = progress
        self.members = progress.members if progress else 0  # archive entries seen, at every level
        self.total = progress.total if progress else 0  # member bytes read, at every level
        self.spooled = 0  # bytes of nested archives spooled right now
        self.fan_out = fan_out
        self.fan_depth = 0  # the level whose nested archives are handed to fan_out
        self.handed_over = 0  # nested archives handed over so far
        self.split = split

    def report(self) -> None:
        if self.progress is not None:
            self.progress.members, self.progress.total = self.members, self.total

    def _hands_over(self, level: Level, spool: IO[bytes]) -> bool:
        """Whether the spooled nested archive at ``level`` goes to another invocation."""
        return (
            self.fan_out is not None
            and level.depth == self.fan_depth
            and spool.tell() >= self.fan_out.threshold
        )

    # ---------------------------------------------------------------- the top level
    def top(self, stream: Readable, name: str) -> Iterator[FileRecord]:
        seekable = _seekable(stream)
        start = cast(IO[bytes], stream).tell() if seekable else 0
        # A non-seekable source cannot be re-read if it turns out not to be an archive: keep what
        # libarchive reads while it looks for a format (a few hundred KiB at most in practice).
        with contextlib.ExitStack() as stack:
            head = None
            if not seekable:
                head = stack.enter_context(
                    tempfile.SpooledTemporaryFile(HEAD_SPOOL_MEMORY, dir=self.spool_dir)
                )
            if not (yield from self._top_archive(stream, seekable, head)):
                if head is None:
                    cast(IO[bytes], stream).seek(start)
                    broken = decompression_error(stream)
                else:
                    head.seek(0)
                    broken = decompression_error(Replay(head, stream))
                if broken is not None:
                    raise ArchiveReadError(broken)
                yield self._whole(stream, name, start, head)

    def _top_archive(
        self, stream: Readable, seekable: bool, head: IO[bytes] | None
    ) -> Generator[FileRecord, None, bool]:
        """Yield the records of ``stream`` as an archive; False if it is not one at all."""
        start = cast(IO[bytes], stream).tell() if seekable else 0
        try:
            reader, entry = open_reader(stream, seekable=seekable, record=head)
        except Unrecognised:
            return False
        except Broken as error:
            # libarchive bids on less than a format needs ("070701" opens text too): broken input that
            # does not even start like an archive is a plain file
            first = head or cast(IO[bytes], stream)
            first.seek(start if head is None else 0)
            if nested_format(first.read(MAGIC_SPAN), "") is None:
                return False
            raise ArchiveReadError(error.reason) from None
        inflater = None
        try:
            split = self._splittable(reader) if entry is not None else None
            mode = inflate_mode()
            codec = reader.single_filter() if entry is not None and mode != "off" else None
            if codec in CODECS:
                # a compressed archive: decompress it beside the walk and let libarchive read the
                # plain archive, from the start again (what was read so far is in head)
                reader.close()
                if head is None:
                    cast(IO[bytes], stream).seek(start)
                    source: Readable = stream
                else:
                    head.seek(0)
                    source = Replay(head, stream)
                inflater = plain_stream(source, codec, mode)
                reader, entry = open_reader(inflater, seekable=False)
            with reader:
                reader.record = None
                level = Level(reader, "", 0, None, self.limits.ratio_after)
                while entry is not None:
                    yield from self._member(level, entry)
                    entry = reader.next_entry()
                    if entry is not None and split is not None and split.stop(self._progress()):
                        split.offset = reader.header_position()
                        break
        except Broken as error:
            raise ArchiveReadError(error.reason) from None
        except InflateError as error:
            raise ArchiveReadError(str(error)) from None
        finally:
            if inflater is not None:
                inflater.close()
        return True

    def _splittable(self, reader: Reader) -> Split | None:
        """The split to honour, if the top level is a tar, plain or behind one compressor of CODECS."""
        split = self.split
        if split is None or not reader.is_tar():
            return None
        filters = reader.filters()
        codec = reader.single_filter() if filters == 2 else None
        if filters > 2 or (filters == 2 and codec not in CODECS):
            return None
        split.codec = codec
        return split

    def _progress(self) -> Progress:
        return Progress(self.members, self.total)

    def _whole(self, stream: Readable, name: str, start: int, head: IO[bytes] | None) -> FileRecord:
        digester = Digester(name)
        if head is None:
            cast(IO[bytes], stream).seek(start)
        else:
            head.seek(0)
            while block := head.read(READ_BLOCK):
                digester.update(block)
        while block := stream.read(READ_BLOCK):
            self.total += len(block)
            if self.total > self.limits.total_bytes:
                raise LimitExceeded(f"upload larger than {size_text(self.limits.total_bytes)}")
            digester.update(block)
        return record(name, digester.finish())

    # ---------------------------------------------------------------- one member
    def _member(self, level: Level, entry: int) -> Iterator[FileRecord]:
        """Records for one entry of an archive: none (a folder), one, or a nested tree."""
        self.members += 1
        if self.progress is not None:  # live, for the stage's reports of a long walk
            self.progress.members, self.progress.total = self.members, self.total
        if self.members > self.limits.files:
            check_spent(self.limits, self._progress())
        filetype = entry_filetype(entry) & TYPE_MASK
        if filetype == DIRECTORY:
            return
        path, notes = self.names.place(level.prefix, raw_name(entry))
        hardlink = entry_hardlink(entry) or entry_hardlink_utf8(entry)
        if not has_data(filetype, hardlink):
            yield self._contentless(path, notes, entry, filetype)
            return
        kind, link = None, None
        if hardlink is not None:
            link, link_notes = Names.target(path, hardlink)
            kind, notes = Kind.HARDLINK, [*notes, *link_notes]
        declared = entry_size(entry) if entry_size_is_set(entry) else None
        if declared is not None and declared > self.limits.member_bytes:
            claim = f"{declared:,} bytes, over the {size_text(self.limits.member_bytes)} limit"
            self._bomb(level, f"member {path} claims {claim}")
        if entry_is_data_encrypted(entry):
            yield record(path, _EMPTY, Kind.BINARY, unreadable="encrypted member: not read", notes=notes)
            return
        yield from self._content(level, path, kind, link, notes, declared)

    def _contentless(self, path: str, notes: list[str], entry: int, filetype: int) -> FileRecord:
        if filetype == SYMLINK:
            # like names: the stored bytes, or UTF-8 when libarchive holds the target only as text
            raw = entry_symlink(entry) or entry_symlink_utf8(entry) or b""
            target, target_notes = Names.target(path, raw)
            return record(path, _EMPTY, Kind.SYMLINK, link=target, notes=[*notes, *target_notes])
        what = _SPECIAL_TYPES.get(filetype, f"file of type {filetype:o}")
        if filetype in (0o020000, 0o060000):
            what += f" {entry_rdevmajor(entry)},{entry_rdevminor(entry)}"
        return record(path, _EMPTY, Kind.SPECIAL, notes=[*notes, f"{what}: not read"])

    def _blocks(self, level: Level, path: str, declared: int | None) -> Iterator[bytes]:
        """The current member's data, each bound of the limits checked block by block."""
        reader, limits = level.reader, self.limits
        # libarchive holds a member to its declared size: one declared under the ratio floor never
        # needs its ratio, nor the (per member) look at where the input is
        start = reader.consumed() if declared is None or declared >= limits.ratio_after else 0
        out = 0
        # the ratios are evaluated again only once the output passes what the last evaluation allowed
        member_check = limits.ratio_after
        while block := reader.read():
            size = len(block)
            out += size
            level.expanded += size
            self.total += size
            if self.total > limits.total_bytes:
                check_spent(limits, self._progress())
            if out > limits.member_bytes:
                self._bomb(level, f"member {path} is larger than {size_text(limits.member_bytes)}")
            if out >= member_check:
                used = reader.consumed() - start
                if out > limits.ratio * used:
                    why = f"member {path} expands beyond {limits.ratio}x its compressed size"
                    self._bomb(level, "decompression bomb: " + why)
                member_check = max(limits.ratio * used, limits.ratio_after)
            if level.expanded > level.check_at:
                self._check_ratio(level)
            yield block

    def _check_ratio(self, level: Level) -> None:
        """An archive level that expands beyond the ratio as a whole (many small bombs, or overlaps)."""
        limits = self.limits
        compressed = level.compressed()
        if level.expanded > limits.ratio_after and level.expanded > limits.ratio * compressed:
            what = "the upload" if level.depth == 0 else f"nested archive {level.prefix[:-2]}"
            self._bomb(level, f"decompression bomb: {what} expands beyond {limits.ratio}x its size")
        level.check_at = max(limits.ratio * compressed, limits.ratio_after)

    def _bomb(self, level: Level, reason: str) -> None:
        if level.depth == 0:
            raise LimitExceeded(reason)
        raise _Bomb(reason, level.depth)

    def _content(
        self,
        level: Level,
        path: str,
        kind: Kind | None,
        link: str | None,
        notes: list[str],
        declared: int | None,
    ) -> Iterator[FileRecord]:
        blocks = self._blocks(level, path, declared)
        head = b""
        digester = None
        try:
            for block in blocks:
                head += block
                if len(head) >= MAGIC_SPAN:
                    break
            fmt = None if kind is not None else nested_format(head, path)
            if fmt is None:
                # most members are one block: digest it whole, no incremental digester
                more = next(blocks, None)
                if more is None:
                    yield record(path, digest_bytes(head, path), kind, link=link, notes=notes)
                    return
                digester = Digester(path)
                digester.update(head)
                digester.update(more)
                for block in blocks:
                    digester.update(block)
                yield record(path, digester.finish(), kind, link=link, notes=notes)
                return
        except Broken as error:
            if error.fatal:
                raise
            if digester is None:
                digester = Digester(path)
                digester.update(head)
            yield record(path, digester.finish(), kind, unreadable=error.reason, link=link, notes=notes)
            return
        digester = Digester(path)
        digester.update(head)
        yield from self._archive_member(level, path, blocks, digester, head, fmt, notes)

    def _archive_member(
        self,
        level: Level,
        path: str,
        blocks: Iterator[bytes],
        digester: Digester,
        head: bytes,
        fmt: str,
        notes: list[str],
    ) -> Iterator[FileRecord]:
        """A member that looks like an archive: spooled (within the spool budget), then unpacked."""
        wanted = level.depth < self.limits.depth
        with contextlib.ExitStack() as stack:
            spool: IO[bytes] | None = None
            if wanted:
                memory = max(SPOOL_MEMORY >> level.depth, READ_BLOCK)
                spool = stack.enter_context(tempfile.SpooledTemporaryFile(memory, dir=self.spool_dir))
                stack.callback(self._unspool, spool)
                spool.write(head)
                self.spooled += len(head)
            try:
                for block in blocks:
                    digester.update(block)
                    if spool is None:
                        continue
                    if self.spooled + len(block) > self.limits.spool_bytes:
                        self._unspool(spool)
                        spool.close()  # gives the disk back now; the walk goes on hashing
                        spool = None
                    else:
                        spool.write(block)
                        self.spooled += len(block)
            except Broken as error:
                if error.fatal:
                    raise
                yield record(path, digester.finish(), Kind.ARCHIVE, unreadable=error.reason, notes=notes)
                return
            digest = digester.finish()
            unreadable = None
            known = self.is_known(digest.sha256)
            if known:
                pass
            elif not wanted:
                unreadable = "nesting depth limit"
            elif spool is None:
                unreadable = (
                    f"nested archive beyond the {size_text(self.limits.spool_bytes)} unpack space: not opened"
                )
            elif self.fan_out is not None and self._hands_over(level, spool):
                spool.seek(0)
                spent = Progress(self.members, self.total)
                whole = record(path, digest, notes=notes)  # the kind its bytes have, as _nested needs
                self.fan_out.hand_over(spool, Nested(whole, fmt, level.depth + 1, self.members, spent))
                self.handed_over += 1
                return
            else:
                records = self._nested(level, spool, path, digest, fmt, notes)
        if known or unreadable is not None:
            yield record(path, digest, Kind.ARCHIVE, unreadable=unreadable, notes=notes)
            return
        try:  # the spool is gone by now: only the records remain
            yield from records
        finally:
            records.close()

    def _unspool(self, spool: IO[bytes]) -> None:
        if not spool.closed:
            self.spooled -= spool.tell()

    # ---------------------------------------------------------------- nested archives
    def handed_over_archive(self, spool: IO[bytes], nested: Nested) -> Records:
        """The records of ``nested``, handed over by another walk, as that walk would have had them."""
        rec = nested.record
        digest = Digest(rec.size, rec.sha256, rec.kw, rec.ws, Kind(rec.kind))
        spool.seek(0, os.SEEK_END)
        self.spooled = spool.tell()
        # the archive's parent level is in the other walk: its ratio check stays there
        parent = Level(None, "", nested.depth - 1, rec.size, 1 << 62)
        self.fan_depth = nested.depth
        notes = rec.note.split("; ") if rec.note else []
        return self._nested(parent, spool, rec.path, digest, nested.fmt, notes)

    def _nested(
        self, parent: Level, spool: IO[bytes], path: str, digest: Digest, fmt: str, notes: list[str]
    ) -> Records:
        """A nested archive: one record, or all its members (all or nothing, never half a tree)."""
        size = spool.tell()
        records = Records(self.spool_dir, RECORDS_IN_MEMORY)
        unreadable = None
        child = Level(None, path + "!/", parent.depth + 1, size, self.limits.ratio_after)
        handed_over = self.handed_over
        try:
            spool.seek(0)
            self._unpack(child, spool, records)
        except Unrecognised:
            records.close()
            if fmt in COMPRESSORS:
                spool.seek(0)
                broken = decompression_error(spool)
                # e.g. a gzipped man page: a plain file, unless it does not even decompress
                records.extend([record(path, digest, unreadable=broken, notes=notes)])
            else:
                reason = "Unrecognized archive format"
                records.extend([record(path, digest, Kind.ARCHIVE, unreadable=reason, notes=notes)])
        except Broken as error:
            unreadable = error.reason
        except _Bomb as bomb:
            if bomb.depth != child.depth:
                records.close()
                raise
            unreadable = bomb.reason
        finally:
            spool.seek(size)  # so that the spool budget gets all of it back
            parent.expanded += child.expanded
        if unreadable is not None or not (records.count or self.handed_over > handed_over):
            # unreadable, or nothing inside (or nothing libarchive could see): keep its bytes in view
            records.close()
            records.extend([record(path, digest, Kind.ARCHIVE, unreadable=unreadable, notes=notes)])
        elif self.emit_containers:
            records.insert_first(record(path, digest, Kind.ARCHIVE, container=True, notes=notes))
        try:
            if parent.expanded > parent.check_at:
                self._check_ratio(parent)
        except BaseException:
            records.close()
            raise
        return records

    def _unpack(self, child: Level, spool: IO[bytes], records: Records) -> None:
        child.reader, entry = open_reader(spool, seekable=True)
        with child.reader:
            while entry is not None:
                records.extend(self._member(child, entry))
                entry = child.reader.next_entry()

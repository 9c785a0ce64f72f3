"""Streaming archive walker: every regular file of a (nested) archive, hashed, in bounded memory."""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from collections.abc import Callable, Generator, Iterator
from typing import IO, Any, Protocol, cast

import libarchive.ffi as ffi
from libarchive.exception import ArchiveError
from libarchive.read import ArchiveRead

from dropscan.digest import Digest, Digester
from dropscan.models import FileRecord, Kind

__all__ = ["ArchiveReadError", "Readable", "walk"]

#: bytes asked of the source per read callback, and of libarchive per data read
READ_BLOCK = 1024 * 1024
#: a nested archive is spooled in memory up to this size (halved at each deeper level), then to disk
SPOOL_MEMORY = 64 * 1024 * 1024
#: bytes of a non-seekable source kept in memory (then on disk) until libarchive has found a format
HEAD_SPOOL_MEMORY = 8 * 1024 * 1024
#: enough of a member to see every magic below, tar's at offset 257 included
_MAGIC_SPAN = 512

# Everything libarchive reads except "raw", "empty" and "mtree": mtree happily "recognises" plain text
# (and would open the local files it names), empty and raw would turn any input into an archive.
_FORMATS = ("7zip", "ar", "cab", "cpio", "iso9660", "lha", "rar", "rar5", "tar", "warc", "xar", "zip")
# In-library decompressors only: lrzip, lzop and grzip would run external programs.
_FILTERS = ("bzip2", "compress", "gzip", "lz4", "lzip", "lzma", "rpm", "uu", "xz", "zstd")

# Magics that make a member worth opening as a nested archive. A compressor alone proves nothing:
# if libarchive finds no archive format after the filter, the member is a plain compressed file.
_COMPRESSOR_MAGICS = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
}
_ARCHIVE_MAGICS = {
    b"PK\x03\x04": "zip",
    b"7z\xbc\xaf\x27\x1c": "7z",
    b"070707": "cpio",
    b"070701": "cpio",
    b"070702": "cpio",
    b"!<arch>\n": "ar",
}
_STATIC_LIBRARY_SUFFIXES = (".a", ".lib")
_FATAL: int = ffi.ARCHIVE_FATAL
_TYPE_MASK = 0o170000
_REGULAR_TYPES = (0, 0o100000)


class ArchiveReadError(Exception):
    """The top-level archive could not be read to its end; the message is libarchive's reason."""


class Readable(Protocol):
    """Anything with ``read(n)``: an open file, io.BytesIO, a boto3 StreamingBody..."""

    def read(self, size: int = ..., /) -> bytes: ...


class _Unrecognised(Exception):
    """libarchive found no archive format at the start of the input."""


def walk(
    source: Readable | str | os.PathLike[str],
    name: str,
    *,
    is_known: Callable[[str], bool] = lambda sha: False,
    emit_containers: bool = False,
    max_depth: int = 8,
    spool_dir: str | None = None,
) -> Iterator[FileRecord]:
    """Yield one record per regular file of ``source``, unpacking nested archives on the way.

    ``name`` is the path of the single record yielded when ``source`` is not an archive at all.
    A nested archive whose SHA-256 ``is_known`` is yielded as one file of kind archive, unopened.
    A nested archive that was unpacked is yielded itself (``container=True``, before its members)
    only if ``emit_containers``. Members of nested archives are named ``outer!/inner``.
    Raises ArchiveReadError if the top-level archive breaks midway, after yielding what was read.
    """
    walker = _Walker(is_known, emit_containers, max_depth, spool_dir)
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as stream:
            yield from walker.top(stream, name)
    else:
        yield from walker.top(source, name)


class _Reader:
    """A libarchive read handle fed from a Python stream through callbacks.

    The stream is read with ``read(n)`` only, so any object with that method works; ``seek`` is
    offered to libarchive when the stream is seekable (zip then reads its central directory).
    Exceptions raised by the stream cannot cross the C frames: they are kept and re-raised in
    place of the ArchiveError that libarchive then reports.
    """

    def __init__(self, stream: Readable, *, seekable: bool, record: IO[bytes] | None = None) -> None:
        self._stream: Any = stream
        self.record = record  # receives every byte read, until the format is known
        self._in = ctypes.create_string_buffer(READ_BLOCK)
        self._in_address = ctypes.addressof(self._in)
        self._data = ctypes.create_string_buffer(READ_BLOCK)
        self._error: BaseException | None = None
        # the ctypes callback objects must outlive the handle
        self._read_cb = ffi.READ_CALLBACK(self._read)
        self._seek_cb = ffi.SEEK_CALLBACK(self._seek)
        self._p = ffi.read_new()
        try:
            for filter_name in _FILTERS:
                _enable(ffi.get_read_filter_function, filter_name, self._p)
            for format_name in _FORMATS:
                _enable(ffi.get_read_format_function, format_name, self._p)
            if seekable:
                ffi.read_set_seek_callback(self._p, self._seek_cb)
            self._call(ffi.read_open, self._p, None, ffi.NO_OPEN_CB, self._read_cb, ffi.NO_CLOSE_CB)
        except BaseException:
            self.close()
            raise
        self._entries = iter(ArchiveRead(self._p))

    def close(self) -> None:
        if self._p is not None:
            ffi.read_free(self._p)
            self._p = None

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, archive_p: int, context: int, ptrptr: Any) -> int:
        try:
            data = self._stream.read(READ_BLOCK)
            if self.record is not None:
                self.record.write(data)
        except BaseException as error:
            self._error = error
            return _FATAL
        size = len(data)
        ctypes.memmove(self._in_address, data, size)
        ptrptr[0] = self._in_address
        return size

    def _seek(self, archive_p: int, context: int, offset: int, whence: int) -> int:
        try:
            return int(self._stream.seek(offset, whence))
        except BaseException as error:
            self._error = error
            return _FATAL

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        try:
            return function(*args)
        except ArchiveError:
            if self._error is not None:
                raise self._error from None
            raise

    def next_entry(self) -> Any:
        """The next entry (a libarchive.entry.ArchiveEntry), or None at the end."""
        return self._call(next, self._entries, None)

    def blocks(self) -> Iterator[bytes]:
        """The data of the current entry."""
        read_data, p, buf = ffi.read_data, self._p, self._data
        while True:
            size = self._call(read_data, p, buf, READ_BLOCK)
            if size == 0:
                return
            if size < 0:  # ARCHIVE_WARN reaches here: for data it means a bad checksum
                raise ArchiveError(ffi.error_string(p) or "data read warning", retcode=size)
            yield ctypes.string_at(buf, size)


def _enable(getter: Callable[[str], Any], name: str, archive_p: Any) -> None:
    with contextlib.suppress(ValueError):  # not built into this libarchive
        getter(name)(archive_p)


def _reason(error: ArchiveError) -> str:
    msg = error.msg
    if isinstance(msg, bytes):
        msg = msg.decode("utf-8", "replace")
    return (msg or "read error")[:200]


def _is_unrecognised(error: ArchiveError) -> bool:
    return _reason(error).startswith("Unrecognized archive format")


def _clean_path(pathname: str | bytes | None) -> str:
    if isinstance(pathname, bytes):  # not valid in the locale: keep the bytes, like tarfile does
        pathname = pathname.decode("utf-8", "surrogateescape")
    path = pathname or ""
    while path.startswith("./"):
        path = path[2:]
    return path


def _nested_format(head: bytes, path: str) -> str | None:
    """The archive or compressor ``head`` starts with, if any."""
    for magic, fmt in _COMPRESSOR_MAGICS.items():
        if head.startswith(magic):
            return fmt
    for magic, fmt in _ARCHIVE_MAGICS.items():
        if head.startswith(magic):
            if fmt == "ar" and path.lower().endswith(_STATIC_LIBRARY_SUFFIXES):
                return None  # a static library is a prebuilt file to report, not a tree
            return fmt
    if head[257:262] == b"ustar":
        return "tar"
    return None


def _record(
    path: str,
    digest: Digest,
    kind: Kind | None = None,
    *,
    unreadable: str | None = None,
    container: bool = False,
) -> FileRecord:
    return FileRecord(
        path=path,
        size=digest.size,
        sha256=digest.sha256,
        kw=digest.kw,
        ws=digest.ws,
        kind=(kind or digest.kind).value,
        unreadable=unreadable,
        container=container,
    )


def _seekable(stream: Readable) -> bool:
    try:
        return bool(getattr(stream, "seekable", lambda: False)())
    except (OSError, ValueError):
        return False


class _Walker:
    def __init__(
        self, is_known: Callable[[str], bool], emit_containers: bool, max_depth: int, spool_dir: str | None
    ) -> None:
        self.is_known = is_known
        self.emit_containers = emit_containers
        self.max_depth = max_depth
        self.spool_dir = spool_dir

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
                yield self._whole(stream, name, start, head)

    def _top_archive(
        self, stream: Readable, seekable: bool, head: IO[bytes] | None
    ) -> Generator[FileRecord, None, bool]:
        """Yield the records of ``stream`` as an archive; False if it is not one at all."""
        try:
            reader = _Reader(stream, seekable=seekable, record=head)
        except ArchiveError as error:
            if _is_unrecognised(error):
                return False
            raise ArchiveReadError(_reason(error)) from error
        with reader:
            try:
                entry = reader.next_entry()
            except ArchiveError as error:
                if _is_unrecognised(error):
                    return False
                raise ArchiveReadError(_reason(error)) from error
            reader.record = None
            try:
                while entry is not None:
                    yield from self._member(reader, entry, "", 0)
                    entry = reader.next_entry()
            except ArchiveError as error:
                raise ArchiveReadError(_reason(error)) from error
        return True

    def _whole(self, stream: Readable, name: str, start: int, head: IO[bytes] | None) -> FileRecord:
        digester = Digester(name)
        if head is None:
            cast(IO[bytes], stream).seek(start)
        else:
            head.seek(0)
            while block := head.read(READ_BLOCK):
                digester.update(block)
        while block := stream.read(READ_BLOCK):
            digester.update(block)
        return _record(name, digester.finish())

    def _member(self, reader: _Reader, entry: Any, prefix: str, depth: int) -> Iterator[FileRecord]:
        """Records for one entry of an archive at nesting ``depth``: none, one, or a nested tree."""
        # Directories, links and devices have no content of their own. A type of 0 is a regular file
        # whose mode lacks the type bits (some ar and cpio writers store just 644).
        if entry.islnk or entry.filetype & _TYPE_MASK not in _REGULAR_TYPES:
            return
        path = prefix + _clean_path(entry.pathname)
        blocks = reader.blocks()
        head = b""
        for block in blocks:
            head += block
            if len(head) >= _MAGIC_SPAN:
                break
        digester = Digester(path)
        digester.update(head)
        fmt = _nested_format(head, path)
        if fmt is None:
            for block in blocks:
                digester.update(block)
            yield _record(path, digester.finish())
            return
        memory = max(SPOOL_MEMORY >> depth, READ_BLOCK)
        with tempfile.SpooledTemporaryFile(memory, dir=self.spool_dir) as spool:
            spool.write(head)
            for block in blocks:
                digester.update(block)
                spool.write(block)
            records = self._nested(spool, path, digester.finish(), fmt, depth + 1)
        yield from records

    def _nested(self, spool: IO[bytes], path: str, digest: Digest, fmt: str, depth: int) -> list[FileRecord]:
        """A nested archive: one record, or all its members (all or nothing, never half a tree)."""
        if self.is_known(digest.sha256):
            return [_record(path, digest, Kind.ARCHIVE)]
        if depth > self.max_depth:
            return [_record(path, digest, Kind.ARCHIVE, unreadable="nesting depth limit")]
        spool.seek(0)
        try:
            members = self._members(spool, path + "!/", depth)
        except _Unrecognised:
            if fmt in _COMPRESSOR_MAGICS.values():
                return [_record(path, digest)]  # e.g. a gzipped man page: a plain file
            return [_record(path, digest, Kind.ARCHIVE, unreadable="Unrecognized archive format")]
        except ArchiveError as error:
            return [_record(path, digest, Kind.ARCHIVE, unreadable=_reason(error))]
        if not members:
            # nothing inside (or libarchive saw nothing in a damaged file): keep its bytes in view
            return [_record(path, digest, Kind.ARCHIVE)]
        if self.emit_containers:
            members.insert(0, _record(path, digest, Kind.ARCHIVE, container=True))
        return members

    def _members(self, spool: IO[bytes], prefix: str, depth: int) -> list[FileRecord]:
        records: list[FileRecord] = []
        try:
            # libarchive settles the format in read_open or at the first header, depending on the input
            reader = _Reader(spool, seekable=True)
            entry = reader.next_entry()
        except ArchiveError as error:
            if _is_unrecognised(error):
                raise _Unrecognised from error
            raise
        with reader:
            while entry is not None:
                records.extend(self._member(reader, entry, prefix, depth))
                entry = reader.next_entry()
        return records

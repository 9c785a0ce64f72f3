"""Streaming archive walker: every member of a (nested) archive, hashed, in bounded time, memory and disk."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import IO, Any, Protocol, cast

import libarchive.ffi as ffi
from libarchive.exception import ArchiveError

from dropscan.digest import Digest, Digester, digest_bytes
from dropscan.inflate import CODECS, InflateError, PlainStream, inflate_mode, plain_stream
from dropscan.models import FileRecord, Kind
from dropscan.paths import Names

__all__ = [
    "MAGIC_SPAN",
    "ArchiveReadError",
    "FanOut",
    "LimitExceeded",
    "Limits",
    "Nested",
    "Progress",
    "Readable",
    "Split",
    "check_spent",
    "compressor_of",
    "tar_member_at",
    "walk",
    "walk_nested",
]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
#: bytes asked of the source per read callback, and of libarchive per data read
READ_BLOCK = 1 * MiB
#: a nested archive is spooled in memory up to this size (halved at each deeper level), then to disk
SPOOL_MEMORY = 64 * MiB
#: bytes of a non-seekable source kept in memory (then on disk) until libarchive has found a format
HEAD_SPOOL_MEMORY = 8 * MiB
#: records of a nested archive held in memory until it is complete; beyond, they wait in the spool dir
RECORDS_IN_MEMORY = 4096
#: enough of a member to see every magic below, tar's at offset 257 included
MAGIC_SPAN = 512


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """What one upload may cost; every bound is checked while the data streams, never after.

    The defaults leave wide room for real drops and stop bombs early:

    - ``total_bytes`` 64 GiB unpacked (all nesting levels together): about 50 Linux kernel trees; the
      biggest vendor BSP drops are a few tens of GB, and at the measured 150-400 MB/s the walk still ends
      within the 900 s function timeout.
    - ``files`` 2,000,000 archive members (folders and links included): 25 kernel trees, twice a full
      Android source tree; beyond, the manifest alone would be hundreds of MB.
    - ``depth`` 8 nesting levels: real drops nest two or three deep (tarball > patch tarball > test data).
    - ``ratio`` 1000: real source compresses 3-12:1 (the kernel's tar.xz 10:1, generated register
      headers 50:1), and deflate cannot pass 1032:1 at all, so only runs of zeros get near it. It is
      enforced for a member, and for a whole archive level against its own size, only past
      ``ratio_after`` (64 MiB) of output: small files of padding or test vectors compress further and
      cost nothing; 64 MiB of work per bomb is the price.
    - ``member_bytes`` 16 GiB for one member: more than any source file (firmware and disk images run to
      a few GB); an S3 object tops out at 5 TB, so a single member could otherwise take hours.
    - ``spool_bytes`` 8 GiB for nested archives spooled at once: the unpack function has 10 GiB of
      ephemeral storage. A nested archive that does not fit is hashed and kept as one unreadable file.

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


# Everything libarchive reads except "raw", "empty" and "mtree": mtree happily "recognises" plain text
# (and would open the local files it names), empty and raw would turn any input into an archive.
_FORMATS = ("7zip", "ar", "cab", "cpio", "iso9660", "lha", "rar", "rar5", "tar", "warc", "xar", "zip")
# In-library decompressors only: lrzip, lzop and grzip would run external programs.
_FILTERS = ("bzip2", "compress", "gzip", "lz4", "lzip", "lzma", "rpm", "uu", "xz", "zstd")

# Magics that make a member worth opening as a nested archive. A compressor alone proves nothing:
# if libarchive finds no archive format after the filter, the member is a plain compressed file.
# Text can start with "BZh" or "070701": those magics must be followed by what the format puts there.
_COMPRESSOR_MAGICS = {
    re.compile(rb"\x1f\x8b\x08"): "gzip",
    re.compile(rb"BZh[1-9](?:\x31\x41\x59\x26\x53\x59|\x17\x72\x45\x38\x50\x90)"): "bzip2",
    re.compile(rb"\xfd7zXZ\x00"): "xz",
    re.compile(rb"\x28\xb5\x2f\xfd"): "zstd",
}
_ARCHIVE_MAGICS = {
    re.compile(rb"PK\x03\x04"): "zip",
    re.compile(rb"7z\xbc\xaf\x27\x1c"): "7z",
    re.compile(rb"070707[0-7]{70}"): "cpio",
    re.compile(rb"07070[12][0-9A-Fa-f]{104}"): "cpio",
    re.compile(rb"!<arch>\n"): "ar",
}
#: the first byte of every magic above (gzip, bzip2, xz, zstd; zip, 7z, cpio, ar)
_MAGIC_FIRST = frozenset(b"\x1fB\xfd\x28P70!")
_STATIC_LIBRARY_SUFFIXES = (".a", ".lib")

_OK, _EOF, _WARN, _FATAL = 0, 1, -20, -30
_TYPE_MASK = 0o170000
_REGULAR_TYPES = (0, 0o100000)  # 0: a mode without type bits (some ar and cpio writers store just 644)
_DIRECTORY, _SYMLINK = 0o040000, 0o120000
_SPECIAL_TYPES = {
    0o020000: "character device",
    0o060000: "block device",
    0o010000: "FIFO",
    0o140000: "socket",
}
_EMPTY = digest_bytes(b"")


def _function(name: str, restype: Any, *argtypes: Any) -> Any:
    # A fresh function object (CDLL.__getitem__ does not cache): libarchive-c's own prototypes and
    # error checks stay as they are, and these calls return their status instead of raising.
    function = ffi.libarchive["archive_" + name]
    function.restype = restype
    function.argtypes = argtypes
    return function


_c_p, _c_int = ctypes.c_void_p, ctypes.c_int
_read_next_header = _function("read_next_header", _c_int, _c_p, ctypes.POINTER(_c_p))
_read_data = _function("read_data", ctypes.c_ssize_t, _c_p, _c_p, ctypes.c_size_t)
_filter_bytes = _function("filter_bytes", ctypes.c_int64, _c_p, _c_int)
_error_string = _function("error_string", ctypes.c_char_p, _c_p)
_entry_pathname = _function("entry_pathname", ctypes.c_char_p, _c_p)
_entry_pathname_utf8 = _function("entry_pathname_utf8", ctypes.c_char_p, _c_p)
_entry_filetype = _function("entry_filetype", ctypes.c_uint, _c_p)
_entry_size = _function("entry_size", ctypes.c_int64, _c_p)
_entry_size_is_set = _function("entry_size_is_set", _c_int, _c_p)
_entry_symlink = _function("entry_symlink", ctypes.c_char_p, _c_p)
_entry_hardlink = _function("entry_hardlink", ctypes.c_char_p, _c_p)
_entry_symlink_utf8 = _function("entry_symlink_utf8", ctypes.c_char_p, _c_p)
_entry_hardlink_utf8 = _function("entry_hardlink_utf8", ctypes.c_char_p, _c_p)
_entry_is_data_encrypted = _function("entry_is_data_encrypted", _c_int, _c_p)
_entry_rdevmajor = _function("entry_rdevmajor", ctypes.c_uint64, _c_p)
_entry_rdevminor = _function("entry_rdevminor", ctypes.c_uint64, _c_p)
_read_header_position = _function("read_header_position", ctypes.c_int64, _c_p)
_format = _function("format", _c_int, _c_p)
_FORMAT_TAR = 0x30000  # ARCHIVE_FORMAT_TAR, under ARCHIVE_FORMAT_BASE_MASK 0xff0000


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
    cut before its walk, by ranges of its central directory (:mod:`dropscan.zipsplit`); a 7z or a
    compressor outside ``inflate.CODECS`` is not split.
    """

    stop: Callable[[Progress], bool]
    offset: int | None = None
    codec: str | None = None


class FanOut(Protocol):
    """Where nested archives of at least ``threshold`` bytes go instead of being unpacked in this walk."""

    threshold: int

    def hand_over(self, spool: IO[bytes], nested: Nested) -> None:
        """Take the archive (``spool``, read from the start) away; called once it is whole and unknown."""


class _Unrecognised(Exception):
    """libarchive found no archive format at the start of the input."""


class _Broken(Exception):
    """libarchive could not go on: ``fatal`` for the whole archive, else for the current member only."""

    def __init__(self, reason: str, fatal: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


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
    stands) receives what the walk used of the limits. ``split`` may end the walk of a tar early.
    """
    limits = limits or Limits()
    if max_depth is not None:
        limits = dataclasses.replace(limits, depth=max_depth)
    walker = _Walker(is_known, emit_containers, limits, spool_dir, fan_out, progress)
    walker.split = split
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
    rec = nested.record
    digest = Digest(rec.size, rec.sha256, rec.kw, rec.ws, Kind(rec.kind))
    spool.seek(0, os.SEEK_END)
    walker.spooled = spool.tell()
    # the archive's parent level is in the other walk: its ratio check stays there
    parent = _Level(None, "", nested.depth - 1, rec.size, 1 << 62)
    walker.fan_depth = nested.depth
    notes = rec.note.split("; ") if rec.note else []
    try:
        records = walker._nested(parent, spool, rec.path, digest, nested.fmt, notes)
        try:
            yield from records
        finally:
            records.close()
    finally:
        walker.report()


def tar_member_at(stream: IO[bytes], at: int) -> int | None:
    """Where the headers of the first member of a plain tar starting at or past byte ``at`` start.

    None for any other format (a compressed tar too), a tar libarchive cannot read that far, or one
    whose members all start before ``at``. libarchive reads the headers and seeks over the data.
    """
    stream.seek(0)
    try:
        reader, entry = _open(stream, seekable=True)
    except (_Unrecognised, _Broken):
        return None
    with reader:
        if _format(reader._p) & 0xFF0000 != _FORMAT_TAR or ffi.filter_count(reader._p) != 1:
            return None
        try:
            while entry is not None:
                start = int(_read_header_position(reader._p))
                if start >= at:
                    return start
                entry = reader.next_entry()
        except _Broken:
            return None
    return None


def check_spent(limits: Limits, spent: Progress) -> None:
    """LimitExceeded, worded as the walk words it, if ``spent`` is beyond ``limits``' totals."""
    if spent.members > limits.files:
        raise LimitExceeded(f"more than {limits.files:,} archive members")
    if spent.total > limits.total_bytes:
        raise LimitExceeded(f"more than {_size(limits.total_bytes)} unpacked")


def _size(count: int) -> str:
    for unit, factor in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if count >= factor and count % factor == 0:
            return f"{count // factor:,} {unit}"
    return f"{count:,} bytes"


class _Reader:
    """A libarchive read handle fed from a Python stream through callbacks.

    The stream is read with ``read(n)`` only, so any object with that method works; ``seek`` is
    offered to libarchive when the stream is seekable (zip then reads its central directory).
    Exceptions raised by the stream cannot cross the C frames: they are kept and re-raised in
    place of the error that libarchive then reports. ``high`` is the furthest source offset read so
    far: the size of the archive as far as it has been seen, however often libarchive seeks back.
    """

    def __init__(
        self,
        stream: Readable,
        *,
        seekable: bool,
        record: IO[bytes] | None = None,
        formats: Iterable[str] = _FORMATS,
    ) -> None:
        self._stream: Any = stream
        self.record = record  # receives every byte read, until the format is known
        self.seekable = seekable
        self.inflater = stream if isinstance(stream, PlainStream) else None
        self.high = 0
        self._position = 0
        self._in: ctypes.Array[ctypes.c_char] | None = ctypes.create_string_buffer(READ_BLOCK)
        self._in_address = ctypes.addressof(self._in)
        self._data: ctypes.Array[ctypes.c_char] | None = ctypes.create_string_buffer(READ_BLOCK)
        self._data_address = ctypes.addressof(self._data)
        self._entry = ctypes.c_void_p()
        self._error: BaseException | None = None
        # the ctypes callback objects must outlive the handle
        self._read_cb = ffi.READ_CALLBACK(self._read)
        self._seek_cb = ffi.SEEK_CALLBACK(self._seek)
        self._p = ffi.read_new()
        try:
            for filter_name in _FILTERS:
                _enable(ffi.get_read_filter_function, filter_name, self._p)
            for format_name in formats:
                _enable(ffi.get_read_format_function, format_name, self._p)
            if seekable:
                ffi.read_set_seek_callback(self._p, self._seek_cb)
            try:
                ffi.read_open(self._p, None, ffi.NO_OPEN_CB, self._read_cb, ffi.NO_CLOSE_CB)
            except ArchiveError as error:
                self._raise_stream_error()
                raise _Broken(_reason(error.msg), fatal=True) from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._p is not None:
            ffi.read_free(self._p)
            self._p = None
            # the callbacks hold bound methods, a cycle through self: break it so that the 2 MiB of
            # buffers go now, not at some later garbage collection (a drop may nest thousands of archives)
            self._read_cb = self._seek_cb = None
            self._in = self._data = None

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
        self._position += size
        self.high = max(self.high, self._position)
        return size

    def _seek(self, archive_p: int, context: int, offset: int, whence: int) -> int:
        try:
            self._position = int(self._stream.seek(offset, whence))
        except BaseException as error:
            self._error = error
            return _FATAL
        return self._position

    def _raise_stream_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _status(self, status: int) -> _Broken:
        self._raise_stream_error()
        return _Broken(_reason(_error_string(self._p)), fatal=status <= _FATAL)

    def next_entry(self) -> int | None:
        """The next entry (libarchive's entry pointer, valid until the next call), or None at the end."""
        status = _read_next_header(self._p, ctypes.byref(self._entry))
        if status == _EOF:
            return None
        if status in (_OK, _WARN):  # WARN: e.g. an unknown pax keyword; the entry itself is fine
            return cast(int, self._entry.value)
        # RETRY ("damaged tar archive": libarchive would skip ahead to the next header that looks
        # right) and FAILED leave the reader at no known place: a salvaged rest would hide the damage
        raise _Broken(self._status(status).reason, fatal=True)

    def read(self) -> bytes:
        """The next block of the current entry's data; empty at its end."""
        size = _read_data(self._p, self._data_address, READ_BLOCK)
        if size > 0:
            return ctypes.string_at(self._data_address, size)
        if size == 0:
            return b""
        raise self._status(size)  # WARN reaches here too: for data it means a bad checksum

    def consumed(self) -> int:
        """Bytes of the raw input libarchive's decompressors and readers have used so far."""
        if self.inflater is not None:
            return self.inflater.consumed()
        return int(_filter_bytes(self._p, -1))

    def single_filter(self) -> str | None:
        """The one decompressor libarchive put before the format, if that is all it did."""
        if ffi.filter_count(self._p) != 2:
            return None
        name = ffi.filter_name(self._p, 0)
        return name.decode() if isinstance(name, bytes) else name


def _enable(getter: Callable[[str], Any], name: str, archive_p: Any) -> None:
    with contextlib.suppress(ValueError):  # not built into this libarchive
        getter(name)(archive_p)


def _reason(msg: bytes | str | None) -> str:
    if isinstance(msg, bytes):
        msg = msg.decode("utf-8", "replace")
    return (msg or "damaged or truncated archive")[:200]


def _is_unrecognised(error: _Broken) -> bool:
    return error.reason.startswith("Unrecognized archive format")


def _raw_name(entry: int) -> bytes:
    # the bytes as the archive stores them (pax and zip's UTF-8 flag give UTF-8; others, whatever
    # the writer used): Names escapes what is not printable UTF-8
    raw = _entry_pathname(entry)
    if raw is None:
        raw = _entry_pathname_utf8(entry)
    return cast(bytes, raw or b"")


def compressor_of(head: bytes) -> str | None:
    """The compressor (gzip, bzip2, xz, zstd) whose stream ``head`` starts with, if any."""
    for magic, fmt in _COMPRESSOR_MAGICS.items():
        if magic.match(head):
            return fmt
    return None


def _nested_format(head: bytes, path: str) -> str | None:
    """The archive or compressor ``head`` starts with, if any."""
    if not head or head[0] not in _MAGIC_FIRST:  # most members, source text: nine regexes spared
        return "tar" if head[257:262] == b"ustar" else None
    fmt = compressor_of(head)
    if fmt is not None:
        return fmt
    for magic, fmt in _ARCHIVE_MAGICS.items():
        if magic.match(head):
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
    link: str | None = None,
    notes: Iterable[str] = (),
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
        link=link,
        note="; ".join(notes) or None,
    )


def _seekable(stream: Readable) -> bool:
    try:
        return bool(getattr(stream, "seekable", lambda: False)())
    except (OSError, ValueError):
        return False


class _Level:
    """One archive being read: the top-level upload (depth 0) or a spooled nested archive."""

    __slots__ = ("check_at", "depth", "expanded", "prefix", "reader", "size")

    reader: _Reader

    def __init__(self, reader: _Reader | None, prefix: str, depth: int, size: int | None, after: int) -> None:
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


class _Records:
    """The records of one nested archive until it is complete: in memory, then spilled to disk."""

    def __init__(self, spool_dir: str | None) -> None:
        self._spool_dir = spool_dir
        self._memory: list[FileRecord] = []
        self._disk: IO[bytes] | None = None
        self.count = 0

    def insert_first(self, record: FileRecord) -> None:
        self._memory.insert(0, record)
        self.count += 1

    def extend(self, records: Iterable[FileRecord]) -> None:
        for record in records:
            self.count += 1
            if len(self._memory) < RECORDS_IN_MEMORY:
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


class _Walker:
    def __init__(
        self,
        is_known: Callable[[str], bool],
        emit_containers: bool,
        limits: Limits,
        spool_dir: str | None,
        fan_out: FanOut | None = None,
        progress: Progress | None = None,
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
        self.split: Split | None = None

    def report(self) -> None:
        if self.progress is not None:
            self.progress.members, self.progress.total = self.members, self.total

    def _hands_over(self, level: _Level, spool: IO[bytes]) -> bool:
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
                    broken = _decompression_error(stream)
                else:
                    head.seek(0)
                    broken = _decompression_error(_Replay(head, stream))
                if broken is not None:
                    raise ArchiveReadError(broken)
                yield self._whole(stream, name, start, head)

    def _top_archive(
        self, stream: Readable, seekable: bool, head: IO[bytes] | None
    ) -> Generator[FileRecord, None, bool]:
        """Yield the records of ``stream`` as an archive; False if it is not one at all."""
        start = cast(IO[bytes], stream).tell() if seekable else 0
        try:
            reader, entry = _open(stream, seekable=seekable, record=head)
        except _Unrecognised:
            return False
        except _Broken as error:
            # libarchive bids on less than a format needs ("070701" opens text too): broken input that
            # does not even start like an archive is a plain file
            first = head or cast(IO[bytes], stream)
            first.seek(start if head is None else 0)
            if _nested_format(first.read(MAGIC_SPAN), "") is None:
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
                    source = _Replay(head, stream)
                inflater = plain_stream(source, codec, mode)
                reader, entry = _open(inflater, seekable=False)
            with reader:
                reader.record = None
                level = _Level(reader, "", 0, None, self.limits.ratio_after)
                while entry is not None:
                    yield from self._member(level, entry)
                    entry = reader.next_entry()
                    if entry is not None and split is not None and split.stop(self._progress()):
                        split.offset = int(_read_header_position(reader._p))
                        break
        except _Broken as error:
            raise ArchiveReadError(error.reason) from None
        except InflateError as error:
            raise ArchiveReadError(str(error)) from None
        finally:
            if inflater is not None:
                inflater.close()
        return True

    def _splittable(self, reader: _Reader) -> Split | None:
        """The split to honour, if the top level is a tar, plain or behind one compressor of CODECS."""
        split = self.split
        if split is None or _format(reader._p) & 0xFF0000 != _FORMAT_TAR:
            return None
        filters = ffi.filter_count(reader._p)
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
                raise LimitExceeded(f"upload larger than {_size(self.limits.total_bytes)}")
            digester.update(block)
        return _record(name, digester.finish())

    # ---------------------------------------------------------------- one member
    def _member(self, level: _Level, entry: int) -> Iterator[FileRecord]:
        """Records for one entry of an archive: none (a folder), one, or a nested tree."""
        self.members += 1
        if self.members > self.limits.files:
            check_spent(self.limits, self._progress())
        filetype = _entry_filetype(entry) & _TYPE_MASK
        if filetype == _DIRECTORY:
            return
        path, notes = self.names.place(level.prefix, _raw_name(entry))
        hardlink = _entry_hardlink(entry) or _entry_hardlink_utf8(entry)
        if filetype == _SYMLINK or (hardlink is None and filetype not in _REGULAR_TYPES):
            yield self._contentless(path, notes, entry, filetype)
            return
        kind, link = None, None
        if hardlink is not None:
            link, link_notes = Names.target(path, hardlink)
            kind, notes = Kind.HARDLINK, [*notes, *link_notes]
        declared = _entry_size(entry) if _entry_size_is_set(entry) else None
        if declared is not None and declared > self.limits.member_bytes:
            claim = f"{declared:,} bytes, over the {_size(self.limits.member_bytes)} limit"
            self._bomb(level, f"member {path} claims {claim}")
        if _entry_is_data_encrypted(entry):
            yield _record(path, _EMPTY, Kind.BINARY, unreadable="encrypted member: not read", notes=notes)
            return
        yield from self._content(level, path, kind, link, notes, declared)

    def _contentless(self, path: str, notes: list[str], entry: int, filetype: int) -> FileRecord:
        if filetype == _SYMLINK:
            # like names: the stored bytes, or UTF-8 when libarchive holds the target only as text
            raw = _entry_symlink(entry) or _entry_symlink_utf8(entry) or b""
            target, target_notes = Names.target(path, raw)
            return _record(path, _EMPTY, Kind.SYMLINK, link=target, notes=[*notes, *target_notes])
        what = _SPECIAL_TYPES.get(filetype, f"file of type {filetype:o}")
        if filetype in (0o020000, 0o060000):
            what += f" {_entry_rdevmajor(entry)},{_entry_rdevminor(entry)}"
        return _record(path, _EMPTY, Kind.SPECIAL, notes=[*notes, f"{what}: not read"])

    def _blocks(self, level: _Level, path: str, declared: int | None) -> Iterator[bytes]:
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
                self._bomb(level, f"member {path} is larger than {_size(limits.member_bytes)}")
            if out >= member_check:
                used = reader.consumed() - start
                if out > limits.ratio * used:
                    why = f"member {path} expands beyond {limits.ratio}x its compressed size"
                    self._bomb(level, "decompression bomb: " + why)
                member_check = max(limits.ratio * used, limits.ratio_after)
            if level.expanded > level.check_at:
                self._check_ratio(level)
            yield block

    def _check_ratio(self, level: _Level) -> None:
        """An archive level that expands beyond the ratio as a whole (many small bombs, or overlaps)."""
        limits = self.limits
        compressed = level.compressed()
        if level.expanded > limits.ratio_after and level.expanded > limits.ratio * compressed:
            what = "the upload" if level.depth == 0 else f"nested archive {level.prefix[:-2]}"
            self._bomb(level, f"decompression bomb: {what} expands beyond {limits.ratio}x its size")
        level.check_at = max(limits.ratio * compressed, limits.ratio_after)

    def _bomb(self, level: _Level, reason: str) -> None:
        if level.depth == 0:
            raise LimitExceeded(reason)
        raise _Bomb(reason, level.depth)

    def _content(
        self,
        level: _Level,
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
            fmt = None if kind is not None else _nested_format(head, path)
            if fmt is None:
                # most members are one block: digest it whole, no incremental digester
                more = next(blocks, None)
                if more is None:
                    yield _record(path, digest_bytes(head, path), kind, link=link, notes=notes)
                    return
                digester = Digester(path)
                digester.update(head)
                digester.update(more)
                for block in blocks:
                    digester.update(block)
                yield _record(path, digester.finish(), kind, link=link, notes=notes)
                return
        except _Broken as error:
            if error.fatal:
                raise
            if digester is None:
                digester = Digester(path)
                digester.update(head)
            yield _record(path, digester.finish(), kind, unreadable=error.reason, link=link, notes=notes)
            return
        digester = Digester(path)
        digester.update(head)
        yield from self._archive_member(level, path, blocks, digester, head, fmt, notes)

    def _archive_member(
        self,
        level: _Level,
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
            except _Broken as error:
                if error.fatal:
                    raise
                yield _record(path, digester.finish(), Kind.ARCHIVE, unreadable=error.reason, notes=notes)
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
                    f"nested archive beyond the {_size(self.limits.spool_bytes)} unpack space: not opened"
                )
            elif self.fan_out is not None and self._hands_over(level, spool):
                spool.seek(0)
                spent = Progress(self.members, self.total)
                record = _record(path, digest, notes=notes)  # the kind its bytes have, as _nested needs
                self.fan_out.hand_over(spool, Nested(record, fmt, level.depth + 1, self.members, spent))
                self.handed_over += 1
                return
            else:
                records = self._nested(level, spool, path, digest, fmt, notes)
        if known or unreadable is not None:
            yield _record(path, digest, Kind.ARCHIVE, unreadable=unreadable, notes=notes)
            return
        try:  # the spool is gone by now: only the records remain
            yield from records
        finally:
            records.close()

    def _unspool(self, spool: IO[bytes]) -> None:
        if not spool.closed:
            self.spooled -= spool.tell()

    # ---------------------------------------------------------------- nested archives
    def _nested(
        self, parent: _Level, spool: IO[bytes], path: str, digest: Digest, fmt: str, notes: list[str]
    ) -> _Records:
        """A nested archive: one record, or all its members (all or nothing, never half a tree)."""
        size = spool.tell()
        records = _Records(self.spool_dir)
        unreadable = None
        child = _Level(None, path + "!/", parent.depth + 1, size, self.limits.ratio_after)
        handed_over = self.handed_over
        try:
            spool.seek(0)
            self._unpack(child, spool, records)
        except _Unrecognised:
            records.close()
            if fmt in _COMPRESSOR_MAGICS.values():
                spool.seek(0)
                broken = _decompression_error(spool)
                # e.g. a gzipped man page: a plain file, unless it does not even decompress
                records.extend([_record(path, digest, unreadable=broken, notes=notes)])
            else:
                reason = "Unrecognized archive format"
                records.extend([_record(path, digest, Kind.ARCHIVE, unreadable=reason, notes=notes)])
        except _Broken as error:
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
            records.extend([_record(path, digest, Kind.ARCHIVE, unreadable=unreadable, notes=notes)])
        elif self.emit_containers:
            records.insert_first(_record(path, digest, Kind.ARCHIVE, container=True, notes=notes))
        try:
            if parent.expanded > parent.check_at:
                self._check_ratio(parent)
        except BaseException:
            records.close()
            raise
        return records

    def _unpack(self, child: _Level, spool: IO[bytes], records: _Records) -> None:
        child.reader, entry = _open(spool, seekable=True)
        with child.reader:
            while entry is not None:
                records.extend(self._member(child, entry))
                entry = child.reader.next_entry()


def _open(stream: Readable, *, seekable: bool, record: IO[bytes] | None = None) -> tuple[_Reader, int | None]:
    """A reader on ``stream`` and its first entry (None for an empty archive).

    libarchive settles the format in read_open or at the first header, depending on the input. A zip
    read through its central directory (seekable) that is damaged or lists nothing is read again from
    its local headers, as a stream: that is how the deployed pipeline reads uploads anyway.
    """
    start = cast(IO[bytes], stream).tell() if seekable else 0
    reader = None
    try:
        reader = _Reader(stream, seekable=seekable, record=record)
        entry = reader.next_entry()
    except _Broken as error:
        if reader is not None:
            reader.close()
        if _is_unrecognised(error):
            raise _Unrecognised from None
        if not (seekable and _zip_at(cast(IO[bytes], stream), start)):
            raise
        return _open(stream, seekable=False)
    except BaseException:
        if reader is not None:
            reader.close()
        raise
    if entry is None and seekable and _zip_at(cast(IO[bytes], stream), start):
        reader.close()
        return _open(stream, seekable=False)
    return reader, entry


def _decompression_error(stream: Readable) -> str | None:
    """Why input that holds no archive fails to decompress (at the start), or None if it does.

    libarchive reports "no format" alike for a compressed plain file and for one whose decompression
    breaks while it looks for a format (a bzip2 block is whole or nothing): read a first block again
    with the raw format to tell them apart. Compressor magics only; other input is not asked.
    """
    if not isinstance(stream, _Replay):
        head = cast(IO[bytes], stream).read(16)
        cast(IO[bytes], stream).seek(-len(head), os.SEEK_CUR)
    else:
        head = stream.peek(16)
    if compressor_of(head) is None:
        return None
    try:
        with _Reader(stream, seekable=False, formats=("raw",)) as reader:
            if reader.next_entry() is not None:
                reader.read()
    except _Broken as error:
        return error.reason
    return None


class _Replay:
    """Reads what ``head`` kept of a non-seekable stream, then the stream, keeping that in ``head`` too."""

    def __init__(self, head: IO[bytes], stream: Readable) -> None:
        self._head = head
        self._stream = stream
        self._position = 0

    def peek(self, size: int) -> bytes:
        self._head.seek(0)
        return self._head.read(size)

    def read(self, size: int = -1) -> bytes:
        self._head.seek(self._position)
        data = self._head.read(size)
        if not data:
            data = self._stream.read(size)
            self._head.write(data)
        self._position += len(data)
        return data


def _zip_at(stream: IO[bytes], start: int) -> bool:
    """True if a zip's first local header is at ``start``; the stream is left there."""
    stream.seek(start)
    magic = stream.read(4)
    stream.seek(start)
    return magic == b"PK\x03\x04"

"""The one binding to libarchive: ctypes prototypes, a reader fed from a Python stream, open and replay."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterable
from typing import IO, Any, cast

from dropscan.archive import native
from dropscan.archive.inflate import InflateError, InLine, PlainStream
from dropscan.archive.limits import MiB, Readable
from dropscan.archive.magic import MAGIC_SPAN, compressor_of

#: bytes asked of the source per read callback, and of libarchive per data read
READ_BLOCK = 1 * MiB

# Everything libarchive reads except "raw", "empty" and "mtree": mtree happily "recognises" plain text
# (and would open the local files it names), empty and raw would turn any input into an archive.
FORMATS = ("7zip", "ar", "cab", "cpio", "iso9660", "lha", "rar", "rar5", "tar", "warc", "xar", "zip")
# In-library decompressors only: lrzip, lzop and grzip would run external programs.
FILTERS = ("bzip2", "compress", "gzip", "lz4", "lzip", "lzma", "rpm", "uu", "xz", "zstd")

OK, EOF, WARN, FATAL = 0, 1, -20, -30
TYPE_MASK = 0o170000
REGULAR_TYPES = (0, 0o100000)  # 0: a mode without type bits (some ar and cpio writers store just 644)
DIRECTORY, SYMLINK = 0o040000, 0o120000
_FORMAT_TAR = 0x30000  # ARCHIVE_FORMAT_TAR, under ARCHIVE_FORMAT_BASE_MASK 0xff0000


def _library_path() -> str:
    """Where libarchive is: $LIBARCHIVE if set (an operator's choice), else the copy bundled with the
    deployment, else the system's (``archive.native``)."""
    path = os.environ.get("LIBARCHIVE") or native.libarchive_path()
    if not path:
        raise OSError("libarchive not found: install it (Debian: libarchive13) or set LIBARCHIVE to its path")
    return path


_lib = ctypes.CDLL(_library_path())


def _function(name: str, restype: Any, *argtypes: Any) -> Any:
    function = _lib["archive_" + name]
    function.restype = restype
    function.argtypes = argtypes
    return function


_c_p, _c_int = ctypes.c_void_p, ctypes.c_int
_READ_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_ssize_t, _c_p, _c_p, ctypes.POINTER(_c_p))
_SEEK_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_longlong, _c_p, _c_p, ctypes.c_longlong, _c_int)
_read_new = _function("read_new", _c_p)
_read_free = _function("read_free", _c_int, _c_p)
_read_set_seek_callback = _function("read_set_seek_callback", _c_int, _c_p, _SEEK_CALLBACK)
# the open and close callbacks are not used: NULL function pointers
_read_open = _function("read_open", _c_int, _c_p, _c_p, _c_p, _READ_CALLBACK, _c_p)
_read_next_header = _function("read_next_header", _c_int, _c_p, ctypes.POINTER(_c_p))
_read_data = _function("read_data", ctypes.c_ssize_t, _c_p, _c_p, ctypes.c_size_t)
_read_header_position = _function("read_header_position", ctypes.c_int64, _c_p)
_filter_bytes = _function("filter_bytes", ctypes.c_int64, _c_p, _c_int)
_filter_count = _function("filter_count", _c_int, _c_p)
_filter_name = _function("filter_name", ctypes.c_char_p, _c_p, _c_int)
_format = _function("format", _c_int, _c_p)
_error_string = _function("error_string", ctypes.c_char_p, _c_p)
# entries: called with the pointer Reader.next_entry returns, valid until the next call
entry_pathname = _function("entry_pathname", ctypes.c_char_p, _c_p)
entry_pathname_utf8 = _function("entry_pathname_utf8", ctypes.c_char_p, _c_p)
entry_filetype = _function("entry_filetype", ctypes.c_uint, _c_p)
entry_size = _function("entry_size", ctypes.c_int64, _c_p)
entry_size_is_set = _function("entry_size_is_set", _c_int, _c_p)
entry_symlink = _function("entry_symlink", ctypes.c_char_p, _c_p)
entry_hardlink = _function("entry_hardlink", ctypes.c_char_p, _c_p)
entry_symlink_utf8 = _function("entry_symlink_utf8", ctypes.c_char_p, _c_p)
entry_hardlink_utf8 = _function("entry_hardlink_utf8", ctypes.c_char_p, _c_p)
entry_is_data_encrypted = _function("entry_is_data_encrypted", _c_int, _c_p)
entry_rdevmajor = _function("entry_rdevmajor", ctypes.c_uint64, _c_p)
entry_rdevminor = _function("entry_rdevminor", ctypes.c_uint64, _c_p)


def _support(kind: str, name: str) -> Any:
    try:
        return _function(f"read_support_{kind}_{name}", _c_int, _c_p)
    except AttributeError:  # not built into this libarchive
        return None


_SUPPORT_FILTERS = [f for f in (_support("filter", name) for name in FILTERS) if f is not None]


def _has_bzlib() -> bool:
    try:
        return bool(_function("bzlib_version", ctypes.c_char_p)())
    except AttributeError:
        return True


#: A libarchive built without libbz2 (the bundled copy has none) runs ``bzip2 -d`` for each bzip2 stream:
#: its complaints land on our stderr (upstream BusyBox ships two broken .bz2 test inputs; a reader
#: closed early breaks its pipe) and a failure reads "Child process exited with status 2". The Reader
#: decompresses such streams in line instead (inflate.InLine), with the codec's own error.
BZIP2_IN_LINE = not _has_bzlib()
_SUPPORT_FORMATS = {name: _support("format", name) for name in (*FORMATS, "raw")}


class Unrecognised(Exception):
    """libarchive found no archive format at the start of the input."""


class Broken(Exception):
    """libarchive could not go on: ``fatal`` for the whole archive, else for the current member only."""

    def __init__(self, reason: str, fatal: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


class Reader:
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
        formats: Iterable[str] = FORMATS,
    ) -> None:
        self._stream: Any = stream
        self.record = record  # receives every byte read, until the format is known
        self.seekable = seekable
        self.inflater = stream if isinstance(stream, PlainStream) else None
        self._sniff = BZIP2_IN_LINE  # look at the first block for bzip2 (see BZIP2_IN_LINE)
        self._inline: InLine | None = None
        if seekable and BZIP2_IN_LINE and _bzip2_at(stream):
            self.seekable = seekable = False  # libarchive reads the plain bytes, which cannot seek
        self.high = 0
        self._position = 0
        self._in: ctypes.Array[ctypes.c_char] | None = ctypes.create_string_buffer(READ_BLOCK)
        self._in_address = ctypes.addressof(self._in)
        self._data: ctypes.Array[ctypes.c_char] | None = ctypes.create_string_buffer(READ_BLOCK)
        self._data_address = ctypes.addressof(self._data)
        self._entry = ctypes.c_void_p()
        self._error: BaseException | None = None
        # the ctypes callback objects must outlive the handle
        self._read_cb: Any = _READ_CALLBACK(self._read)
        self._seek_cb: Any = _SEEK_CALLBACK(self._seek)
        self._p = _read_new()
        if self._p is None:
            raise MemoryError("archive_read_new")
        try:
            for support in _SUPPORT_FILTERS:
                support(self._p)
            for format_name in formats:
                support = _SUPPORT_FORMATS.get(format_name)
                if support is not None:
                    support(self._p)
            if seekable:
                _read_set_seek_callback(self._p, self._seek_cb)
            status = _read_open(self._p, None, None, self._read_cb, None)
            if status < 0 and status != WARN:
                self._raise_stream_error()
                raise Broken(reason(_error_string(self._p)), fatal=True)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._inline is not None:
            self._inline.close()
        if self._p is not None:
            _read_free(self._p)
            self._p = None
            # the callbacks hold bound methods, a cycle through self: break it so that the 2 MiB of
            # buffers go now, not at some later garbage collection (a drop may nest thousands of archives)
            self._read_cb = self._seek_cb = None
            self._in = self._data = None

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, archive_p: int, context: int, ptrptr: Any) -> int:
        try:
            if self._inline is not None:
                data = self._inline.read(READ_BLOCK)
            else:
                data = self._raw(READ_BLOCK)
                if self._sniff:
                    self._sniff = False
                    if compressor_of(data[:MAGIC_SPAN]) == "bzip2":
                        self._inline = InLine(_Prefixed(data, self._raw), "bzip2")
                        data = self._inline.read(READ_BLOCK)
        except InflateError as error:
            self._error = Broken(str(error), fatal=True)
            return FATAL
        except BaseException as error:
            self._error = error
            return FATAL
        size = len(data)
        ctypes.memmove(self._in_address, data, size)
        ptrptr[0] = self._in_address
        return size

    def _raw(self, size: int) -> bytes:
        """The next bytes of the source, recorded while the format is unknown."""
        data = self._stream.read(size)
        if self.record is not None:
            self.record.write(data)
        self._position += len(data)
        self.high = max(self.high, self._position)
        return cast(bytes, data)

    def _seek(self, archive_p: int, context: int, offset: int, whence: int) -> int:
        try:
            self._position = int(self._stream.seek(offset, whence))
        except BaseException as error:
            self._error = error
            return FATAL
        return self._position

    def _raise_stream_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _status(self, status: int) -> Broken:
        self._raise_stream_error()
        return Broken(reason(_error_string(self._p)), fatal=status <= FATAL)

    def next_entry(self) -> int | None:
        """The next entry (libarchive's entry pointer, valid until the next call), or None at the end."""
        status = _read_next_header(self._p, ctypes.byref(self._entry))
        if status == EOF:
            return None
        if status in (OK, WARN):  # WARN: e.g. an unknown pax keyword; the entry itself is fine
            return cast(int, self._entry.value)
        # RETRY ("damaged tar archive": libarchive would skip ahead to the next header that looks
        # right) and FAILED leave the reader at no known place: a salvaged rest would hide the damage
        raise Broken(self._status(status).reason, fatal=True)

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
        if self._inline is not None:
            return self._inline.consumed()
        return int(_filter_bytes(self._p, -1))

    def filters(self) -> int:
        """How many filters libarchive put before the format ("none", the raw input, counts as one),
        a bzip2 stream decompressed in line counting as libarchive's would."""
        return int(_filter_count(self._p)) + (self._inline is not None)

    def single_filter(self) -> str | None:
        """The one decompressor libarchive put before the format, if that is all it did."""
        if self.filters() != 2:
            return None
        if self._inline is not None:
            return "bzip2"
        name = _filter_name(self._p, 0)
        return name.decode() if isinstance(name, bytes) else name

    def is_tar(self) -> bool:
        """Whether the format libarchive settled on is one of the tar formats."""
        return int(_format(self._p)) & 0xFF0000 == _FORMAT_TAR

    def header_position(self) -> int:
        """Where the current entry's headers start in the uncompressed input."""
        return int(_read_header_position(self._p))


class _Prefixed:
    """``first``, then the rest of a source: the block a reader sniffed, put back in front."""

    def __init__(self, first: bytes, read: Any) -> None:
        self._first = first
        self._read = read

    def read(self, size: int = -1) -> bytes:
        if self._first:
            data, self._first = self._first, b""
            return data
        return cast(bytes, self._read(size))


def _bzip2_at(stream: Readable) -> bool:
    """Whether a seekable stream holds a bzip2 stream from where it is (it is left there)."""
    s = cast(IO[bytes], stream)
    at = s.tell()
    head = s.read(MAGIC_SPAN)
    s.seek(at)
    return compressor_of(head) == "bzip2"


def reason(msg: bytes | str | None) -> str:
    """libarchive's error message, as records and errors carry it."""
    if isinstance(msg, bytes):
        msg = msg.decode("utf-8", "replace")
    return (msg or "damaged or truncated archive")[:200]


def raw_name(entry: int) -> bytes:
    """The entry's path as the archive stores it.

    pax and zip's UTF-8 flag give UTF-8; others, whatever the writer used: paths.Names escapes what
    is not printable UTF-8.
    """
    raw = entry_pathname(entry)
    if raw is None:
        raw = entry_pathname_utf8(entry)
    return cast(bytes, raw or b"")


def has_data(filetype: int, hardlink: bytes | None) -> bool:
    """Whether an entry (its type bits, its hard link target) is a file whose data is read."""
    return filetype != SYMLINK and (hardlink is not None or filetype in REGULAR_TYPES)


def open_reader(
    stream: Readable, *, seekable: bool, record: IO[bytes] | None = None
) -> tuple[Reader, int | None]:
    """A reader on ``stream`` and its first entry (None for an empty archive).

    libarchive settles the format in read_open or at the first header, depending on the input. A zip
    read through its central directory (seekable) that is damaged or lists nothing is read again from
    its local headers, as a stream: that is how the deployed pipeline reads uploads anyway.
    """
    start = cast(IO[bytes], stream).tell() if seekable else 0
    reader = None
    try:
        reader = Reader(stream, seekable=seekable, record=record)
        entry = reader.next_entry()
    except Broken as error:
        if reader is not None:
            reader.close()
        if error.reason.startswith("Unrecognized archive format"):
            raise Unrecognised from None
        if not (seekable and _zip_at(cast(IO[bytes], stream), start)):
            raise
        return open_reader(stream, seekable=False)
    except BaseException:
        if reader is not None:
            reader.close()
        raise
    if entry is None and seekable and _zip_at(cast(IO[bytes], stream), start):
        reader.close()
        return open_reader(stream, seekable=False)
    return reader, entry


def tar_member_at(stream: IO[bytes], at: int) -> int | None:
    """Where the headers of the first member of a plain tar starting at or past byte ``at`` start.

    None for any other format (a compressed tar too), a tar libarchive cannot read that far, or one
    whose members all start before ``at``. libarchive reads the headers and seeks over the data.
    """
    stream.seek(0)
    try:
        reader, entry = open_reader(stream, seekable=True)
    except (Unrecognised, Broken):
        return None
    with reader:
        if not reader.is_tar() or reader.filters() != 1:
            return None
        try:
            while entry is not None:
                start = reader.header_position()
                if start >= at:
                    return start
                entry = reader.next_entry()
        except Broken:
            return None
    return None


def decompression_error(stream: Readable) -> str | None:
    """Why input that holds no archive fails to decompress (at the start), or None if it does.

    libarchive reports "no format" alike for a compressed plain file and for one whose decompression
    breaks while it looks for a format (a bzip2 block is whole or nothing): read a first block again
    with the raw format to tell them apart. Compressor magics only; other input is not asked.
    """
    if not isinstance(stream, Replay):
        head = cast(IO[bytes], stream).read(16)
        cast(IO[bytes], stream).seek(-len(head), os.SEEK_CUR)
    else:
        head = stream.peek(16)
    if compressor_of(head) is None:
        return None
    try:
        with Reader(stream, seekable=False, formats=("raw",)) as reader:
            if reader.next_entry() is not None:
                reader.read()
    except Broken as error:
        return error.reason
    return None


class Replay:
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

"""Read chosen files out of a drop again, found by their SHA-256, for triage of the review set."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import libarchive
from libarchive.exception import ArchiveError

from dropscan.archive import MAGIC_SPAN, compressor_of
from dropscan.inflate import CODECS, InflateError, PlainStream, Source, plain_stream

#: triage reads at most this much of one file: licence headers and red flags sit near the top
CONTENT_LIMIT = 4 * 1024 * 1024
#: what a streamed read asks of the decompressed stream at a time (libarchive-c's default is a page)
READ_BLOCK = 1024 * 1024
#: nested archives are read into memory to look inside; bigger ones are left alone
NESTED_MEMORY_LIMIT = 256 * 1024 * 1024
_ARCHIVE_MAGICS = (
    b"\x1f\x8b",
    b"BZh",
    b"\xfd7zXZ\x00",
    b"\x28\xb5\x2f\xfd",
    b"PK\x03\x04",
    b"7z\xbc\xaf\x27\x1c",
    b"!<arch>\n",
)


@dataclass
class Extracted:
    """What triage gets back: content (up to CONTENT_LIMIT) keyed by SHA-256, and every file's SHA-1.

    SPDX 2.3 requires a SHA-1 per file; the unpack stage's hot path computes only SHA-256, so the
    triage stage, which reads the drop again anyway, computes it here (about 1.5 GB/s on one core).
    """

    content: dict[str, bytes] = field(default_factory=dict)
    sha1: dict[str, str] = field(default_factory=dict)
    truncated: set[str] = field(default_factory=set)
    bytes_read: int = 0


def _looks_like_archive(head: bytes) -> bool:
    return head.startswith(_ARCHIVE_MAGICS) or head[257:262] == b"ustar"


def _entries(reader: libarchive.read.ArchiveRead) -> Iterator[tuple[int | None, Iterator[bytes]]]:
    for entry in reader:
        if entry.isfile:
            yield entry.size, iter(entry.get_blocks())


def _take(
    blocks: Iterator[bytes], size: int | None, wanted: Mapping[str, int], sizes: set[int], out: Extracted
) -> bytes | None:
    """Read one member; keep it if its digest is wanted; return its bytes if it may be an archive."""
    sha = hashlib.sha256()
    sha1 = hashlib.sha1(usedforsecurity=False)
    kept: list[bytes] = []
    held = 0
    nested_ok = size is None or size <= NESTED_MEMORY_LIMIT
    keep_all = nested_ok
    first = True
    for block in blocks:
        sha.update(block)
        sha1.update(block)
        if first:
            keep_all = nested_ok and _looks_like_archive(block[:512])
            first = False
        if keep_all or (size in sizes and held < CONTENT_LIMIT):
            kept.append(block)
            held += len(block)
            if keep_all and held > NESTED_MEMORY_LIMIT:
                keep_all = False
    out.bytes_read += held
    data = b"".join(kept)
    digest = sha.hexdigest()
    out.sha1[digest] = sha1.hexdigest()
    if digest in wanted and digest not in out.content:
        out.content[digest] = data[:CONTENT_LIMIT]
        if wanted[digest] > CONTENT_LIMIT:
            out.truncated.add(digest)
    return data if keep_all else None


def _walk(reader: libarchive.read.ArchiveRead, wanted: Mapping[str, int], depth: int, out: Extracted) -> None:
    sizes = set(wanted.values())
    for size, blocks in _entries(reader):
        nested = _take(blocks, size, wanted, sizes, out)
        if nested is not None and depth > 0:
            try:
                with libarchive.memory_reader(nested) as inner:
                    _walk(inner, wanted, depth - 1, out)
            except ArchiveError:
                pass  # a compressed single file, or a corrupt one: the walker reported it already


class _Into:
    """``readinto`` over a stream that only has ``read`` (what libarchive-c's stream reader asks for)."""

    def __init__(self, stream: PlainStream) -> None:
        self._stream = stream

    def readinto(self, buf: Any) -> int:
        try:
            data = self._stream.read(len(buf))
        except InflateError:
            # a truncated or corrupt stream ends here: an exception cannot cross libarchive's C frames
            # (it would be printed and dropped), and the walk keeps what it read, as for any broken drop
            return 0
        ctypes.memmove(buf, data, len(data))  # slice assignment into a ctypes buffer goes byte by byte
        return len(data)

    def seekable(self) -> bool:
        return False


def compressed_contents(
    source: Source, codec: str, wanted: Mapping[str, int], *, max_depth: int = 8
) -> Extracted | None:
    """What :func:`contents_by_digest` reads, from a compressed archive ``source`` (``read`` only).

    It is decompressed beside the read (``inflate.plain_stream``: a forked decompressor with two cores)
    and read as a stream, so triage needs no copy of the drop on disk. None when nothing inside reads
    as an archive stream (a compressed single file, a 7z): read a copy of the file then.
    """
    out = Extracted()
    plain = plain_stream(source, codec)
    # not an archive, or broken part-way: what was read is kept, as contents_by_digest keeps it
    broken = contextlib.suppress(ArchiveError, InflateError)
    try:
        with broken, libarchive.stream_reader(_Into(plain), block_size=READ_BLOCK) as reader:
            _walk(reader, wanted, max_depth, out)
    finally:
        plain.close()
    return out if out.sha1 else None


@dataclass(frozen=True)
class SourceFailed:
    """The drop could not be read to its end (an S3 error): a result, so that it crosses the fork whole."""

    message: str


def streamed_contents(
    open_body: Callable[[], Source], codec: str, wanted: Mapping[str, int]
) -> Extracted | SourceFailed | None:
    """:func:`compressed_contents` of the body ``open_body`` opens: for a child forked to read the drop
    from S3 on a connection of its own while its parent goes on (loading the licence index holds the
    parent's GIL for a second; a thread there feeding this child would wait that long).

    A body that fails part-way is not a truncated archive: SourceFailed, not half a drop.
    """
    try:
        body = _Watched(open_body())
    except Exception as e:
        return SourceFailed(f"{type(e).__name__}: {e}")
    try:
        got = compressed_contents(body, codec, wanted)
    finally:
        body.close()
    if body.error is not None:
        return SourceFailed(f"{type(body.error).__name__}: {body.error}")
    return got


class _Watched:
    """A body whose failure is kept and read as its end, so that the walk stops (the caller tells it)."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self.error: BaseException | None = None

    def read(self, size: int = -1, /) -> bytes:
        if self.error is not None:
            return b""
        try:
            data: bytes = self._body.read(size)
        except Exception as e:
            self.error = e
            return b""
        return data

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._body.close()


def contents_by_digest(path: str, wanted: Mapping[str, int], *, max_depth: int = 8) -> Extracted:
    """The bytes of every file of the drop at ``path`` whose SHA-256 is in ``wanted`` (sha -> size)."""
    with open(path, "rb") as f:
        codec = compressor_of(f.read(MAGIC_SPAN))
    if codec in CODECS:
        # decompressed by dropscan.inflate, as a streamed drop is: libarchive 3.8's filter bidding reads
        # ahead far enough to fail a truncated .tar.gz before its first member (3.6 read the members)
        with open(path, "rb") as f:
            streamed = compressed_contents(f, codec, wanted, max_depth=max_depth)
        if streamed is not None:
            return streamed
    out = Extracted()
    try:
        with libarchive.file_reader(path) as reader:
            _walk(reader, wanted, max_depth, out)
    except ArchiveError:
        pass  # a broken archive: keep what was read; the scan's manifest says where it broke
    if not out.sha1:
        size = os.path.getsize(path)
        with open(path, "rb") as f:  # a non-archive upload is one file: itself
            _take(iter(lambda: f.read(1 << 20), b""), size, wanted, {size}, out)
    return out

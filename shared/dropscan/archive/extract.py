"""Read chosen files out of a drop again, found by their SHA-256, for triage of the review set."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from dropscan.archive.binding import (
    DIRECTORY,
    TYPE_MASK,
    Broken,
    Reader,
    Unrecognised,
    entry_filetype,
    entry_hardlink,
    entry_hardlink_utf8,
    entry_is_data_encrypted,
    entry_size,
    entry_size_is_set,
    has_data,
    open_reader,
)
from dropscan.archive.inflate import CODECS, InflateError, Source, plain_stream
from dropscan.archive.limits import Readable
from dropscan.archive.magic import MAGIC_SPAN, compressor_of, looks_like_archive

#: triage reads at most this much of one file: licence headers and red flags sit near the top
CONTENT_LIMIT = 4 * 1024 * 1024
#: nested archives are read into memory to look inside; bigger ones are left alone
NESTED_MEMORY_LIMIT = 256 * 1024 * 1024


@dataclass
class Extracted:
    """What triage gets back: content (up to CONTENT_LIMIT) keyed by SHA-256, and every file's SHA-1.

    SPDX 2.3 requires a SHA-1 per file; the unpack stage's hot path computes only SHA-256, so the
    triage stage, which reads the drop again anyway, computes it here (cheap beside the read itself).
    """

    content: dict[str, bytes] = field(default_factory=dict)
    sha1: dict[str, str] = field(default_factory=dict)
    truncated: set[str] = field(default_factory=set)
    bytes_read: int = 0
    #: given every wanted content read whole; True keeps it in ``content`` too (an ingest packs them)
    sink: Callable[[str, bytes], bool] | None = field(default=None, repr=False, compare=False)


def _entries(reader: Reader, entry: int | None) -> Iterator[tuple[int | None, Iterator[bytes]]]:
    """The files the walker reads (regular files and hard links, encrypted ones left out) and their data."""
    while entry is not None:
        filetype = entry_filetype(entry) & TYPE_MASK
        hardlink = entry_hardlink(entry) or entry_hardlink_utf8(entry)
        if filetype != DIRECTORY and has_data(filetype, hardlink) and not entry_is_data_encrypted(entry):
            yield (entry_size(entry) if entry_size_is_set(entry) else None), _blocks(reader)
        entry = reader.next_entry()


def _blocks(reader: Reader) -> Iterator[bytes]:
    """The current entry's data; a member that breaks ends there, as the walker's record of it does."""
    try:
        while block := reader.read():
            yield block
    except Broken as error:
        if error.fatal:
            raise


def _take(
    blocks: Iterator[bytes],
    size: int | None,
    wanted: Mapping[str, int],
    sizes: set[int],
    out: Extracted,
    caps: Mapping[str, int] | None = None,
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
            keep_all = nested_ok and looks_like_archive(block[:512])
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
        whole = wanted[digest] <= CONTENT_LIMIT
        if out.sink is None or not whole or out.sink(digest, data):
            out.content[digest] = data[: (caps or {}).get(digest, CONTENT_LIMIT)]
        if not whole:
            out.truncated.add(digest)
    return data if keep_all else None


def _walk(
    stream: Readable,
    seekable: bool,
    wanted: Mapping[str, int],
    depth: int,
    out: Extracted,
    caps: Mapping[str, int] | None = None,
) -> None:
    """Read every file of the archive in ``stream``, and of archives nested in it ``depth`` levels deep.

    Not an archive, or broken part-way: what was read is kept (the walker's manifest says where it broke).
    """
    try:
        reader, entry = open_reader(stream, seekable=seekable)
    except (Unrecognised, Broken):
        return  # a compressed single file, or a corrupt one: the walker reported it already
    sizes = set(wanted.values())
    with reader, contextlib.suppress(Broken):
        for size, blocks in _entries(reader, entry):
            nested = _take(blocks, size, wanted, sizes, out, caps)
            if nested is not None and depth > 0:
                _walk(io.BytesIO(nested), True, wanted, depth - 1, out, caps)


def compressed_contents(
    source: Source,
    codec: str,
    wanted: Mapping[str, int],
    *,
    max_depth: int = 8,
    caps: Mapping[str, int] | None = None,
    sink: Callable[[str, bytes], bool] | None = None,
) -> Extracted | None:
    """What :func:`contents_by_digest` reads, from a compressed archive ``source`` (``read`` only).

    It is decompressed beside the read (``inflate.plain_stream``: a forked decompressor with two cores)
    and read as a stream, so triage needs no copy of the drop on disk. None when nothing inside reads
    as an archive stream (a compressed single file, a 7z): read a copy of the file then.
    """
    out = Extracted(sink=sink)
    plain = plain_stream(source, codec)
    try:
        _walk(_EndsAtBreak(plain), False, wanted, max_depth, out, caps)
    finally:
        plain.close()
    out.sink = None  # what goes back from a forked child is pickled
    return out if out.sha1 else None


class _EndsAtBreak:
    """A decompressed stream that ends where its compressed input breaks (truncated or corrupt): the
    archive reader then keeps the members before the break, as it does reading a copy on disk, where a
    raised error would fail the open (libarchive 3.8 bids on the formats with a read-ahead)."""

    def __init__(self, plain: Readable) -> None:
        self._plain = plain

    def read(self, size: int = -1, /) -> bytes:
        try:
            return self._plain.read(size)
        except InflateError:
            return b""


@dataclass(frozen=True)
class SourceFailed:
    """The drop could not be read to its end (an S3 error): a result, so that it crosses the fork whole."""

    message: str


def streamed_contents(
    open_body: Callable[[], Source],
    codec: str,
    wanted: Mapping[str, int],
    caps: Mapping[str, int] | None = None,
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
        got = compressed_contents(body, codec, wanted, caps=caps)
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


def contents_by_digest(
    path: str,
    wanted: Mapping[str, int],
    *,
    max_depth: int = 8,
    caps: Mapping[str, int] | None = None,
    sink: Callable[[str, bytes], bool] | None = None,
) -> Extracted:
    """The bytes of every file of the drop at ``path`` whose SHA-256 is in ``wanted`` (sha -> size),
    at most CONTENT_LIMIT of each, or what ``caps`` allows it (sha -> bytes)."""
    with open(path, "rb") as f:
        codec = compressor_of(f.read(MAGIC_SPAN))
    if codec in CODECS:
        # decompressed by archive.inflate, as a streamed drop is: libarchive 3.8's filter bidding reads
        # ahead far enough to fail a truncated .tar.gz before its first member (3.6 read the members)
        with open(path, "rb") as f:
            streamed = compressed_contents(f, codec, wanted, max_depth=max_depth, caps=caps, sink=sink)
        if streamed is not None:
            return streamed
    out = Extracted(sink=sink)
    with open(path, "rb") as stream:
        _walk(stream, True, wanted, max_depth, out, caps)
    if not out.sha1:
        size = os.path.getsize(path)
        with open(path, "rb") as f:  # a non-archive upload is one file: itself
            _take(iter(lambda: f.read(1 << 20), b""), size, wanted, {size}, out, caps)
    out.sink = None
    return out

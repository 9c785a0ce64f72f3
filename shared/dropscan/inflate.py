"""Decompression on a thread of its own: gzip, bzip2 or xz streams, so the archive walk uses a second core."""

from __future__ import annotations

import bz2
import contextlib
import lzma
import queue
import threading
import zlib
from typing import Any, Protocol

__all__ = ["CODECS", "InflateError", "Inflater"]

#: compressed bytes read per step: small, so that the position handed to the ratio checks stays exact
#: enough for bz2 and xz (zlib reports its own consumption exactly)
READ_IN = 16 * 1024
#: plain bytes produced per step, and steps queued ahead of the reader: at most 8 MiB in flight
CHUNK_OUT = 1024 * 1024
QUEUED = 8


class Source(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class InflateError(Exception):
    """The compressed stream is truncated or corrupt; the message says which."""


class _Zlib:
    """zlib's decompressobj behind the needs_input/eof interface of bz2's and lzma's decompressors."""

    magic = b"\x1f\x8b"

    def __init__(self) -> None:
        self._d = zlib.decompressobj(31)

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def needs_input(self) -> bool:
        return not self._d.unconsumed_tail

    @property
    def unused_data(self) -> bytes:
        return self._d.unused_data

    def pending(self) -> int:
        return len(self._d.unconsumed_tail)

    def decompress(self, data: bytes, max_length: int) -> bytes:
        return self._d.decompress(self._d.unconsumed_tail or data, max_length)


class _Buffered:
    """bz2 and lzma decompressors: they keep unread input inside, so ``pending`` is unknown (0)."""

    def __init__(self, decompressor: Any, magic: bytes) -> None:
        self._d = decompressor
        self.magic = magic

    @property
    def eof(self) -> bool:
        return bool(self._d.eof)

    @property
    def needs_input(self) -> bool:
        return bool(self._d.needs_input)

    @property
    def unused_data(self) -> bytes:
        return bytes(self._d.unused_data)

    def pending(self) -> int:
        return 0

    def decompress(self, data: bytes, max_length: int) -> bytes:
        return bytes(self._d.decompress(data, max_length))


CODECS: dict[str, Any] = {
    "gzip": _Zlib,
    "bzip2": lambda: _Buffered(bz2.BZ2Decompressor(), b"BZh"),
    "xz": lambda: _Buffered(lzma.LZMADecompressor(lzma.FORMAT_XZ), b"\xfd7zXZ\x00"),
}
_ERRORS = (zlib.error, OSError, lzma.LZMAError, EOFError, ValueError)


class Inflater:
    """A readable stream of the plain bytes of a compressed ``source``, decompressed in a thread.

    The stdlib decompressors let go of the GIL while they work, so decompression runs beside the
    reader. ``consumed()`` is how much of the compressed input went into the plain bytes read so far
    (the compression-ratio checks need it). Memory stays bounded: QUEUED chunks of CHUNK_OUT bytes.
    Concatenated streams (pigz, pbzip2, pixz) are read on; trailing bytes that start no new stream end it.
    """

    def __init__(self, source: Source, codec: str) -> None:
        self._source = source
        self._codec = codec
        self._queue: queue.Queue[tuple[bytes, int] | BaseException | None] = queue.Queue(QUEUED)
        self._stop = threading.Event()
        self._chunk = memoryview(b"")
        self._position = 0
        self._consumed = 0
        self._done = False
        self._thread = threading.Thread(target=self._run, name=f"inflate-{codec}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the decompressing thread
    def _put(self, item: tuple[bytes, int] | BaseException | None) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            self._inflate()
        except _ERRORS as error:
            self._put(InflateError(f"{self._codec} decompression failed: {error}"))
        except BaseException as error:  # the source's own failure (a reset connection...) goes through
            self._put(error)

    def _inflate(self) -> None:
        decompressor = CODECS[self._codec]()
        fed = 0
        data = b""
        while not self._stop.is_set():
            if decompressor.needs_input and not data:
                data = self._source.read(READ_IN)
                if not data:
                    if not decompressor.eof:
                        raise InflateError(f"truncated {self._codec} input")
                    self._put(None)
                    return
                fed += len(data)
            out = decompressor.decompress(data, CHUNK_OUT)
            data = b""
            if out and not self._put((out, fed - decompressor.pending())):
                return
            if decompressor.eof:
                rest = decompressor.unused_data
                if not rest:
                    rest = self._source.read(READ_IN)
                    fed += len(rest)
                if not rest.startswith(decompressor.magic):
                    self._put(None)  # the end, or trailing bytes that start no new stream
                    return
                decompressor = CODECS[self._codec]()
                data = rest

    # ------------------------------------------------------------------ the reading side
    def read(self, size: int = -1) -> bytes:
        while self._position >= len(self._chunk):
            if self._done:
                return b""
            item = self._queue.get()
            if item is None:
                self._done = True
                return b""
            if isinstance(item, BaseException):
                self._done = True
                raise item
            self._chunk, self._consumed = memoryview(item[0]), item[1]
            self._position = 0
        end = len(self._chunk) if size < 0 else self._position + size
        block = self._chunk[self._position : end]
        self._position += len(block)
        return bytes(block)

    def consumed(self) -> int:
        return self._consumed

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=0.05)
        self._thread.join()

"""Decompression beside the archive walk: gzip, bzip2 or xz streams, in a forked process or a thread."""

from __future__ import annotations

import bz2
import contextlib
import lzma
import mmap
import os
import queue
import signal
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from dropscan.archive import xz

__all__ = [
    "CODECS",
    "ForkedInflater",
    "InLine",
    "InflateError",
    "Inflater",
    "PlainStream",
    "inflate_mode",
    "plain_stream",
]

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


def _xz() -> Any:
    """liblzma's threads where there are cores for them, else the stdlib's one-core decoder."""
    threads = xz.decoder_threads()
    if threads > 1 and xz.available():
        return xz.ThreadedXz(threads)
    return _Buffered(lzma.LZMADecompressor(lzma.FORMAT_XZ), xz.ThreadedXz.magic)


CODECS: dict[str, Any] = {
    "gzip": _Zlib,
    "bzip2": lambda: _Buffered(bz2.BZ2Decompressor(), b"BZh"),
    "xz": _xz,
}
_ERRORS = (zlib.error, OSError, lzma.LZMAError, EOFError, ValueError)


def _steps(read: Callable[[int], bytes], codec: str) -> Iterator[tuple[bytes, int]]:
    """(plain bytes, compressed bytes they used up) of the stream ``read`` returns, step by step.

    Concatenated streams (pigz, pbzip2, pixz) are read on; trailing bytes that start no new stream
    end it. InflateError when the input is truncated or corrupt.
    """
    decompressor = CODECS[codec]()
    fed = 0
    data = b""
    while True:
        if decompressor.needs_input and not data:
            data = read(READ_IN)
            if not data:
                if not decompressor.eof:
                    raise InflateError(f"truncated {codec} input")
                return
            fed += len(data)
        try:
            out = decompressor.decompress(data, CHUNK_OUT)
        except _ERRORS as error:
            raise InflateError(f"{codec} decompression failed: {error}") from None
        data = b""
        if out:
            yield out, fed - decompressor.pending()
        if decompressor.eof:
            rest = decompressor.unused_data
            if not rest:
                rest = read(READ_IN)
                fed += len(rest)
            if not rest.startswith(decompressor.magic):
                return  # the end, or trailing bytes that start no new stream
            decompressor = CODECS[codec]()
            data = rest


class PlainStream:
    """The plain bytes of a compressed source, as a readable stream decompressed beside its reader.

    ``consumed()`` is how much of the compressed input went into the plain bytes read so far (the
    compression-ratio checks need it). Memory stays bounded: a few CHUNK_OUT steps in flight.
    """

    def read(self, size: int = -1) -> bytes:
        raise NotImplementedError

    def consumed(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class InLine(PlainStream):
    """Decompression in the reader's own thread, step by step: for a libarchive built without the codec,
    which would otherwise run an external program (its stderr on ours, its exit status for a reason)."""

    def __init__(self, source: Source, codec: str) -> None:
        self._steps = _steps(source.read, codec)
        self._chunk = memoryview(b"")
        self._consumed = 0

    def read(self, size: int = -1) -> bytes:
        while not self._chunk:
            step = next(self._steps, None)
            if step is None:
                return b""
            self._chunk, self._consumed = memoryview(step[0]), step[1]
        block = self._chunk if size < 0 else self._chunk[:size]
        self._chunk = self._chunk[len(block) :]
        return bytes(block)

    def consumed(self) -> int:
        return self._consumed

    def close(self) -> None:
        self._steps = iter(())  # the generator and what it holds go now


class Inflater(PlainStream):
    """Decompression in a thread: the stdlib decompressors let go of the GIL while they work.

    The thread still needs the GIL between steps, so it waits on a busy walk: a forked process
    (:class:`ForkedInflater`) does not.
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
            for step in _steps(self._source.read, self._codec):
                if not self._put(step):
                    return
            self._put(None)
        except BaseException as error:  # the source's own failure (a reset connection...) goes through
            self._put(error)

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


# a frame from the forked decompressor: ring slot, signed length (0 the end, negative the length of
# an error message that follows in the pipe), compressed bytes consumed
_FRAME = struct.Struct("<iqQ")
#: compressed bytes the parent reads from its source per step (the child reads READ_IN at a time)
FEED_IN = 256 * 1024


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, size: int) -> bytes:
    parts: list[bytes] = []
    while size:
        part = os.read(fd, size)
        if not part:
            raise EOFError
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def _child(packed: int, filled: int, freed: int, ring: mmap.mmap, codec: str) -> None:
    """The forked decompressor: compressed bytes in on ``packed``, plain steps out through ``ring``.

    Each step goes into a free slot of the shared ring and its frame down ``filled``; the parent
    hands a slot back on ``freed`` once read. All slots taken means the parent is QUEUED steps behind.
    """
    free = list(range(QUEUED))
    consumed = 0
    try:
        for out, consumed in _steps(lambda n: os.read(packed, n), codec):
            if not free:
                free.append(_read_exact(freed, 1)[0])
            slot = free.pop()
            ring[slot * CHUNK_OUT : slot * CHUNK_OUT + len(out)] = out
            _write_all(filled, _FRAME.pack(slot, len(out), consumed))
        _write_all(filled, _FRAME.pack(0, 0, consumed))
    except InflateError as error:
        message = str(error).encode()
        _write_all(filled, _FRAME.pack(0, -len(message), consumed) + message)


class ForkedInflater(PlainStream):
    """Decompression in a forked process: it has a GIL of its own, so it never waits on the walk.

    A thread of the parent feeds it the compressed source through a pipe (reading the source and
    writing the pipe mostly happen without the GIL). The plain bytes come back through a ring of
    QUEUED slots in anonymous shared memory (``mmap``, not /dev/shm, which Lambda lacks): a pipe
    would copy every plain byte twice more. The child runs nothing but the decompressor loop
    and leaves with ``os._exit``: no handlers, no flushing of the parent's buffers.
    """

    def __init__(self, source: Source, codec: str) -> None:
        self._source = source
        self._codec = codec
        self._chunk = memoryview(b"")
        self._slot: int | None = None
        self._position = 0
        self._consumed = 0
        self._done = False
        self._feed_error: BaseException | None = None
        self._ring = mmap.mmap(-1, QUEUED * CHUNK_OUT)  # MAP_SHARED: the child writes what we read
        if codec == "xz":
            xz.available()  # liblzma loaded here: not by the child, after a fork of a threaded parent
        packed_r, packed_w = os.pipe()
        filled_r, filled_w = os.pipe()
        freed_r, freed_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            status = 0
            try:
                for fd in (packed_w, filled_r, freed_w):
                    os.close(fd)
                _child(packed_r, filled_w, freed_r, self._ring, codec)
            except BaseException:  # the parent closed its ends (it stopped reading): nothing to tell
                status = 1
            finally:
                os._exit(status)
        for fd in (packed_r, filled_w, freed_r):
            os.close(fd)
        self._pid = pid
        self._filled = filled_r
        self._freed = freed_w
        self._packed = packed_w
        self._feeder = threading.Thread(target=self._feed, name=f"inflate-feed-{codec}", daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        try:
            while data := self._source.read(FEED_IN):
                _write_all(self._packed, data)
        except BrokenPipeError:
            pass  # the child is done (trailing bytes after the last stream) or was stopped
        except BaseException as error:  # the source's own failure goes through, as with the thread
            self._feed_error = error
        finally:
            with contextlib.suppress(OSError):
                os.close(self._packed)

    def _next_frame(self) -> bool:
        if self._slot is not None:
            self._chunk = memoryview(b"")
            with contextlib.suppress(BrokenPipeError):  # the child may have sent its last step
                _write_all(self._freed, bytes((self._slot,)))
            self._slot = None
        try:
            slot, length, consumed = _FRAME.unpack(_read_exact(self._filled, _FRAME.size))
            message = _read_exact(self._filled, -length) if length < 0 else b""
        except EOFError:
            self._done = True
            self._raise_feed_error()
            raise InflateError(f"{self._codec} decompressor ended without a word") from None
        self._consumed = consumed
        if length > 0:
            self._slot, self._position = slot, 0
            self._chunk = memoryview(self._ring)[slot * CHUNK_OUT : slot * CHUNK_OUT + length]
            return True
        self._done = True
        self._raise_feed_error()  # a source that failed looks like a truncated stream to the child
        if length < 0:
            raise InflateError(message.decode(errors="replace"))
        return False

    def _raise_feed_error(self) -> None:
        self._feeder.join()
        if self._feed_error is not None:
            raise self._feed_error

    def read(self, size: int = -1) -> bytes:
        while self._position >= len(self._chunk):
            if self._done or not self._next_frame():
                return b""
        end = len(self._chunk) if size < 0 else self._position + size
        block = self._chunk[self._position : end]
        self._position += len(block)
        return bytes(block)

    def consumed(self) -> int:
        return self._consumed

    def close(self) -> None:
        if self._pid == 0:
            return
        for fd in (self._filled, self._freed):
            with contextlib.suppress(OSError):
                os.close(fd)  # a child still writing gets EPIPE and leaves
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)  # or is stopped, wherever it is
        os.waitpid(self._pid, 0)
        self._pid = 0
        self._feeder.join()  # its next write fails now that the child is gone
        self._chunk.release()
        self._ring.close()


def inflate_mode() -> str:
    """How a top-level gzip, bzip2 or xz stream is decompressed: "process", "thread" or "off".

    Beside the walk it pays only with a second core free: with one (a Lambda function under 1,769 MB,
    or a busy machine) the hand-over costs more CPU than it saves. A forked process has a GIL of its
    own; a thread waits for the walk's GIL between steps (figures in docs/design.md). DROPSCAN_INFLATE
    decides; by default "process" with two or more usable cores (and fork), else "off" (libarchive
    decompresses in line).
    """
    setting = os.environ.get("DROPSCAN_INFLATE")
    if setting in ("process", "thread", "off"):
        return setting if setting != "process" or hasattr(os, "fork") else "thread"
    if len(os.sched_getaffinity(0)) < 2:
        return "off"
    return "process" if hasattr(os, "fork") else "thread"


def plain_stream(source: Source, codec: str, mode: str | None = None) -> PlainStream:
    """The plain bytes of ``source`` decompressed beside the reader: forked where ``mode`` allows."""
    if (mode or inflate_mode()) == "process":
        return ForkedInflater(source, codec)
    return Inflater(source, codec)

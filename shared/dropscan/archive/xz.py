"""liblzma's multi-threaded .xz decoder through ctypes: the stdlib's lzma decodes on one core only."""

from __future__ import annotations

import ctypes
import functools
import lzma
import os
import weakref
from typing import Any

from dropscan.archive import native
from dropscan.forked import usable_cpus

__all__ = ["ThreadedXz", "available", "decoder_threads"]

#: liblzma 5.4.0 (stable) brought lzma_stream_decoder_mt
_MT_SINCE = 50040002
#: memory the decoder's threads may hold (each: a block's input and output buffers and its
#: dictionary); past it liblzma decodes on fewer threads, down to one, and never fails for it.
#: A Debian kernel tarball's blocks (xz -T: 24 MiB plain each) need about 35 MiB a thread.
MEMLIMIT_THREADING = 128 * 1024 * 1024
_NO_LIMIT = (1 << 64) - 1

# liblzma's return codes, and the words the stdlib's lzma module uses for the errors among them
_OK, _STREAM_END, _BUF_ERROR = 0, 1, 10
_ERRORS = {
    5: "Memory error",
    6: "Memory usage limit exceeded",
    7: "Input format not supported by decoder",
    8: "Invalid or unsupported options",
    9: "Corrupt input data",
    11: "Internal error",
}


class _Stream(ctypes.Structure):
    """lzma_stream (base.h): unchanged in layout since liblzma 5.0."""

    _fields_ = [
        ("next_in", ctypes.c_void_p),
        ("avail_in", ctypes.c_size_t),
        ("total_in", ctypes.c_uint64),
        ("next_out", ctypes.c_void_p),
        ("avail_out", ctypes.c_size_t),
        ("total_out", ctypes.c_uint64),
        ("allocator", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
        ("reserved_ptr", ctypes.c_void_p * 4),
        ("seek_pos", ctypes.c_uint64),
        ("reserved_int2", ctypes.c_uint64),
        ("reserved_int3", ctypes.c_size_t),
        ("reserved_int4", ctypes.c_size_t),
        ("reserved_enum", ctypes.c_int * 2),
    ]


class _Mt(ctypes.Structure):
    """lzma_mt (container.h), the decoder's fields set, the encoder's left zero."""

    _fields_ = [
        ("flags", ctypes.c_uint32),
        ("threads", ctypes.c_uint32),
        ("block_size", ctypes.c_uint64),
        ("timeout", ctypes.c_uint32),
        ("preset", ctypes.c_uint32),
        ("filters", ctypes.c_void_p),
        ("check", ctypes.c_int),
        ("reserved_enum", ctypes.c_int * 3),
        ("reserved_int", ctypes.c_uint32 * 4),
        ("memlimit_threading", ctypes.c_uint64),
        ("memlimit_stop", ctypes.c_uint64),
        ("reserved_int78", ctypes.c_uint64 * 2),
        ("reserved_ptr", ctypes.c_void_p * 4),
    ]


@functools.cache
def _liblzma() -> Any:
    """liblzma if one with the multi-threaded decoder is found (native.liblzma_path), else None."""
    name = native.liblzma_path(_MT_SINCE)
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)  # ctypes lets go of the GIL for each call
        if lib.lzma_version_number() < _MT_SINCE:
            return None
        lib.lzma_stream_decoder_mt.argtypes = [ctypes.POINTER(_Stream), ctypes.POINTER(_Mt)]
        lib.lzma_code.argtypes = [ctypes.POINTER(_Stream), ctypes.c_int]
        lib.lzma_end.argtypes = [ctypes.POINTER(_Stream)]
        lib.lzma_end.restype = None
    except (OSError, AttributeError):
        return None
    return lib


def decoder_threads() -> int:
    """Threads to decode on: DROPSCAN_XZ_THREADS, else the usable cores; 1 leaves it to the stdlib."""
    setting = os.environ.get("DROPSCAN_XZ_THREADS", "")
    if setting.isdigit() and int(setting) > 0:
        return int(setting)
    return usable_cpus()


def available() -> bool:
    """Whether ThreadedXz can run here (liblzma 5.4 or later, found by ctypes).

    Load it before forking: a child should not dlopen while another thread of its parent might
    have held the loader's lock at the fork.
    """
    return _liblzma() is not None


class ThreadedXz:
    """One .xz stream decoded by liblzma's threads, with the interface of the stdlib decompressors.

    Blocks whose headers give their sizes (what ``xz -T`` and pixz write) are decoded in parallel;
    others one after another, as ``lzma_stream_decoder_mt`` itself falls back. liblzma checks every
    block's sizes and integrity check and the index, as the stdlib's decoder does. It reads ahead
    by the blocks its threads hold (at most MEMLIMIT_THREADING), so ``pending`` can run behind
    what the plain bytes so far needed by that much.
    """

    magic = b"\xfd7zXZ\x00"

    def __init__(self, threads: int) -> None:
        lib = _liblzma()
        if lib is None:
            raise RuntimeError("liblzma 5.4 or later is needed for ThreadedXz")
        self._lib = lib
        self._stream = _Stream()
        options = _Mt(threads=threads, memlimit_threading=MEMLIMIT_THREADING, memlimit_stop=_NO_LIMIT)
        self._raise_on(lib.lzma_stream_decoder_mt(ctypes.byref(self._stream), ctypes.byref(options)))
        weakref.finalize(self, lib.lzma_end, ctypes.byref(self._stream))
        self._input = b""  # kept alive while liblzma points into it
        self._out = ctypes.create_string_buffer(0)
        self._eof = False
        self._out_full = False

    @staticmethod
    def _raise_on(code: int) -> None:
        if code not in (_OK, _STREAM_END):
            raise lzma.LZMAError(_ERRORS.get(code, f"Unrecognized error from liblzma: {code}"))

    @property
    def eof(self) -> bool:
        return self._eof

    @property
    def needs_input(self) -> bool:
        # as the stdlib's: a call that filled its output may have left more to give without input
        return not self._eof and self._stream.avail_in == 0 and not self._out_full

    @property
    def unused_data(self) -> bytes:
        if not self._eof:
            return b""
        left = self._stream.avail_in
        return self._input[len(self._input) - left :] if left else b""

    def pending(self) -> int:
        return int(self._stream.avail_in)

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._eof:
            raise EOFError("Already at end of stream")
        stream = self._stream
        if data:
            if stream.avail_in:
                raise ValueError("input given before the last was used")
            self._input = bytes(data)
            stream.next_in = ctypes.cast(ctypes.c_char_p(self._input), ctypes.c_void_p)
            stream.avail_in = len(self._input)
        if len(self._out) < max_length:
            self._out = ctypes.create_string_buffer(max_length)
        out = self._out
        stream.next_out = ctypes.addressof(out)
        stream.avail_out = max_length
        code = self._lib.lzma_code(ctypes.byref(stream), 0)  # LZMA_RUN
        if code == _BUF_ERROR and stream.avail_in == 0 and stream.avail_out:
            code = _OK  # no progress without more input: the stdlib's decoder says needs_input too
        self._raise_on(code)
        self._eof = code == _STREAM_END
        self._out_full = stream.avail_out == 0
        return ctypes.string_at(out, max_length - stream.avail_out)

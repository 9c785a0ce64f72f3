"""liblzma's threaded .xz decoder: the stdlib's bytes and errors, on every core; lying blocks fail."""

from __future__ import annotations

import io
import lzma
import os
import shutil
import struct
import subprocess
import tarfile
import zlib
from pathlib import Path

import pytest

from dropscan.archive import ArchiveReadError, LimitExceeded, walk, xz
from dropscan.archive.inflate import CODECS, InflateError, _steps

from helpers.bombs import MiB

pytestmark = [
    pytest.mark.skipif(
        not xz.available(), reason="liblzma 5.4 or later (lzma_stream_decoder_mt) is not here"
    ),
    pytest.mark.skipif(shutil.which("xz") is None, reason="xz (xz-utils) writes the multi-block streams"),
]


def multi_block(data: bytes, block: str = "64KiB") -> bytes:
    """``data`` as xz -T2 writes it: blocks of ``block`` plain bytes, each header giving its sizes."""
    run = subprocess.run(
        ["xz", "-T2", f"--block-size={block}", "-3", "-c"], input=data, capture_output=True, check=True
    )
    return run.stdout


def tar_of(*members: tuple[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def source_tree() -> bytes:
    """Three MiB of text-like and random members: dozens of 64 KiB blocks."""
    text = b"".join(b"int f%d(void) { return %d; }\n" % (i, i * 7) for i in range(40_000))
    return tar_of(
        ("src/a.c", text), ("bin/blob", os.urandom(1 << 20)), ("src/b.c", text[::-1]), ("empty", b"")
    )


def blocks(stream: bytes) -> list[tuple[int, int]]:
    """(offset, header size) of every block of a one-stream .xz whose block headers give their sizes."""
    found, pos = [], 12
    while stream[pos] != 0:  # 0x00 opens the index
        size = (stream[pos] + 1) * 4
        assert stream[pos + 1] & 0x40, "the block header gives its compressed size"
        compressed, _ = _vli(stream, pos + 2)
        check = {0: 0, 1: 4, 4: 8, 10: 32}[stream[7] & 0x0F]
        found.append((pos, size))
        pos += size + (compressed + 3) // 4 * 4 + check
    return found


def _vli(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _with_header_crc(header: bytearray) -> bytes:
    header[-4:] = struct.pack("<I", zlib.crc32(bytes(header[:-4])))
    return bytes(header)


def decode(stream: bytes, threads: int, monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, int]]:
    """The steps (plain bytes, compressed bytes used) of inflate's decoder with ``threads``."""
    monkeypatch.setenv("DROPSCAN_XZ_THREADS", str(threads))
    assert isinstance(CODECS["xz"](), xz.ThreadedXz) == (threads > 1)
    return list(_steps(io.BytesIO(stream).read, "xz"))


def plain_of(steps: list[tuple[bytes, int]]) -> bytes:
    return b"".join(out for out, _ in steps)


def test_threads_decode_what_one_thread_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = source_tree()
    stream = multi_block(plain)
    assert len(blocks(stream)) > 20
    assert plain_of(decode(stream, 2, monkeypatch)) == plain == plain_of(decode(stream, 1, monkeypatch))


def test_a_stream_without_block_sizes_and_concatenated_streams_decode_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = source_tree()
    one_block = lzma.compress(plain)  # the stdlib (and single-threaded xz) writes no sizes
    tail = b"tail of a second stream\n"
    assert plain_of(decode(one_block + multi_block(tail), 2, monkeypatch)) == plain + tail


def test_the_consumed_position_grows_to_the_end_of_the_input(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = multi_block(source_tree())
    positions = [used for _, used in decode(stream, 2, monkeypatch)]
    assert positions == sorted(positions) and positions[0] < len(stream) and positions[-1] == len(stream)


def test_a_truncated_multi_block_stream_is_truncated(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = multi_block(source_tree())
    with pytest.raises(InflateError, match="truncated xz input"):
        decode(stream[: len(stream) * 2 // 3], 2, monkeypatch)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_walk_of_a_multi_block_tar_xz_gives_the_records_of_the_plain_tar(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DROPSCAN_INFLATE", mode)
    monkeypatch.setenv("DROPSCAN_XZ_THREADS", "2")
    plain = source_tree()
    expected = [(r.path, r.sha256, r.ws) for r in walk(io.BytesIO(plain), "d.tar")]
    got = [(r.path, r.sha256, r.ws) for r in walk(io.BytesIO(multi_block(plain)), "d.tar.xz")]
    assert got == expected


@pytest.mark.parametrize("claim", [1, 1 << 40], ids=["one-byte-more", "a-tebibyte"])
def test_a_block_that_lies_about_its_plain_size_fails_the_walk(
    claim: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DROPSCAN_INFLATE", "process")
    monkeypatch.setenv("DROPSCAN_XZ_THREADS", "2")
    stream = multi_block(source_tree())
    offset, size = blocks(stream)[3]
    header = bytearray(stream[offset : offset + size])
    flags = header[1]
    assert flags & 0x80, "xz -T writes the plain size too"
    _, at = _vli(header, 2)
    plain, end = _vli(header, at)
    vli = bytearray()
    value = plain + 1 if claim == 1 else claim
    while True:
        vli.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            break
    body = bytes(header[1:at]) + bytes(vli) + bytes(header[end:-4]).rstrip(b"\0")
    padded = body + b"\0" * (-(len(body) + 1 + 4) % 4)
    rebuilt = bytearray(bytes(((len(padded) + 1 + 4) // 4 - 1,)) + padded + b"\0\0\0\0")
    forged = stream[:offset] + _with_header_crc(rebuilt) + stream[offset + size :]
    with pytest.raises(ArchiveReadError) as caught:
        list(walk(io.BytesIO(forged), "d.tar.xz"))
    assert not isinstance(caught.value, LimitExceeded)
    assert str(caught.value) == "xz decompression failed: Corrupt input data"


def test_a_multi_block_bomb_is_stopped_by_the_member_ratio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a .tar.xz in 1 MiB blocks whose one member is 96 MiB of zeros (each block about 200 bytes)
    monkeypatch.setenv("DROPSCAN_INFLATE", "process")
    monkeypatch.setenv("DROPSCAN_XZ_THREADS", "2")
    stream = multi_block(tar_of(("readme", b"hello\n"), ("zeros.img", bytes(96 * MiB))), block="1MiB")
    # Then the member's ratio stops it although the decoder reads blocks ahead of the walk
    with pytest.raises(LimitExceeded, match=r"member zeros\.img expands beyond 1000x its compressed size"):
        list(walk(io.BytesIO(stream), "d.tar.xz"))

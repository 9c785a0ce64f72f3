"""Where a firmware blob starts and how long it is, from the few header fields that say so (pure).

The extractors (unsquashfs, dumpimage, debugfs, jefferson, ubi-reader, libarchive, the decompressors)
read the formats; carving only needs to know where a format starts in a larger blob and, when the
header states it, where it ends: a uImage's data size, a squashfs superblock's ``bytes_used``, an ext
superblock's block count, a CramFS size, an FDT's ``totalsize``. A format whose header does not state
its length (cpio, JFFS2, UBI, compressed streams) runs to the next carved start or the end.
"""

from __future__ import annotations

import dataclasses
import mmap
import re
import struct
import zlib
from collections.abc import Iterator

# the compression byte of a legacy uImage header (include/image.h: IH_COMP_*)
UIMAGE_COMPRESSION = {0: "none", 1: "gzip", 2: "bzip2", 3: "lzma", 4: "lzo", 5: "lz4", 6: "zstd"}
UIMAGE_TYPES = {2: "kernel", 3: "ramdisk", 4: "multi", 5: "firmware", 6: "script", 7: "filesystem"}
# the architecture byte (IH_ARCH_*), named as dropscan names architectures
UIMAGE_ARCH = {
    2: "arm",
    3: "x86",
    5: "mips",
    7: "powerpc",
    9: "sh",
    10: "sparc",
    17: "mips",
    22: "arm64",
    26: "riscv",
}
SQUASHFS_COMPRESSION = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}

CONTAINERS = frozenset(
    {"uimage", "fit", "squashfs", "cpio", "ext", "jffs2", "ubi", "ubifs", "cramfs", "tar", "zip"}
)
STREAMS = frozenset({"gzip", "xz", "lzma", "lz4", "lz4-legacy", "zstd", "bzip2"})


@dataclasses.dataclass(frozen=True, slots=True)
class Found:
    """A format found at ``offset`` of a blob; ``length`` when its header states it (else None)."""

    offset: int
    fmt: str
    length: int | None = None
    detail: str = ""  # e.g. the squashfs or uImage compression, the uImage's name
    arch: str | None = None  # the architecture a header states (a uImage's)


_PATTERN = re.compile(
    rb"hsqs|sqsh|\x27\x05\x19\x56|\xd0\x0d\xfe\xed|07070[12]|\x1f\x8b\x08|\xfd7zXZ\x00|\x5d\x00\x00"
    rb"|\x04\x22\x4d\x18|\x02\x21\x4c\x18|\x28\xb5\x2f\xfd|BZh[1-9]1AY&SY|UBI#|\x31\x18\x10\x06"
    rb"|\x45\x3d\xcd\x28|\x85\x19(?:[\x01\x02\x08\x09]\xe0|[\x03\x04\x06]\x20)|ustar|PK\x03\x04|\x53\xef",
    re.DOTALL,
)


def sniff(head: bytes) -> Found | None:
    """The format that starts at byte 0 of ``head`` (the first 64 KiB of a file), or None."""
    for found in scan(head[: 64 * 1024], limit_offset=0):
        return found
    return None


def scan(data: bytes | mmap.mmap, limit_offset: int | None = None, start: int = 0) -> Iterator[Found]:
    """Every plausible format start in ``data`` from ``start`` on, in the order their magics come
    (at most ``limit_offset``)."""
    view = memoryview(data)
    for match in _PATTERN.finditer(data, start):
        at = match.start()
        token = match.group()
        if token == b"\x53\xef":  # ext's magic sits 1080 bytes into the file system
            at -= 1080
            if at < start:
                continue
        elif token == b"ustar":
            at -= 257
            if at < start:
                continue
        if limit_offset is not None and at > limit_offset:
            continue
        found = _check(view, at, token)
        if found is not None:
            yield found


def carve(data: bytes | mmap.mmap) -> list[Found]:
    """The formats of a blob one after the other: the search goes on past the end of each one whose
    header states its length (a file system's own contents are read by its extractor, and a 6 GiB
    sparse ext4 is not searched byte by byte), else from the byte after its start."""
    finds: list[Found] = []
    position = 0
    while True:
        found = next(scan(data, start=position), None)
        if found is None:
            return finds
        finds.append(found)
        position = found.offset + (found.length if found.length else 1)


def _check(view: memoryview, at: int, token: bytes) -> Found | None:  # noqa: C901 - one case per magic
    head = bytes(view[at : at + 1280])
    if token in (b"hsqs", b"sqsh"):
        return _squashfs(head, at)
    if token == b"\x27\x05\x19\x56":
        return _uimage(head, at)
    if token == b"\xd0\x0d\xfe\xed":
        return _fdt(view, at)
    if token.startswith(b"07070"):
        return Found(at, "cpio") if len(head) >= 110 and head[6:14].isalnum() else None
    if token == b"\x1f\x8b\x08":
        return Found(at, "gzip") if _inflates(head, at) else None
    if token == b"\xfd7zXZ\x00":
        return Found(at, "xz")
    if token == b"\x5d\x00\x00":
        return _lzma(head, at)
    if token == b"\x04\x22\x4d\x18":
        return Found(at, "lz4")
    if token == b"\x02\x21\x4c\x18":
        return Found(at, "lz4-legacy")
    if token == b"\x28\xb5\x2f\xfd":
        return Found(at, "zstd")
    if token.startswith(b"BZh"):
        return Found(at, "bzip2")
    if token == b"UBI#":
        return Found(at, "ubi")
    if token == b"\x31\x18\x10\x06":
        return Found(at, "ubifs") if at % 8 == 0 else None
    if token == b"\x45\x3d\xcd\x28":
        return _cramfs(head, at)
    if token.startswith(b"\x85\x19"):
        return Found(at, "jffs2") if at % 4 == 0 else None
    if token == b"ustar":
        return Found(at, "tar") if head[257:263] in (b"ustar\x00", b"ustar ") else None
    if token == b"PK\x03\x04":
        return Found(at, "zip")
    if token == b"\x53\xef":
        return _ext(view, at)
    return None


def _squashfs(head: bytes, at: int) -> Found | None:
    if len(head) < 96:
        return None
    big = head[:4] == b"sqsh"
    order = ">" if big else "<"
    major = struct.unpack_from(order + "H", head, 28)[0]
    compression = struct.unpack_from(order + "H", head, 20)[0]
    used = struct.unpack_from(order + "Q", head, 40)[0]
    if major != 4 or compression not in SQUASHFS_COMPRESSION or used < 96:
        return None
    return Found(at, "squashfs", used, SQUASHFS_COMPRESSION[compression] + (" big-endian" if big else ""))


def _uimage(head: bytes, at: int) -> Found | None:
    if len(head) < 64:
        return None
    header = bytearray(head[:64])
    stated = struct.unpack_from(">I", header, 4)[0]
    header[4:8] = b"\0\0\0\0"
    if zlib.crc32(bytes(header)) != stated:
        return None
    size = struct.unpack_from(">I", head, 12)[0]
    name = head[32:64].split(b"\0")[0].decode("latin-1")
    comp = UIMAGE_COMPRESSION.get(head[31], f"compression {head[31]}")
    kind = UIMAGE_TYPES.get(head[30], f"type {head[30]}")
    arch = UIMAGE_ARCH.get(head[29], f"arch {head[29]}")
    return Found(at, "uimage", 64 + size, f"{kind}, {comp}, {name}", arch)


def _fdt(view: memoryview, at: int) -> Found | None:
    head = bytes(view[at : at + 40])
    if len(head) < 40:
        return None
    total, _, _, _, version = struct.unpack_from(">IIIII", head, 4)
    if not 16 <= version <= 17 or total < 40 or at + total > len(view):
        return None
    # a FIT image is a device tree with an /images node; a bare device tree is not unpacked
    return Found(at, "fit", total) if b"images\0" in bytes(view[at : at + min(total, 1 << 20)]) else None


def _inflates(head: bytes, at: int) -> bool:
    try:
        zlib.decompressobj(31).decompress(head, 256)
    except zlib.error:
        return False
    return True


def _lzma(head: bytes, at: int) -> Found | None:
    """LZMA alone: lc/lp/pb 0x5d, a power-of-two dictionary, and a size that is plausible or unknown."""
    if len(head) < 13:
        return None
    dictionary = struct.unpack_from("<I", head, 1)[0]
    size = struct.unpack_from("<Q", head, 5)[0]
    if dictionary < 4096 or dictionary & (dictionary - 1) or not (size == (1 << 64) - 1 or size < 1 << 34):
        return None
    return Found(at, "lzma")


def _cramfs(head: bytes, at: int) -> Found | None:
    if len(head) < 32 or head[16:32] != b"Compressed ROMFS":
        return None
    return Found(at, "cramfs", struct.unpack_from("<I", head, 4)[0])


def _ext(view: memoryview, at: int) -> Found | None:
    block = bytes(view[at + 1024 : at + 1024 + 264])
    if len(block) < 264:
        return None
    inodes, blocks_lo = struct.unpack_from("<II", block, 0)
    first_data, log_block = struct.unpack_from("<II", block, 20)
    per_group = struct.unpack_from("<I", block, 32)[0]
    state = struct.unpack_from("<H", block, 58)[0]
    revision = struct.unpack_from("<I", block, 76)[0]
    # the fields a real superblock always has consistent: a two-byte magic alone is no file system
    if log_block > 6 or not blocks_lo or not inodes or state > 7 or revision > 1:
        return None
    if first_data != (1 if log_block == 0 else 0) or per_group != 8 * (1024 << log_block):
        return None
    length = blocks_lo * (1024 << log_block)
    return Found(at, "ext", length) if at == 0 or at + length <= len(view) else None

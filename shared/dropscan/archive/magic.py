"""Sniffing: which compressor or archive format the first bytes of a member show."""

from __future__ import annotations

import re

#: enough of a member to see every magic below, tar's at offset 257 included
MAGIC_SPAN = 512

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
#: the names :func:`compressor_of` gives
COMPRESSORS = frozenset(_COMPRESSOR_MAGICS.values())
#: the first byte of every magic above (gzip, bzip2, xz, zstd; zip, 7z, cpio, ar)
_MAGIC_FIRST = frozenset(b"\x1fB\xfd\x28P70!")
_STATIC_LIBRARY_SUFFIXES = (".a", ".lib")

# The triage re-read's looser test: it holds a member in memory only to try it as an archive.
_LOOSE_MAGICS = (
    b"\x1f\x8b",
    b"BZh",
    b"\xfd7zXZ\x00",
    b"\x28\xb5\x2f\xfd",
    b"PK\x03\x04",
    b"7z\xbc\xaf\x27\x1c",
    b"!<arch>\n",
)


def compressor_of(head: bytes) -> str | None:
    """The compressor (gzip, bzip2, xz, zstd) whose stream ``head`` starts with, if any."""
    for magic, fmt in _COMPRESSOR_MAGICS.items():
        if magic.match(head):
            return fmt
    return None


def nested_format(head: bytes, path: str) -> str | None:
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


def looks_like_archive(head: bytes) -> bool:
    """Whether the triage re-read should try ``head``'s member as a nested archive."""
    return head.startswith(_LOOSE_MAGICS) or head[257:262] == b"ustar"

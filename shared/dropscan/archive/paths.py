"""Member names as dropscan shows them: raw bytes escaped losslessly, tricks noted, duplicates told apart."""

from __future__ import annotations

import hashlib
import posixpath
import unicodedata
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dropscan.models import FileRecord

__all__ = ["DUPLICATE_NOTE", "MAX_PATH", "Names", "distinct", "escape", "unescape"]

#: longer member names (after escaping) are shortened: PATH_MAX on Linux, and far beyond any real tree
MAX_PATH = 4096
_SHORT_TAIL = 17  # "…" and 16 hex digits of the name's SHA-256, so shortened names stay distinct
DUPLICATE_NOTE = "duplicate: an earlier member has the same path once normalised; renamed"


def escape(raw: bytes) -> tuple[str, bool]:
    """Printable text for a name's raw bytes, and whether anything had to be escaped.

    Names that are valid UTF-8 and printable are kept as they are. In any other name every byte that is
    not part of a printable UTF-8 character (invalid UTF-8, control characters, bidi overrides, odd
    spaces) is written %XX, and so is "%" itself, which makes the escaping reversible (:func:`unescape`).
    """
    text = raw.decode("utf-8", "surrogateescape")
    if text.isprintable():
        return text, False
    out = []
    for char in text:
        if char == "%":
            out.append("%25")
        elif char.isprintable():
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogateescape"))
    return "".join(out), True


def unescape(text: str) -> bytes:
    """The raw bytes of a name that :func:`escape` had to escape."""
    out = bytearray()
    pos = 0
    while pos < len(text):
        if text[pos] == "%":
            out.append(int(text[pos + 1 : pos + 3], 16))
            pos += 3
        else:
            out += text[pos].encode("utf-8")
            pos += 1
    return bytes(out)


def _key(path: str) -> bytes:
    """What an extractor would make of ``path``: the identity two members must not share."""
    if not path.isascii() or "//" in path or "/." in path or path.startswith(".") or path.endswith("/"):
        parts: list[str] = []
        for part in path.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        path = unicodedata.normalize("NFC", "/".join(parts))
    # 8 bytes of BLAKE2b: deterministic (a scan's chunks are), and small for two million names
    return hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def _escapes_root(path: str) -> bool:
    if ".." not in path:
        return False
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _shorten(text: str, raw: bytes) -> str:
    return text[: MAX_PATH - _SHORT_TAIL] + "…" + hashlib.sha256(raw).hexdigest()[:16]


class Names:
    """Turns the raw names of one walk's members into distinct, printable paths with notes."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: set[bytes] = set()

    def place(self, prefix: str, raw: bytes) -> tuple[str, list[str]]:
        """The path of a member named ``raw`` inside ``prefix`` (``outer!/`` or ""), and notes on it."""
        notes: list[str] = []
        text, escaped = escape(raw)
        if escaped:
            notes.append("name is not printable UTF-8: bytes shown as %XX")
        while text.startswith("./"):
            text = text[2:]
        if text.startswith("/"):
            notes.append(f"absolute name {_brief(text)}: leading / removed")
            text = text.lstrip("/")
        if _escapes_root(text):
            notes.append("name climbs out of the archive with ..")
        if len(text) > MAX_PATH:
            notes.append(f"name of {len(raw):,} bytes shortened")
            text = _shorten(text, raw)
        if not text:
            text = "(no name)"
            notes.append("member has no name")
        path, note = self.claim(prefix + text)
        return path, [*notes, note] if note else notes

    def claim(self, path: str) -> tuple[str, str | None]:
        """``path``, renamed when an earlier one is the same once normalised; the note saying so."""
        key = _key(path)
        note = None
        if key in self._seen:
            number = 2
            while (key := _key(f"{path} (duplicate {number})")) in self._seen:
                number += 1
            note = DUPLICATE_NOTE
            path = f"{path} (duplicate {number})"
        self._seen.add(key)
        return path, note

    @staticmethod
    def target(path: str, raw: bytes) -> tuple[str, list[str]]:
        """A link's target as text, and notes when it points outside the archive."""
        text, escaped = escape(raw)
        notes = ["link target is not printable UTF-8: bytes shown as %XX"] if escaped else []
        if len(text) > MAX_PATH:
            notes.append(f"link target of {len(raw):,} bytes shortened")
            text = _shorten(text, raw)
        if text.startswith("/"):
            notes.append("absolute link target")
        elif _escapes_root(posixpath.join(posixpath.dirname(path.rsplit("!/", 1)[-1]), text)):
            notes.append("link target leaves the archive")
        return text, notes


def distinct(records: list[FileRecord]) -> None:
    """Rename, in place, records that repeat an earlier record's path.

    Each part of a split upload tells apart only its own members; finalize, reading the parts in
    walk order, calls this so that two segments never give one path to two files.
    """
    names = Names()
    for i, rec in enumerate(records):
        path, note = names.claim(rec.path)
        if note:
            records[i] = replace(rec, path=path, note="; ".join(n for n in (rec.note, note) if n))


def _brief(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "…"

"""A hash chunk, the unit of work between unpack and lookup: the digests asked for on behalf of a file, a
record as a chunk carries it, and how a walk is cut into chunks. Pure: the unpack stage sends what
:class:`Chunker` cuts, the lookup stage reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dropscan.models import FileRecord


def lookup_keys(rec: FileRecord) -> tuple[str, ...]:
    """The digests the upstream table is asked for on behalf of one file (none for an empty one)."""
    if not rec.size:
        return ()
    if rec.kw == rec.sha256 and rec.ws == rec.sha256:
        return (rec.sha256,)
    return tuple(dict.fromkeys((rec.sha256, rec.kw, rec.ws)))


def compact(rec: FileRecord) -> dict[str, Any]:
    """A record as a chunk carries it: most files need no normalisation, so ``kw``/``ws`` equal to
    ``sha256`` are left out to keep chunks small."""
    out = rec.to_json()
    for k in ("kw", "ws"):
        if out[k] == rec.sha256:
            del out[k]
    return out


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk's body: the digests it asks for and its files' compact records."""

    keys: list[str]
    records: list[dict[str, Any]]


@dataclass
class Chunker:
    """Cuts a walk into chunks.

    Each digest of the scan is asked for in exactly one chunk: the first whose files bring it. A chunk
    asks for at most ``keys`` digests and holds at most ``size`` files; all but the last ask for a
    multiple of ``unit`` (100, one BatchGetItem) digests, leftovers wait for the next chunk. So a scan
    costs ceil(unique digests / 100) calls, however its duplicates fall.
    """

    size: int
    keys: int = 1000
    files: int = 0
    _pending: list[FileRecord] = field(default_factory=list)
    _keys: list[str] = field(default_factory=list)
    # 96-bit prefixes of the digests already asked for: a third of the memory of the hex strings
    _seen: set[int] = field(default_factory=set)

    @property
    def unit(self) -> int:
        return min(100, self.keys)

    def add(self, rec: FileRecord) -> list[Chunk]:
        """Take one file; returns the chunks it completes (usually none)."""
        self._pending.append(rec)
        self.files += 1
        for key in lookup_keys(rec):
            prefix = int(key[:24], 16)
            if prefix not in self._seen:
                self._seen.add(prefix)
                self._keys.append(key)
        cut: list[Chunk] = []
        while len(self._keys) >= self.keys:
            cut.append(self._cut(self.keys))
        if len(self._pending) >= self.size:
            cut.append(self._cut(len(self._keys) // self.unit * self.unit))
        return cut

    def flush(self) -> list[Chunk]:
        """What is left (the last chunk: any number of keys)."""
        cut: list[Chunk] = []
        while self._pending or self._keys:
            cut.append(self._cut(min(len(self._keys), self.keys)))
        return cut

    def _cut(self, n_keys: int) -> Chunk:
        keys, self._keys = self._keys[:n_keys], self._keys[n_keys:]
        records = [compact(r) for r in self._pending]
        self._pending = []
        return Chunk(keys, records)

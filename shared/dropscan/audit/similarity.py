"""Which upstream file an added file was copied from: line sketches and shared lines.

A vendor who copies an upstream file to a new path and edits it leaves most of its lines: the measure is
the share of the added file's distinct lines (normalised as the ``ws`` digest normalises them, leading
blanks too, trivial lines left out) found in the upstream file. To find the candidate among a release's
thousands of files without reading them, each upstream text file has a bottom-k sketch of its line set
(the :data:`K` smallest CRC-32s of its lines), stored at ingest; sketches that share values are the
candidates, ranked by the resemblance the sketches estimate, and the best few are read and measured
exactly. Pure Python on purpose: TLSH's Python package is a C++ source distribution, which ``sam build``
cannot compile for the arm64 Lambda layer (docs/design.md, "Review evidence").
"""

from __future__ import annotations

import base64
import heapq
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dropscan.archive.digest import kw_normalise

#: values of a sketch
K = 16
_BYTES = 4
#: lines this short (``}``, ``{``, ``*/``, ``#endif``...) say nothing of where a file came from
MIN_LINE = 8
#: an added file sharing less than this share of its lines with every upstream file is not "close"
THRESHOLD = 0.5
#: candidates read and measured exactly per added file
MEASURED = 3
#: a sketch value held by more files than this (at least COMMON_MIN, else one in COMMON_SHARE of the
#: release) is boilerplate and left out of the index
COMMON_MIN = 50
COMMON_SHARE = 200


def lines_of(data: bytes) -> set[bytes]:
    """The distinct lines that can tell a file's origin: as ``ws_normalise`` makes them, stripped (strip
    drops trailing blanks itself, so only keywords and CRs are normalised first)."""
    if b"$" in data:
        data = kw_normalise(data)
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return {n for n in map(bytes.strip, data.split(b"\n")) if len(n) >= MIN_LINE}


def sketch(data: bytes) -> tuple[int, ...]:
    """The bottom-k sketch of the file's line set (fewer values for a file of fewer lines).

    CRC-32 rather than a cryptographic hash: it runs in C over ``map`` (the ingest sketches every text
    file of a release); a collision only makes two sketches look closer, and candidates are then
    measured exactly."""
    return tuple(heapq.nsmallest(K, set(map(zlib.crc32, lines_of(data)))))


def encode(sk: tuple[int, ...]) -> str:
    return base64.b64encode(b"".join(v.to_bytes(_BYTES, "big") for v in sk)).decode()


def decode(text: str) -> tuple[int, ...]:
    raw = base64.b64decode(text)
    return tuple(int.from_bytes(raw[i : i + _BYTES], "big") for i in range(0, len(raw), _BYTES))


def resemblance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """The Jaccard similarity of two line sets, as their bottom-k sketches estimate it."""
    if not a or not b:
        return 0.0
    union = sorted(set(a) | set(b))[: max(len(a), len(b))]
    both = set(a) & set(b)
    return sum(v in both for v in union) / len(union)


def containment(added: bytes, upstream: bytes) -> float:
    """The share of the added file's lines found in the upstream file (exact)."""
    mine = lines_of(added)
    return len(mine & lines_of(upstream)) / len(mine) if mine else 0.0


@dataclass
class SketchIndex:
    """Upstream sketches, found by the values they share."""

    sketches: dict[str, tuple[int, ...]]
    by_value: dict[int, list[str]]

    @classmethod
    def build(cls, sketches: Mapping[str, tuple[int, ...]]) -> SketchIndex:
        """The index of ``sketches``; a value that many files share is boilerplate (a licence line, an
        include every driver has) and finds nothing: it is left out."""
        by_value: dict[int, list[str]] = {}
        for sha, sk in sketches.items():
            for v in sk:
                by_value.setdefault(v, []).append(sha)
        common = max(COMMON_MIN, len(sketches) // COMMON_SHARE)
        return cls(dict(sketches), {v: shas for v, shas in by_value.items() if len(shas) <= common})

    def candidates(self, sk: tuple[int, ...], exclude: Iterable[str] = ()) -> list[str]:
        """The upstream contents most resembling ``sk`` (best first, at most :data:`MEASURED`): those
        sharing at least two sketch values, or one when the added file's sketch is that short."""
        shared: Counter[str] = Counter()
        for v in sk:
            shared.update(self.by_value.get(v, ()))
        for sha in exclude:
            shared.pop(sha, None)
        least = min(2, len(sk))
        scored = sorted(
            ((resemblance(sk, self.sketches[s]), s) for s, n in shared.items() if n >= least), reverse=True
        )
        return [s for r, s in scored[:MEASURED] if r > 0]

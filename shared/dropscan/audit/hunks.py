"""Hunks: the 0-context diff of two contents as libgit2 makes it, each hunk's fingerprint, the
unified diff people read, and the hunk index's entries (which commits published a change).

Pure rules. The ingest (each commit's diff, :mod:`dropscan.git.commit_diffs`) and the scan (base against the
drop's file, :mod:`dropscan.stages.evidence`) diff alike, so that a change upstream published yields
the same hunk in both: its fingerprint (the file's path, the removed and the added lines, normalised as
the ``ws`` digest normalises a file) is what the hunk index is keyed by. What a hunk's origin is lies in
:mod:`dropscan.audit.hunk_origins`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pygit2

from dropscan.archive.digest import kw_normalise

#: a patch text longer than this is cut (the manifest says so); the hunks are always whole
PATCH_LIMIT = 64 * 1024
CONTEXT = 3
#: commits kept per fingerprint, earliest first: one file's history can publish the same short lines
#: again (BusyBox's hash_md5_sha.c gained `# endif` in 2022 and again in 2024)
MAX_PUBLISHED = 4


def normal_line(line: bytes) -> bytes:
    """A line as the ``ws`` digest sees it: keywords bare, no CR, no trailing blanks."""
    if b"$" in line:  # the only lines keyword normalisation can change
        line = kw_normalise(line)
    return line.replace(b"\r", b"").rstrip(b" \t\n")


def fingerprint(path: str, removed: Sequence[bytes], added: Sequence[bytes]) -> str:
    """What identifies a change to a file: its path and its normalised removed and added lines.

    The path is part of it: short hunks (an added ``#include <errno.h>`` or ``# endif``) recur all over
    a project's history, so lines alone cite a 1999 commit to another file for a 2024 fix, and call
    a vendor's added ``}`` upstream's.
    """
    return _fingerprint(path, list(map(normal_line, removed)), list(map(normal_line, added)))


def _fingerprint(path: str, removed: list[bytes], added: list[bytes]) -> str:
    """:func:`fingerprint` of lines normalised already."""
    h = hashlib.sha256(path.encode("utf-8", "surrogateescape") + b"\0")
    for line in removed:
        h.update(b"-" + line + b"\n")
    h.update(b"\0")
    for line in added:
        h.update(b"+" + line + b"\n")
    return h.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Hunk:
    """One change of a 0-context diff, numbered as git numbers its ``@@`` lines."""

    old_start: int
    old_lines: int
    new_start: int
    new_lines: int
    removed: tuple[bytes, ...]
    added: tuple[bytes, ...]

    @property
    def noise(self) -> bool:
        """Only keywords, line endings or trailing blanks differ."""
        return [normal_line(x) for x in self.removed] == [normal_line(x) for x in self.added]

    def fingerprint(self, path: str) -> str:
        """The hunk's key in the hunk index, as a change to the file at ``path``."""
        return fingerprint(path, self.removed, self.added)

    def key(self, path: str) -> str | None:
        """:meth:`fingerprint`, or None for :attr:`noise` (each line normalised once for both)."""
        removed, added = list(map(normal_line, self.removed)), list(map(normal_line, self.added))
        return None if removed == added else _fingerprint(path, removed, added)

    @property
    def size(self) -> int:
        return len(self.removed) + len(self.added)


def hunks_of(patch: pygit2.Patch, *, offset: int = 0) -> list[Hunk]:
    """The hunks of a libgit2 patch made with no context lines (binary patches have none), numbered
    ``offset`` lines down (the patch of a file's middle)."""
    out: list[Hunk] = []
    for h in patch.hunks:
        removed = tuple(line.raw_content for line in h.lines if line.origin == "-")
        added = tuple(line.raw_content for line in h.lines if line.origin == "+")
        out.append(Hunk(h.old_start + offset, h.old_lines, h.new_start + offset, h.new_lines, removed, added))
    return out


#: lines of the two contents' common head and tail kept around the part that differs: libgit2 diffs
#: that part, not the whole file (its time grows with the lines it is given: most of an ingest's
#: diffs are a few lines changed in a long file); the margin keeps libgit2's choice of where a
#: change goes among equal lines nearly always as it is in the whole file (docs/design.md)
MARGIN = 20
#: libgit2 calls a content binary for a NUL among its first bytes: as many are looked at here
_SNIFF = 8000
_STEPS = (1 << 16, 1 << 12, 1 << 8, 1 << 4, 1)


def _common_head(a: bytes, b: bytes) -> int:
    """The length of the bytes ``a`` and ``b`` begin with alike (slices compared in C, coarse to fine)."""
    n, same = min(len(a), len(b)), 0
    for step in _STEPS:
        while same + step <= n and a[same : same + step] == b[same : same + step]:
            same += step
    return same


def _common_tail(a: bytes, b: bytes, limit: int) -> int:
    """The length of the bytes ``a`` and ``b`` end with alike, at most ``limit``."""
    la, lb, same = len(a), len(b), 0
    for step in _STEPS:
        while same + step <= limit and a[la - same - step : la - same] == b[lb - same - step : lb - same]:
            same += step
    return same


def middles(
    old: bytes, new: bytes, margin: int = MARGIN, *, numbered: bool = True
) -> tuple[int, bytes, bytes]:
    """(lines left out at the head, ``old``'s and ``new``'s middles): each content without the whole
    lines it shares with the other at its head and at its tail, but for ``margin`` lines each side;
    not ``numbered``: 0 lines said (not counted)."""
    start = old.rfind(b"\n", 0, _common_head(old, new)) + 1
    for _ in range(margin):
        if start == 0:
            break
        start = old.rfind(b"\n", 0, start - 1) + 1
    tail = _common_tail(old, new, min(len(old), len(new)) - start)
    # the tail from a line start inside the shared bytes (whose NL both contents hold), then the margin
    nl = old.find(b"\n", len(old) - tail) if tail else -1
    for _ in range(margin):
        if nl < 0:
            break
        nl = old.find(b"\n", nl + 1)
    keep = len(old) - (nl + 1) if nl >= 0 else 0
    skipped = old.count(b"\n", 0, start) if numbered else 0
    return skipped, old[start : len(old) - keep], new[start : len(new) - keep]


def diff(old: bytes, new: bytes, *, numbered: bool = True) -> list[Hunk]:
    """The 0-context hunks from ``old`` to ``new`` (none for binary contents), made by libgit2 from
    their middles (:func:`middles`): the ingest's diff of each commit and the scan's, alike. Not
    ``numbered``: their lines are numbered from the middle's start (for their keys alone)."""
    if b"\0" in old[:_SNIFF] or b"\0" in new[:_SNIFF]:
        return []
    skipped, a, b = middles(old, new, numbered=numbered)
    patch = pygit2.Patch.create_from(a, b, context_lines=0)
    return [] if patch.delta.is_binary else hunks_of(patch, offset=skipped)


def patch_text(old: bytes, new: bytes, path: str, *, limit: int = PATCH_LIMIT) -> tuple[str, bool]:
    """The unified diff people read (``CONTEXT`` lines), and whether it was cut at ``limit``."""
    patch = pygit2.Patch.create_from(old, new, old_as_path=path, new_as_path=path, context_lines=CONTEXT)
    text = patch.data.decode("utf-8", "replace")
    body = text[text.find("\n--- ") + 1 :] if "\n--- " in text else text  # no "diff --git"/"index" header
    if len(body) <= limit:
        return body, False
    return body[: body.rfind("\n", 0, limit) + 1], True


@dataclass(frozen=True, slots=True)
class Published:
    """A commit of upstream that made a hunk: its id, first release holding it, date and subject."""

    commit: str
    release: str | None
    date: str | None = None
    subject: str | None = None
    #: its place in the ingested history, parents first (None: stored before it was numbered)
    seq: int | None = None

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> Published:
        commit, release, date, subject, seq = (list(raw) + [None] * 5)[:5]
        return cls(str(commit), release, date, subject, None if seq is None else int(seq))

    def to_json(self) -> list[Any]:
        out = [self.commit, self.release, self.date, self.subject]
        return out if self.seq is None else [*out, self.seq]


#: fingerprint -> the commits that published that change, earliest first
Index = Mapping[str, Sequence[Published]]


def published_list(raw: Sequence[Any]) -> list[Published]:
    """An index entry as stored: a list of commits, or (written before) a single one."""
    if raw and isinstance(raw[0], str):
        return [Published.from_json(raw)]
    return [Published.from_json(r) for r in raw]

"""Review evidence as the evidence stage writes it (issue 24), made from two real texts with libgit2's diff
(pygit2): the 0-context hunks carry git's @@ numbers, the patch has 3 lines of context. What the rules
decide (which hunk upstream published) is given here by hunk index."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import pygit2

#: what an upstream hunk cites: (commit, first release holding it or None, subject)
Citation = tuple[str, str | None, str]


def commit_id(name: str) -> str:
    """A 40-hex commit id made from ``name`` (the tests compare ids, never look them up)."""
    return hashlib.sha1(name.encode()).hexdigest()


def evidence(
    old: str,
    new: str,
    path: str,
    *,
    package: str = "busybox",
    version: str | None = "1.37.0",
    base_commit: str | None = None,
    upstream: Mapping[int, Citation] | None = None,
    noise: frozenset[int] = frozenset(),
) -> dict[str, Any]:
    """The ``evidence`` object of a file whose upstream base is ``old`` and whose content is ``new``;
    hunks listed in ``upstream`` are upstream's (citing a commit), those in ``noise`` noise, others vendor."""
    upstream = upstream or {}
    zero = pygit2.Patch.create_from(
        old.encode(), new.encode(), old_as_path=path, new_as_path=path, context_lines=0
    )
    three = pygit2.Patch.create_from(
        old.encode(), new.encode(), old_as_path=path, new_as_path=path, context_lines=3
    )
    hunks: list[dict[str, Any]] = []
    for i, h in enumerate(zero.hunks):
        hunk: dict[str, Any] = {
            "old_start": h.old_start,
            "old_lines": h.old_lines,
            "new_start": h.new_start,
            "new_lines": h.new_lines,
            "origin": "upstream" if i in upstream else "noise" if i in noise else "vendor",
        }
        if i in upstream:
            commit, release, subject = upstream[i]
            hunk.update(commit=commit, release=release, subject=subject)
        hunks.append(hunk)
    origins = {h["origin"] for h in hunks} - {"noise"}
    origin = "mixed" if len(origins) > 1 else "vendor" if "vendor" in origins else "upstream"
    base: dict[str, Any] = {
        "package": package,
        "version": version,
        "path": path,
        "sha256": hashlib.sha256(old.encode()).hexdigest(),
    }
    if base_commit:
        base["commit"] = base_commit
    text = three.text or ""
    _, added, removed = three.line_stats
    return {
        "base": base,
        "lines_added": added,
        "lines_removed": removed,
        "hunks": hunks,
        "origin": origin,
        "patch": text[text.index("--- ") :] if "--- " in text else text,
    }


def file_record(path: str, new: str, ev: Mapping[str, Any] | None, cls: str = "modified") -> dict[str, Any]:
    """A manifest file entry of ``new`` at ``path`` with ``ev`` as its evidence."""
    data = new.encode()
    record: dict[str, Any] = {
        "path": path,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "sha1": hashlib.sha1(data).hexdigest(),
        "class": cls,
        "kind": "text",
    }
    if ev is not None:
        record["evidence"] = dict(ev)
    return record

"""A history's review evidence merged into the package's shards in the content store
(:mod:`dropscan.store.content`): the hunk index (``hunks/<nn>``) and every revision of every path
(``history/<nn>``). Each shard a run touches is read, widened with the run's entries and written back;
the ingests of one package run one after the other (under its git state), so none is widened twice at
once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dropscan.audit.hunks import MAX_PUBLISHED, published_list
from dropscan.store.content import ContentStore, Location, hunk_shard, path_shard


def merge_hunks(content: ContentStore, package: str, hunks: Mapping[str, list[list[Any]]]) -> None:
    """``hunks`` (fingerprint -> the commits publishing it, earliest first, without repeats and cut at
    :data:`MAX_PUBLISHED` already) added to the package's hunk index: an earlier run's commits are
    earlier, so they come first."""
    by_shard: dict[int, dict[str, list[list[Any]]]] = {}
    for fp, pubs in hunks.items():
        by_shard.setdefault(hunk_shard(fp), {})[fp] = pubs
    old = content.shards(package, "hunks", by_shard)
    for n, new in by_shard.items():
        if not old.get(n):  # the lists are the run's, without repeats and cut already
            continue
        kept = {fp: [p.to_json() for p in published_list(raw)] for fp, raw in old[n].items()}
        for fp, pubs in new.items():  # an earlier run's commits are earlier: they come first
            listed = kept.setdefault(fp, [])
            listed.extend(p for p in pubs if p not in listed)
            del listed[MAX_PUBLISHED:]
        by_shard[n] = kept
    content.put_shards(package, "hunks", by_shard)


def merge_revisions(
    content: ContentStore,
    package: str,
    revisions: Mapping[str, list[list[Any]]],
    where: Mapping[str, Location],
    renames: Sequence[Sequence[Any]] = (),
) -> None:
    """``revisions`` (path -> [[sha256, commit, date, place in the history]], parents first) added to
    the package's history shards as [sha256, commit, date, pack, offset, length, place]: each state of
    a path once, with the commit that first made it; a content not stored (binary, too big, missing)
    is left out.

    ``renames`` ((old path, new path, commit, date, place), parents first) go into both paths' shards:
    the new path's ``renamed_from`` and the old path's ``renamed_to`` lists, so that a file's states
    before a rename and after it are found from either name."""
    by_shard: dict[int, dict[str, list[list[Any]]]] = {}
    for path, revs in revisions.items():
        by_shard.setdefault(path_shard(path), {})[path] = revs
    moves: dict[int, list[tuple[str, str, list[Any]]]] = {}
    for old_path, new_path, *when in renames:
        moves.setdefault(path_shard(new_path), []).append(("renamed_from", new_path, [old_path, *when]))
        moves.setdefault(path_shard(old_path), []).append(("renamed_to", old_path, [new_path, *when]))
        by_shard.setdefault(path_shard(new_path), {})
        by_shard.setdefault(path_shard(old_path), {})
    old = content.shards(package, "history", by_shard)
    merged: dict[int, Any] = {}
    for n, paths in by_shard.items():
        shard = old.get(n) or {}
        into = shard.get("paths", {})
        for kind, path, entry in moves.get(n, ()):
            listed = shard.setdefault(kind, {}).setdefault(path, [])
            if entry not in listed:
                listed.append(entry)
        for path, revs in paths.items():
            listed = into.setdefault(path, [])
            have = {r[0] for r in listed}
            for sha, c, t, *seq in revs:  # each state of a path once, with the commit first making it
                if sha not in have and sha in where:
                    listed.append([sha, c, t, *where[sha], *seq])
                    have.add(sha)
        merged[n] = {**shard, "paths": into}
    content.put_shards(package, "history", merged)

"""One commit's changes: its tree against its first parent's (the files it brings), and the contents of
its single-parent changes diffed into the hunks' fingerprints and revisions that review evidence cites;
with the blobs its diffs read hashed and packed on the side (:class:`BlobWork`).

The diff worker (:mod:`dropscan.git.diff_worker`) runs this for every commit of a history; the walk runs
it for the last commits once it has merged its digests.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pygit2
from pygit2.enums import DeltaStatus, DiffFind, DiffOption

from dropscan.archive.digest import digest_bytes
from dropscan.audit.hunks import Published, diff
from dropscan.forked import shared_int
from dropscan.git.repo import GITLINK, LINK, FirstSeen, GitRepo, first_seen

#: where a content lies in the packs: (pack key, offset, compressed length), as the content store keeps it
Location = tuple[str, int, int]


class Pack(Protocol):
    """Where contents read are packed for review evidence (:class:`dropscan.store.content.PackWriter`,
    given by the stage: this room writes no store)."""

    @property
    def locations(self) -> Mapping[str, Location]: ...

    def add(self, sha256: str, data: bytes) -> None: ...

    def flush(self) -> None: ...


@dataclass(frozen=True, slots=True)
class CommitChanges:
    """What one commit changed, as the forked diff worker sends it back."""

    commit: str
    published: list[Any]  # Published.to_json(): the commit, its first release, date and subject
    hunks: list[str]  # the fingerprints of its hunks that are not noise, in the diff's order
    revisions: list[tuple[str, str]]  # (path, blob id) of each file it added or modified
    diffed: bool = True  # False: a merge or a root commit (their changes come from their parents)
    failed: bool = False  # an object this copy lacks
    #: blobs this commit brought that the worker read and hashed: (blob id, [sha256, kw, ws], where
    #: packed or None, bytes); and (blob id, path) of those this copy lacks
    blobs: list[tuple[str, list[str], Location | None, int]] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)
    renames: list[tuple[str, str]] = field(default_factory=list)  # (old path, new path) it renamed


#: a delta of a commit against its parent: (status, path, blob, mode, old blob, old mode, old path)
Delta = tuple[DeltaStatus, str, str, int, str, int, str]
#: the statuses of a delta whose new side is a file the commit brings
BRINGS = (DeltaStatus.ADDED, DeltaStatus.MODIFIED, DeltaStatus.RENAMED)
#: a rename is a deleted and an added file at least this similar (git's own default, 50 %)
RENAME_THRESHOLD = 50
#: added x deleted files of one commit past which no rename is looked for (libgit2 compares each pair:
#: a tree reorganised wholesale is left as adds and deletes; git's diff.renameLimit is 1,000)
RENAME_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class TreeChanges:
    """One commit's tree against its first parent's: the files it brings ((path, blob) added or
    modified; a root commit's whole tree), and the deltas its diffs need (None: not one parent, or an
    object this copy lacks)."""

    seen: FirstSeen
    files: list[tuple[str, str]]
    deltas: list[Delta] | None


def tree_changes(repo: GitRepo, commit: pygit2.Commit) -> TreeChanges:
    """The commit's tree diff against its first parent (libgit2); a root commit's, or a tree this copy
    cannot diff: its whole tree, as far as it has it."""
    seen = first_seen(commit)
    if commit.parents:
        try:
            # the binary check reads blobs, and nothing here asks a delta's flags
            diff = repo.repo.diff(commit.parents[0], commit, flags=DiffOption.SKIP_BINARY_CHECK)
            _renames(diff)
            # each DiffFile asked of a delta is a new object: taken once
            sides = [(d.status, d.new_file, d.old_file) for d in diff.deltas]
            deltas: list[Delta] = [
                (status, new.path, str(new.id), new.mode, str(old.id), old.mode, old.path)
                for status, new, old in sides
            ]
        except (pygit2.GitError, KeyError, ValueError):
            pass  # an object this copy lacks: the whole tree, as far as it has it
        else:
            files = [
                (path, blob)
                for status, path, blob, mode, *_ in deltas
                if status in BRINGS and mode != LINK and mode != GITLINK
            ]
            return TreeChanges(seen, files, deltas if len(commit.parents) == 1 else None)
    try:
        entries = repo.files(str(commit.id))
    except (pygit2.GitError, KeyError, ValueError):
        repo.missing_trees.add(str(commit.tree_id))
        entries = []
    return TreeChanges(seen, [(e.path, e.blob) for e in entries if not e.link], None)


def _renames(diff: pygit2.Diff) -> None:
    """Deleted and added files of ``diff`` paired as renames (libgit2's find_similar, as git diff -M),
    only where the commit both adds and deletes files, and not too many (:data:`RENAME_LIMIT`): the
    pairs' contents are read and compared, and most commits change files in place."""
    added = deleted = 0
    for d in diff.deltas:
        added += d.status == DeltaStatus.ADDED
        deleted += d.status == DeltaStatus.DELETED
    if added and deleted and added * deleted <= RENAME_LIMIT * RENAME_LIMIT:
        diff.find_similar(
            flags=DiffFind.FIND_RENAMES, rename_threshold=RENAME_THRESHOLD, rename_limit=RENAME_LIMIT
        )


@dataclass
class BlobWork:
    """The worker's share of reading, hashing and packing blobs: those a commit adds or modifies that
    no tag holds and no earlier run hashed. The walk takes them from the other end of the history
    (:func:`dropscan.git.history.hash_pending`) until the two meet, as each blob's read is most of its
    cost and the worker has most of those reads in hand already for its diffs."""

    skip: Any  # blob ids the walk has (an earlier run's) or will have (a tag's): a set or a dict
    pack: Pack
    where: dict[str, Location]  # the run's stored contents when the worker was forked
    done: set[str] = field(default_factory=set)
    #: the first commit (by its place in the walk) whose blobs the walk has taken: shared memory
    claimed: Any = field(default_factory=lambda: shared_int(1 << 62))
    at: int = 0  # the place of the commit the worker is at

    def wants(self, blob: str) -> bool:
        return self.at < self.claimed.value and blob not in self.skip and blob not in self.done

    def hash(self, blob: str, path: str, data: bytes | None, into: CommitChanges) -> None:
        if not self.wants(blob):
            return
        self.done.add(blob)
        if data is None:
            into.missing.append((blob, path))
            return
        d = digest_bytes(data, path)
        where = self.where.get(d.sha256)
        if where is None and d.kind == "text" and len(data) > 0:
            self.pack.add(d.sha256, data)
            where = self.pack.locations.get(d.sha256)
        into.blobs.append((blob, [d.sha256, d.kw, d.ws], where, len(data)))


class RecentBlobs:
    """The contents of the blobs diffs met last, up to ``budget`` bytes: a file's new state is the old
    state of its next change, and reading the pair again from the pack was most of the diffs' time."""

    def __init__(self, budget: int = 256 << 20) -> None:
        self.budget = budget
        self.held = 0
        self._data: OrderedDict[str, bytes] = OrderedDict()

    def read(self, repo: GitRepo, blob: str) -> bytes | None:
        data = self._data.get(blob)
        if data is not None:
            self._data.move_to_end(blob)
            return data
        data = repo.read(blob)
        if data is not None and len(data) <= self.budget // 8:
            self._data[blob] = data
            self.held += len(data)
            while self.held > self.budget:
                self.held -= len(self._data.popitem(last=False)[1])
        return data


def changes_of(
    repo: GitRepo,
    commit: pygit2.Commit,
    first_release: dict[str, str],
    recent: RecentBlobs,
    work: BlobWork | None = None,
    tree: TreeChanges | None = None,
) -> CommitChanges:
    """The commit's hunks and revisions (with ``work``, the blobs it brings hashed); ``tree``: its tree
    diff, made already (:func:`tree_changes` makes it otherwise)."""
    if tree is None:
        tree = tree_changes(repo, commit)
    seen = tree.seen
    published = Published(seen.commit, first_release.get(seen.commit), seen.date, seen.subject).to_json()
    if len(commit.parents) != 1:
        return CommitChanges(seen.commit, published, [], [], diffed=False)
    if tree.deltas is None:
        return CommitChanges(seen.commit, published, [], [], diffed=False, failed=True)
    out = CommitChanges(seen.commit, published, [], [])
    for status, path, blob, mode, old_blob, old_mode, old_path in tree.deltas:
        if status not in BRINGS or mode == LINK:
            continue
        out.revisions.append((path, blob))
        if status == DeltaStatus.RENAMED:
            out.renames.append((old_path, path))
        if mode == GITLINK:
            continue
        if status == DeltaStatus.ADDED or old_mode == LINK or old_blob == blob:
            if work is not None and work.wants(blob):
                work.hash(blob, path, recent.read(repo, blob), out)
            continue
        old, new = recent.read(repo, old_blob), recent.read(repo, blob)
        if work is not None:
            work.hash(blob, path, new, out)
        if old is None or new is None:
            out = replace(out, failed=True)  # an object this copy lacks
            continue
        # the same diff of two contents as the scan's: the same hunks
        out.hunks.extend(k for k in (h.key(path) for h in diff(old, new, numbered=False)) if k is not None)
    return out

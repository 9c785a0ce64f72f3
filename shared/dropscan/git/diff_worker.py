"""The diff worker of a ``--history`` ingest: a child forked beside the walk (:func:`fork`) that sends
every commit's tree diff first (:class:`Trees`, the walk's provenance), then each commit's hunks and
revisions with the blobs it hashed (:class:`dropscan.git.commit_diffs.CommitChanges`); and what the walk does
with them (:class:`Diffs`): take them between its steps, fold them into the hunk index and the
revisions in the walk's order, and diff the last commits itself until it meets the worker
(:class:`DiffSplit`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pygit2

from dropscan.audit.hunks import MAX_PUBLISHED
from dropscan.forked import Feed, ForkedError, Urgent, shared_int
from dropscan.git.commit_diffs import (
    BlobWork,
    CommitChanges,
    Location,
    RecentBlobs,
    TreeChanges,
    changes_of,
    tree_changes,
)
from dropscan.git.repo import Entry, GitRepo, Tag
from dropscan.git.run import Run

#: commits of the walk per :class:`Trees` message
TREES_BATCH = 500


@dataclass(frozen=True, slots=True)
class Trees(Urgent):
    """What the walk takes from the worker's tree diffs, before any commit's changes, in messages of
    :data:`TREES_BATCH` commits (a walk stopping at a checkpoint takes no more): each commit of the
    walk, in its order, as (id, date, subject, the files it brings); and the trees this copy lacks.
    Every blob of every commit's tree is brought by that commit or is in its first parent's tree, so the
    first commit bringing a blob is the first holding it: its provenance, without reading every tree."""

    commits: list[tuple[str, str, str, list[tuple[str, str]]]]
    missing_trees: list[str]  # met in these commits' trees
    last: bool  # the walk's last commits


@dataclass
class DiffSplit:
    """The last commits' diffs, shared: once the walk has merged its digests, it diffs commits from the
    last one back while the worker goes on forward, until they meet (the worker would otherwise diff the
    rest alone while the walk waits).

    Each side says where it is, then reads the other's place: the worker takes commit ``n`` only below
    the walk's claim, the walk takes it only while the worker is not past it. Either may take the commit
    where they meet (its changes are then used once); none is left to neither, as the worker moves past
    a commit only once it has diffed it. Shared memory without a lock, as for :class:`BlobWork`."""

    at: Any = field(default_factory=lambda: shared_int(-1))  # the commit the worker is at
    claim: Any = field(default_factory=lambda: shared_int(1 << 62))  # the lowest commit the walk took

    def worker_takes(self, n: int) -> bool:
        self.at.value = n
        return bool(n < self.claim.value)

    def walk_takes(self, n: int) -> bool:
        self.claim.value = n
        return bool(self.at.value <= n)


def commit_changes(
    path: str,
    tags: list[Tag],
    hide: list[str],
    tips: list[str],
    work: BlobWork | None = None,
    split: DiffSplit | None = None,
) -> Iterator[CommitChanges | Trees]:
    """The commits' tree diffs first (:class:`Trees`, the walk's provenance), then each commit's hunks
    and revisions, in the walk's order (run in a forked child beside the ingest: the diffs and the
    hunks' fingerprints are half the work of ``--history``); with
    ``work``, the blobs it brings, hashed (:class:`BlobWork`); with ``split``, up to the commits the
    walk took (:class:`DiffSplit`)."""
    repo = GitRepo(path)
    commits = list(repo.commits(hide, tips))
    trees: list[TreeChanges] = []
    for start in range(0, max(len(commits), 1), TREES_BATCH):
        trees += [tree_changes(repo, commit) for commit in commits[start : start + TREES_BATCH]]
        yield Trees(
            [(t.seen.commit, t.seen.date, t.seen.subject, t.files) for t in trees[start:]],
            sorted(repo.missing_trees),
            last=start + TREES_BATCH >= len(commits),
        )
        repo.missing_trees.clear()
    first_release = repo.first_releases(tags)
    if work is not None:
        work.skip = _TagBlobs(repo, tags, work.skip)
    recent = RecentBlobs()
    for n, (commit, tree) in enumerate(zip(commits, trees, strict=True)):
        if split is not None and not split.worker_takes(n):
            return
        if work is not None:
            work.at = n
        changes = changes_of(repo, commit, first_release, recent, work, tree)
        if work is not None:
            work.pack.flush()  # on disk before the walk hears of it
        yield changes


def fork(
    path: str, tags: list[Tag], hide: list[str], tips: list[str], work: BlobWork
) -> tuple[Feed[CommitChanges | Trees], DiffSplit]:
    """The worker forked now, hashing what its diffs read into ``work``; and the split of the last
    commits' diffs it shares with the walk."""
    split = DiffSplit()
    # buffered: the CLI forks it before its stack starts, seconds before the walk takes anything
    return Feed(commit_changes, path, tags, hide, tips, work, split, buffered=True), split


def inline(path: str, tags: list[Tag], hide: list[str], tips: list[str]) -> Feed[CommitChanges | Trees]:
    """The same changes made in this process, when the walk asks (one CPU: a child would only take
    turns with the walk); the walk then hashes every blob."""
    return Feed(commit_changes, path, tags, hide, tips, fork=False)


class _TagBlobs:
    """Blob ids of every tree of ``tags``, and of ``known``: what the worker leaves to the walk."""

    def __init__(self, repo: GitRepo, tags: list[Tag], known: Any) -> None:
        self.known = known
        self.blobs = repo.blobs_of([tag.commit for tag in tags])

    def __contains__(self, blob: object) -> bool:
        return blob in self.blobs or blob in self.known


@dataclass
class Diffs:
    """What ``--history`` records for review evidence: every commit's change hunks by fingerprint and
    every revision of every path (:mod:`dropscan.store.content`), made by a forked worker
    (:func:`commit_changes`) while the tags and the trees are read by the walk."""

    feed: Feed[CommitChanges | Trees]
    work: BlobWork | None = None  # the worker's share of the blobs (None: the walk hashes them all)
    split: DiffSplit | None = None  # the last commits' diffs, shared (None: the worker diffs all)
    #: fingerprint (path, lines) -> the commits publishing it (Published.to_json()), earliest first
    hunks: dict[str, list[list[Any]]] = field(default_factory=dict)
    #: path -> [[sha256, commit, date, place in the history]]
    revisions: dict[str, list[list[Any]]] = field(default_factory=dict)
    #: the paths renamed: (old path, new path, commit, date, place in the history), parents first
    renames: list[list[Any]] = field(default_factory=list)
    diffs: int = 0
    diffed_here: int = 0  # of them, by the walk (:class:`DiffSplit`)
    failed: int = 0
    waited: float = 0.0  # seconds the walk, done, waited for the worker's last changes
    taken: list[CommitChanges] = field(default_factory=list)

    #: what the worker hashed (blob id -> [sha256, kw, ws], where packed), and lacked (blob id -> path)
    hashed: dict[str, tuple[list[str], Location | None, int]] = field(default_factory=dict)
    lacked: dict[str, str] = field(default_factory=dict)
    reached: int = 0  # commits of the walk the worker has sent
    _trees: deque[Trees] = field(default_factory=deque)

    #: once the walk is done: its commits -> their places; what has come of them is folded into the
    #: index as it comes (during the merge, which ends before the worker does), in the walk's order
    order: dict[str, int] | None = None
    folded: int = 0  # the commits of the walk folded so far (the first ``folded``)
    _come: dict[int, CommitChanges] = field(default_factory=dict)  # come, not folded yet, by place
    _run: Run | None = None

    def poll(self) -> None:
        """Take what the worker has sent (never waits: it is held back only while its pipe is full)."""
        self._take(self.feed.ready())
        if self.order is not None:
            self._fold_ready()

    def more(self) -> None:
        """Take the worker's next batch, waiting for it."""
        self._take(self.feed.more())

    def walked(self, walked: list[str], run: Run) -> None:
        """The walk is done with ``walked`` (all its commits, or those before a checkpoint), and every
        blob is hashed: from now on the changes of those commits are folded into the index as they come."""
        self.order = {c: i for i, c in enumerate(walked)}
        self._run = run
        self._fold_ready()

    def _fold_ready(self) -> None:
        assert self.order is not None and self._run is not None
        for change in self.taken:
            place = self.order.get(change.commit)
            # past a checkpoint: not this run's; where the worker and the walk met, one of the two
            if place is not None and place >= self.folded and place not in self._come:
                self._come[place] = change
        self.taken = []
        while self.folded in self._come:
            self._fold(self._come.pop(self.folded), self._run, self.folded)
            self.folded += 1

    def trees(self, repo: GitRepo) -> Iterator[tuple[str, str, str, list[tuple[str, str]]]]:
        """The worker's tree diffs (:class:`Trees`), commit by commit as they come (the first thing it
        sends); the trees it found missing are added to ``repo``'s."""
        while True:
            while not self._trees:
                if self.feed.done:
                    raise ForkedError("the diff worker ended without its tree diffs")
                self.more()
            batch = self._trees.popleft()
            repo.missing_trees.update(batch.missing_trees)
            yield from batch.commits
            if batch.last:
                return

    def _take(self, items: list[CommitChanges | Trees]) -> None:
        batch: list[CommitChanges] = []
        for item in items:
            if isinstance(item, Trees):
                self._trees.append(item)
            else:
                batch.append(item)
        self.taken.extend(batch)
        self.reached += len(batch)
        for change in batch:
            for blob, digests, where, size in change.blobs:
                self.hashed.setdefault(blob, (digests, where, size))
            for blob, path in change.missing:
                self.lacked.setdefault(blob, path)

    def hashed_by_worker(self, run: Run, entry: Entry) -> bool:
        """Whether the worker hashed (or lacked) the entry's blob: then it is in ``run`` now."""
        got = self.hashed.get(entry.blob)
        if got is not None:
            digests, where, size = got
            run.blobs[entry.blob] = [*digests, ""]
            run.read += 1
            run.bytes_read += size
            if where is not None and digests[0] not in run.where:
                run.where[digests[0]] = where
                run.worker_stored[0] += 1
                run.worker_stored[1] += size
            return True
        path = self.lacked.get(entry.blob)
        if path is not None:
            run.missing[entry.blob] = [path] if path == entry.path else [path, entry.path]
            return True
        return False

    def finish(self, repo: GitRepo, tags: list[Tag]) -> None:
        """The changes of the commits walked, all into the index; the worker is stopped once it has sent
        them (:meth:`walked` first). Meanwhile, the last commits are diffed here (:class:`DiffSplit`)."""
        assert self.order is not None and self._run is not None
        mark = time.perf_counter()
        walked = list(self.order)
        last = len(walked) - 1  # the next commit to diff here, going back
        first_release: dict[str, str] | None = None
        recent = RecentBlobs()
        while self.folded < len(self.order) and not self.feed.done:
            ready = self.feed.ready()
            if not ready and self.split is not None and last >= self.folded and self.split.walk_takes(last):
                if first_release is None:
                    first_release = repo.first_releases(tags)
                commit = repo.repo.get(walked[last])
                assert isinstance(commit, pygit2.Commit)  # a commit the walk read
                self._come[last] = changes_of(repo, commit, first_release, recent)
                self.diffed_here += 1
                last -= 1
                ready = self.feed.ready()
            elif not ready:
                self.split = None  # met: what is left is the worker's
                ready = self.feed.more()
            self._take(ready)
            self._fold_ready()
        self.feed.close()
        self.waited = time.perf_counter() - mark
        for place in sorted(self._come):  # a worker that ended early: what came, in order
            self._fold(self._come.pop(place), self._run, place)

    def _fold(self, change: CommitChanges, run: Run, place: int) -> None:
        """One commit's changes into the index and the revisions, numbered by its place in the history
        (earlier runs' commits first, then the walk's, parents first): review evidence tells before
        from after by that number, as a commit's date may be older than its parent's."""
        self.diffs += change.diffed
        self.failed += change.failed
        commit, date = change.published[0], change.published[2]
        seq = run.history_commits + place
        published = [*change.published[:4], seq]
        for path, blob in change.revisions:
            known = run.blobs.get(blob)
            if known is not None:
                self.revisions.setdefault(path, []).append([known[0], commit, date, seq])
        self.renames.extend([old, new, commit, date, seq] for old, new in change.renames)
        for fp in change.hunks:
            cited = self.hunks.setdefault(fp, [])
            if len(cited) < MAX_PUBLISHED and published not in cited:
                cited.append(published)  # parents first: the earliest first

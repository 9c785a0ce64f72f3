"""Ingest an upstream git repository: its tags as releases, with ``history`` every blob of every commit
with its provenance; incremental (what earlier runs did is in the package's git state).

Each distinct blob is read and hashed once, ever: its digests are kept in the state, so a later run
that meets it in a new tag widens its range without reading it. The database gets one contribution per
digest for the whole run (its range over every new tag holding it), merged shard by shard.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import re
import shutil
import tempfile
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import pygit2
from aws_lambda_powertools import Logger
from pygit2.enums import DeltaStatus, DiffOption

from dropscan import heap
from dropscan.archive.digest import digest_bytes
from dropscan.audit import similarity
from dropscan.audit.hunk_origins import MAX_PUBLISHED, Published, diff, published_list
from dropscan.forked import Feed, ForkedError, Urgent, usable_cpus
from dropscan.gitbundle import init_repo, unbundle
from dropscan.gitrepo import GITLINK, LINK, Entry, FirstSeen, GitRepo, Tag, add_path, first_seen
from dropscan.keys import pack_key, parse_git_bundle_key
from dropscan.models import FileDigests, Release, Trust, VersionRange, version_key
from dropscan.store.content import ContentStore, Location, PackWriter, hunk_shard, path_shard
from dropscan.store.releases import Releases
from dropscan.store.services import Services
from dropscan.store.upstream import Contribution, UpstreamDB, contributions_of

logger = Logger(service="dropscan", child=True)

STATE_FORMAT = 1
EMPTY = digest_bytes(b"")
#: missing blobs named in the report (all are counted)
MISSING_NAMED = 100


@dataclass
class GitIngestOptions:
    tags: str = "*"
    version_from: re.Pattern[str] | None = None
    history: bool = False
    trust: Trust | None = None
    source: str = ""  # what the report names as the repository (a path, a bundle key)
    #: asked after each tag and every 500 commits: True stops the run there, at a checkpoint (what is
    #: done is merged, registered and in the state; the next run goes on from it)
    stop: Callable[[], bool] = field(default=lambda: False)


@dataclass
class _Run:
    """One run's working state: the blobs it knows (from the state and hashed now) and what it found."""

    blobs: dict[str, list[str]]  # blob id -> [sha256, kw, ws, first release tag or ""]
    read: int = 0
    bytes_read: int = 0
    missing: dict[str, list[str]] = field(default_factory=dict)  # blob id -> paths
    #: where each text content lies in the packs (earlier runs' and this run's), for review evidence
    where: dict[str, Location] = field(default_factory=dict)
    sketches: dict[str, str] = field(default_factory=dict)  # sha256 -> line sketch (audit.similarity)
    pack: PackWriter | None = None
    worker_pack: PackWriter | None = None  # the diff worker's (:class:`_BlobWork`), filled in its copy
    worker_stored: list[int] = field(default_factory=lambda: [0, 0])  # its blobs taken: count, bytes
    #: blobs an earlier run met in the history and in no release: a new tag holding one is its first
    #: release, though no new commit brings it (its provenance is written; the tag is noted on it)
    unreleased: set[str] = field(default_factory=set)

    def digests(self, repo: GitRepo, entry: Entry, *, released: bool = False) -> list[str] | None:
        """The blob's [sha256, kw, ws, tag], read and hashed the first time it is met; ``released``
        (a file of a tag): its line sketch too, which only release files need (audit.similarity)."""
        if entry.link:  # a symbolic link: recorded as an archive's walk records one, no content
            return [EMPTY.sha256, EMPTY.sha256, EMPTY.sha256, ""]
        known = self.blobs.get(entry.blob)
        if known is not None:
            if released and known[0] in self.where and known[0] not in self.sketches:
                data = repo.read(entry.blob)  # first met in an earlier run's history
                if data is not None:
                    self.sketches[known[0]] = similarity.encode(similarity.sketch(data))
            return known
        if entry.blob in self.missing:
            paths = self.missing[entry.blob]
            if entry.path not in paths and len(paths) < 4:
                paths.append(entry.path)
            return None
        data = repo.read(entry.blob)
        if data is None:
            self.missing[entry.blob] = [entry.path]
            return None
        d = digest_bytes(data, entry.path)
        self.read += 1
        self.bytes_read += len(data)
        if self.pack is not None and d.kind == "text" and d.sha256 not in self.where and len(data) > 0:
            self.pack.add(d.sha256, data)
            if d.sha256 in self.pack.locations:
                self.where[d.sha256] = self.pack.locations[d.sha256]
        if released and d.sha256 in self.where and d.sha256 not in self.sketches:
            self.sketches[d.sha256] = similarity.encode(similarity.sketch(data))
        known = self.blobs[entry.blob] = [d.sha256, d.kw, d.ws, ""]
        return known


@dataclass(frozen=True, slots=True)
class _CommitChanges:
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


#: a delta of a commit against its parent: (status, path, blob, mode, old blob, old mode)
_Delta = tuple[DeltaStatus, str, str, int, str, int]


@dataclass(frozen=True, slots=True)
class _TreeChanges:
    """One commit's tree against its first parent's: the files it brings ((path, blob) added or
    modified; a root commit's whole tree), and the deltas its diffs need (None: not one parent, or an
    object this copy lacks)."""

    seen: FirstSeen
    files: list[tuple[str, str]]
    deltas: list[_Delta] | None


#: commits of the walk per :class:`_Trees` message
TREES_BATCH = 500


@dataclass(frozen=True, slots=True)
class _Trees(Urgent):
    """What the walk takes from the worker's tree diffs, before any commit's changes, in messages of
    :data:`TREES_BATCH` commits (a walk stopping at a checkpoint takes no more): each commit of the
    walk, in its order, as (id, date, subject, the files it brings); and the trees this copy lacks.
    Every blob of every commit's tree is brought by that commit or is in its first parent's tree, so the
    first commit bringing a blob is the first holding it: its provenance, without reading every tree."""

    commits: list[tuple[str, str, str, list[tuple[str, str]]]]
    missing_trees: list[str]  # met in these commits' trees
    last: bool  # the walk's last commits


def _tree_changes(repo: GitRepo, commit: pygit2.Commit) -> _TreeChanges:
    seen = first_seen(commit)
    if commit.parents:
        try:
            # the binary check reads blobs, and nothing here asks a delta's flags
            diff = repo.repo.diff(commit.parents[0], commit, flags=DiffOption.SKIP_BINARY_CHECK)
            # each DiffFile asked of a delta is a new object: taken once
            sides = [(d.status, d.new_file, d.old_file) for d in diff.deltas]
            deltas: list[_Delta] = [
                (status, new.path, str(new.id), new.mode, str(old.id), old.mode) for status, new, old in sides
            ]
        except (pygit2.GitError, KeyError, ValueError):
            pass  # an object this copy lacks: the whole tree, as far as it has it
        else:
            files = [
                (path, blob)
                for status, path, blob, mode, _, _ in deltas
                if status in (DeltaStatus.ADDED, DeltaStatus.MODIFIED) and mode != LINK and mode != GITLINK
            ]
            return _TreeChanges(seen, files, deltas if len(commit.parents) == 1 else None)
    try:
        entries = repo.files(str(commit.id))
    except (pygit2.GitError, KeyError, ValueError):
        repo.missing_trees.add(str(commit.tree_id))
        entries = []
    return _TreeChanges(seen, [(e.path, e.blob) for e in entries if not e.link], None)


def _shared_int(value: int) -> Any:
    """An int in memory a forked child shares, without a lock: one process writes it, and a lock would
    need /dev/shm, which Lambda lacks."""
    return multiprocessing.get_context("fork").Value("q", value, lock=False)


@dataclass
class _BlobWork:
    """The worker's share of reading, hashing and packing blobs: those a commit adds or modifies that
    no tag holds and no earlier run hashed. The walk takes them from the other end of the history
    (:func:`_hash_pending`) until the two meet, as each blob's read is most of its cost and the worker
    has most of those reads in hand already for its diffs."""

    skip: Any  # blob ids the walk has (an earlier run's) or will have (a tag's): a set or a dict
    pack: PackWriter
    where: dict[str, Location]  # the run's stored contents when the worker was forked
    done: set[str] = field(default_factory=set)
    #: the first commit (by its place in the walk) whose blobs the walk has taken: shared memory
    claimed: Any = field(default_factory=lambda: _shared_int(1 << 62))
    at: int = 0  # the place of the commit the worker is at

    def wants(self, blob: str) -> bool:
        return self.at < self.claimed.value and blob not in self.skip and blob not in self.done

    def hash(self, blob: str, path: str, data: bytes | None, into: _CommitChanges) -> None:
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


@dataclass
class _DiffSplit:
    """The last commits' diffs, shared: once the walk has merged its digests, it diffs commits from the
    last one back while the worker goes on forward, until they meet (the worker would otherwise diff the
    rest alone while the walk waits).

    Each side says where it is, then reads the other's place: the worker takes commit ``n`` only below
    the walk's claim, the walk takes it only while the worker is not past it. Either may take the commit
    where they meet (its changes are then used once); none is left to neither, as the worker moves past
    a commit only once it has diffed it. Shared memory without a lock, as for :class:`_BlobWork`."""

    at: Any = field(default_factory=lambda: _shared_int(-1))  # the commit the worker is at
    claim: Any = field(default_factory=lambda: _shared_int(1 << 62))  # the lowest commit the walk took

    def worker_takes(self, n: int) -> bool:
        self.at.value = n
        return bool(n < self.claim.value)

    def walk_takes(self, n: int) -> bool:
        self.claim.value = n
        return bool(self.at.value <= n)


def _commit_changes(
    path: str,
    tags: list[Tag],
    hide: list[str],
    tips: list[str],
    work: _BlobWork | None = None,
    split: _DiffSplit | None = None,
) -> Iterator[_CommitChanges | _Trees]:
    """The commits' tree diffs first (:class:`_Trees`, the walk's provenance), then each commit's hunks
    and revisions, in the walk's order (run in a forked child beside the ingest: the diffs and the
    hunks' fingerprints are half the work of ``--history``); with
    ``work``, the blobs it brings, hashed (:class:`_BlobWork`); with ``split``, up to the commits the
    walk took (:class:`_DiffSplit`)."""
    repo = GitRepo(path)
    commits = list(repo.commits(hide, tips))
    trees: list[_TreeChanges] = []
    for start in range(0, max(len(commits), 1), TREES_BATCH):
        trees += [_tree_changes(repo, commit) for commit in commits[start : start + TREES_BATCH]]
        yield _Trees(
            [(t.seen.commit, t.seen.date, t.seen.subject, t.files) for t in trees[start:]],
            sorted(repo.missing_trees),
            last=start + TREES_BATCH >= len(commits),
        )
        repo.missing_trees.clear()
    first_release = repo.first_releases(tags)
    if work is not None:
        work.skip = _TagBlobs(repo, tags, work.skip)
    recent = _RecentBlobs()
    for n, (commit, tree) in enumerate(zip(commits, trees, strict=True)):
        if split is not None and not split.worker_takes(n):
            return
        if work is not None:
            work.at = n
        changes = _changes_of(repo, commit, first_release, recent, work, tree)
        if work is not None:
            work.pack.flush()  # on disk before the walk hears of it
        yield changes


class _TagBlobs:
    """Blob ids of every tree of ``tags``, and of ``known``: what the worker leaves to the walk."""

    def __init__(self, repo: GitRepo, tags: list[Tag], known: Any) -> None:
        self.known = known
        self.blobs = repo.blobs_of([tag.commit for tag in tags])

    def __contains__(self, blob: object) -> bool:
        return blob in self.blobs or blob in self.known


class _RecentBlobs:
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


def _changes_of(
    repo: GitRepo,
    commit: pygit2.Commit,
    first_release: dict[str, str],
    recent: _RecentBlobs,
    work: _BlobWork | None = None,
    tree: _TreeChanges | None = None,
) -> _CommitChanges:
    """``tree``: the commit's tree diff, made already (:func:`_tree_changes` makes it otherwise)."""
    if tree is None:
        tree = _tree_changes(repo, commit)
    seen = tree.seen
    published = Published(seen.commit, first_release.get(seen.commit), seen.date, seen.subject).to_json()
    if len(commit.parents) != 1:
        return _CommitChanges(seen.commit, published, [], [], diffed=False)
    if tree.deltas is None:
        return _CommitChanges(seen.commit, published, [], [], diffed=False, failed=True)
    out = _CommitChanges(seen.commit, published, [], [])
    for status, path, blob, mode, old_blob, old_mode in tree.deltas:
        if status not in (DeltaStatus.ADDED, DeltaStatus.MODIFIED) or mode == LINK:
            continue
        out.revisions.append((path, blob))
        if mode == GITLINK:
            continue
        if status != DeltaStatus.MODIFIED or old_mode == LINK:
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


@dataclass
class _Changes:
    """What ``--history`` records for review evidence: every commit's change hunks by fingerprint and
    every revision of every path (:mod:`dropscan.store.content`), made by a forked worker
    (:func:`_commit_changes`) while the tags and the trees are read here."""

    feed: Feed[_CommitChanges | _Trees]
    work: _BlobWork | None = None  # the worker's share of the blobs (None: the walk hashes them all)
    split: _DiffSplit | None = None  # the last commits' diffs, shared (None: the worker diffs all)
    #: fingerprint (path, lines) -> the commits publishing it (Published.to_json()), earliest first
    hunks: dict[str, list[list[Any]]] = field(default_factory=dict)
    revisions: dict[str, list[list[Any]]] = field(default_factory=dict)  # path -> [[sha256, commit, date]]
    diffs: int = 0
    diffed_here: int = 0  # of them, by the walk (:class:`_DiffSplit`)
    failed: int = 0
    waited: float = 0.0  # seconds the walk, done, waited for the worker's last changes
    taken: list[_CommitChanges] = field(default_factory=list)

    #: what the worker hashed (blob id -> [sha256, kw, ws], where packed), and lacked (blob id -> path)
    hashed: dict[str, tuple[list[str], Location | None, int]] = field(default_factory=dict)
    lacked: dict[str, str] = field(default_factory=dict)
    reached: int = 0  # commits of the walk the worker has sent
    _trees: deque[_Trees] = field(default_factory=deque)

    #: once the walk is done: its commits -> their places; what has come of them is folded into the
    #: index as it comes (during the merge, which ends before the worker does), in the walk's order
    order: dict[str, int] | None = None
    folded: int = 0  # the commits of the walk folded so far (the first ``folded``)
    _come: dict[int, _CommitChanges] = field(default_factory=dict)  # come, not folded yet, by place
    _run: _Run | None = None

    def poll(self) -> None:
        """Take what the worker has sent (never waits: it is held back only while its pipe is full)."""
        self._take(self.feed.ready())
        if self.order is not None:
            self._fold_ready()

    def walked(self, walked: list[str], run: _Run) -> None:
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
            self._fold(self._come.pop(self.folded), self._run)
            self.folded += 1

    def trees(self, repo: GitRepo) -> Iterator[tuple[str, str, str, list[tuple[str, str]]]]:
        """The worker's tree diffs (:class:`_Trees`), commit by commit as they come (the first thing it
        sends); the trees it found missing are added to ``repo``'s."""
        while True:
            while not self._trees:
                if self.feed.done:
                    raise ForkedError("the diff worker ended without its tree diffs")
                self._take(self.feed.more())
            batch = self._trees.popleft()
            repo.missing_trees.update(batch.missing_trees)
            yield from batch.commits
            if batch.last:
                return

    def _take(self, items: list[_CommitChanges | _Trees]) -> None:
        batch: list[_CommitChanges] = []
        for item in items:
            if isinstance(item, _Trees):
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

    def hashed_by_worker(self, run: _Run, entry: Entry) -> bool:
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
        them (:meth:`walked` first). Meanwhile, the last commits are diffed here (:class:`_DiffSplit`)."""
        assert self.order is not None and self._run is not None
        mark = time.perf_counter()
        walked = list(self.order)
        last = len(walked) - 1  # the next commit to diff here, going back
        first_release: dict[str, str] | None = None
        recent = _RecentBlobs()
        while self.folded < len(self.order) and not self.feed.done:
            ready = self.feed.ready()
            if not ready and self.split is not None and last >= self.folded and self.split.walk_takes(last):
                if first_release is None:
                    first_release = repo.first_releases(tags)
                commit = repo.repo.get(walked[last])
                assert isinstance(commit, pygit2.Commit)  # a commit the walk read
                self._come[last] = _changes_of(repo, commit, first_release, recent)
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
            self._fold(self._come.pop(place), self._run)

    def _fold(self, change: _CommitChanges, run: _Run) -> None:
        self.diffs += change.diffed
        self.failed += change.failed
        commit, date = change.published[0], change.published[2]
        for path, blob in change.revisions:
            known = run.blobs.get(blob)
            if known is not None:
                self.revisions.setdefault(path, []).append([known[0], commit, date])
        for fp in change.hunks:
            cited = self.hunks.setdefault(fp, [])
            if len(cited) < MAX_PUBLISHED and change.published not in cited:
                cited.append(change.published)  # parents first: the earliest first


@dataclass
class DiffWorker:
    """A ``--history`` run's forked diff worker (:func:`_commit_changes`), with what it was given."""

    feed: Feed[_CommitChanges | _Trees]
    work: _BlobWork
    split: _DiffSplit
    tags: list[Tag]
    hide: list[str]
    ref_tips: list[str]
    folder: tempfile.TemporaryDirectory[str]  # its pack: removed by :meth:`cleanup`, after the upload

    def fits(self, tags: list[Tag], hide: list[str], ref_tips: list[str], run: _Run) -> bool:
        """Whether it was forked with what this run holds (the state's blobs and stored contents)."""
        given = (self.tags, self.hide, self.ref_tips, self.work.skip, self.work.where)
        return given == (tags, hide, ref_tips, run.blobs, run.where)

    def cleanup(self) -> None:
        self.feed.close()
        self.folder.cleanup()


def start_diff_worker(
    repo: GitRepo,
    package: str,
    options: GitIngestOptions,
    *,
    blobs: dict[str, list[str]] | None = None,
    where: dict[str, Location] | None = None,
    hide: list[str] | None = None,
) -> DiffWorker | None:
    """Fork the diff worker of a ``--history`` run; None where the diffs are made inline (one CPU) or
    not at all. Without ``blobs``/``where``/``hide`` (the package's git state), it guesses a package
    new to the database: the CLI forks it so before its local stack starts, and :func:`ingest_git`
    forks another if the state says otherwise."""
    if not options.history or usable_cpus() < 2:
        return None
    tags = repo.tags(options.tags, options.version_from)
    ref_tips = repo.ref_tips()
    folder = tempfile.TemporaryDirectory(suffix=".worker")
    pack = PackWriter(folder.name, pack_key(package, f"git-{uuid.uuid4().hex[:16]}-w"))
    work = _BlobWork(blobs or {}, pack, where or {})
    split = _DiffSplit()
    # buffered: the CLI forks it before its stack starts, seconds before the walk takes anything
    feed = Feed(_commit_changes, repo.path, tags, hide or [], ref_tips, work, split, buffered=True)
    return DiffWorker(feed, work, split, tags, hide or [], ref_tips, folder)


def ingest_git(
    repo: GitRepo,
    package: str,
    db: UpstreamDB,
    releases: Releases,
    options: GitIngestOptions,
    progress: Callable[[str], None] | None = None,
    worker: DiffWorker | None = None,
) -> dict[str, Any]:
    """Ingest what is new in ``repo`` for ``package``; returns the run's report (also stored).

    ``worker``: a diff worker forked already (:func:`start_diff_worker`), this run's if it was given
    what the package's git state holds, else stopped and forked again; this run cleans it up."""
    # millions of entries, digests and provenances, none in a cycle: the collector only walked them
    # (docs/design.md); the few cycles the calls leave wait till the end
    with heap.building():
        return _ingest_git(repo, package, db, releases, options, progress, worker)


def _ingest_git(
    repo: GitRepo,
    package: str,
    db: UpstreamDB,
    releases: Releases,
    options: GitIngestOptions,
    progress: Callable[[str], None] | None,
    worker: DiffWorker | None,
) -> dict[str, Any]:
    say = progress or (lambda _text: None)
    started = time.perf_counter()
    calls_before = db.stats.as_dict()
    state = releases.git_state(package) or {}
    if state.get("format", STATE_FORMAT) != STATE_FORMAT:
        state = {}
    content = ContentStore(releases.s3, releases.bucket)
    stored = state.get("content") or {"packs": [], "loc": {}}
    run = _Run(blobs=state.get("blobs", {}))
    run.unreleased = {blob for blob, known in run.blobs.items() if not known[3]}
    run.where = {sha: (stored["packs"][i], off, n) for sha, (i, off, n) in stored["loc"].items()}
    run.sketches = state.get("sketches", {})
    scratch = tempfile.TemporaryDirectory(suffix=".packs")  # removed below
    run.pack = PackWriter(scratch.name, pack_key(package, f"git-{uuid.uuid4().hex[:16]}"))
    known_missing: dict[str, list[str]] = state.get("missing", {})
    old_tags: dict[str, str] = state.get("tags", {})
    tags = repo.tags(options.tags, options.version_from)
    new_tags = [t for t in tags if old_tags.get(t.name) != t.commit]
    say(f"{len(tags)} tags, {len(new_tags)} new")

    tips: list[str] = state.get("history_tips", [])
    ref_tips = repo.ref_tips()
    with contextlib.ExitStack() as workers:
        # the commits' diffs are made beside the tags and the trees
        changes, worker = _diffs(repo, package, options, run, tags, tips, ref_tips, worker)
        if worker is not None:
            workers.callback(worker.feed.close)
        poll = changes.poll if changes is not None else lambda: None
        hulls, new_tags, newest = _releases(
            repo, package, new_tags, run, releases, content, say, options.stop, poll
        )
        seconds = {"tags": time.perf_counter() - started}
        complete = len(new_tags) == len([t for t in tags if old_tags.get(t.name) != t.commit])

        first_commit: dict[str, FirstSeen] = {}
        commits = 0
        walked: list[str] = []
        if changes is not None and complete:
            mark = time.perf_counter()
            first_commit, commits, walked, tips, complete = _history(
                repo, run, hulls, tips, ref_tips, say, options.stop, changes
            )
            changes.walked(walked, run)
            seconds["history"] = time.perf_counter() - mark
        elif changes is not None:
            changes = None  # the tags stopped at a checkpoint: the history waits for the next run
            run.worker_pack = None  # and what the worker packed meanwhile is not uploaded

        # the database's writes while the diff worker goes on with the last commits
        mark = time.perf_counter()
        contributions = _contributions(package, run, hulls, first_commit)
        ranges: dict[str, Any] = {}
        if new_tags and contributions:  # the highest new tag's digests open, as an archive's are
            wrote = db.write_releases(
                package,
                contributions,
                new_tags[-1].version,
                newest,
                previous=partial(releases.raw_digests, package),
                on_shard=lambda _shard: poll(),
            )
            written, ranges = wrote.items, {"mode": wrote.mode.value, "departed": wrote.departed}
        else:
            written = db.merge(contributions, on_shard=lambda _shard: poll()) if contributions else 0
        seconds["merge"] = time.perf_counter() - mark
        mark = time.perf_counter()
        if changes is not None:
            changes.finish(repo, tags)
    run.pack.close()
    evidence = _store_evidence(content, package, run, changes)
    scratch.cleanup()
    if worker is not None:
        worker.cleanup()
    seconds["evidence"] = time.perf_counter() - mark

    if new_tags:  # last: a registered release has its digests and its path list
        db.register(package, [tag.version for tag in new_tags], options.trust)
    if not new_tags and (options.trust is not None or package not in db.packages([package])):
        db.set_trust(package, options.trust or Trust.HIGH)  # a package known by its history alone

    still_missing = {b: p for b, p in {**known_missing, **run.missing}.items() if b not in run.blobs}
    new_state: dict[str, Any] = {
        "format": STATE_FORMAT,
        "package": package,
        "tags": {**old_tags, **{t.name: t.commit for t in new_tags}},
        "history_tips": tips,
        "blobs": run.blobs,
        "content": _where_json(run.where),
        "sketches": run.sketches,
        # blobs this copy lacked: named again by every later run, read again when met again
        "missing": still_missing,
    }
    changed = bool(new_tags or first_commit or run.read) or tips != state.get("history_tips", [])
    if changed:
        releases.put_git_state(package, new_state)
    missing = sorted(still_missing.items())
    report: dict[str, Any] = {
        "package": package,
        "repository": options.source,
        "complete": complete,
        "tags": {"matching": len(tags), "new": len(new_tags), "versions": [t.version for t in new_tags]},
        "commits": commits,
        "blobs": {
            "known": len(run.blobs),
            "read": run.read,
            "bytes_read": run.bytes_read,
            "in_history": len(first_commit),
            "missing": len(missing),
            "missing_met_now": len(run.missing),
            "missing_named": [{"blob": b, "paths": p} for b, p in missing[:MISSING_NAMED]],
            "missing_trees": sorted(repo.missing_trees)[:MISSING_NAMED],
        },
        "digests": len(contributions),
        "items_written": written,
        "ranges": ranges,
        "evidence": evidence,
        "dynamodb": {k: v - calls_before.get(k, 0) for k, v in db.stats.as_dict().items()},
        "seconds": {k: round(v, 3) for k, v in {**seconds, "total": time.perf_counter() - started}.items()},
    }
    if changed:
        releases.put_git_report(package, report)
    return report


def _diffs(
    repo: GitRepo,
    package: str,
    options: GitIngestOptions,
    run: _Run,
    tags: list[Tag],
    hide: list[str],
    ref_tips: list[str],
    worker: DiffWorker | None,
) -> tuple[_Changes | None, DiffWorker | None]:
    """What makes the run's diffs: ``worker`` if it was given what the state holds (else it is stopped
    and another forked), or on one CPU this process, when the walk asks."""
    if worker is not None and not worker.fits(tags, hide, ref_tips, run):
        worker.cleanup()
        worker = None
    if not options.history:
        return None, worker
    worker = worker or start_diff_worker(repo, package, options, blobs=run.blobs, where=run.where, hide=hide)
    if worker is None:
        return _Changes(Feed(_commit_changes, repo.path, tags, hide, ref_tips, fork=False)), None
    run.worker_pack = worker.work.pack  # and the blobs it reads for them are hashed there too
    return _Changes(worker.feed, worker.work, worker.split), worker


def _releases(
    repo: GitRepo,
    package: str,
    tags: list[Tag],
    run: _Run,
    releases: Releases,
    content: ContentStore,
    say: Callable[[str], None],
    stop: Callable[[], bool],
    between: Callable[[], None],
) -> tuple[dict[str, list[str]], list[Tag], list[FileDigests]]:
    """Each new tag's path list saved; every blob's range over the new tags ([lo, hi] by version); the
    tags done (all, unless ``stop`` said so), and the files of the highest of them. ``between`` is
    called after each tag."""
    hulls: dict[str, list[str]] = {}
    done: list[Tag] = []
    newest: list[list[str]] = []  # the last tag's files' digests
    for n, tag in enumerate(sorted(tags, key=lambda t: version_key(t.version)), 1):
        files: dict[str, str] = {}
        newest = []
        for entry in repo.files(tag.commit):
            known = run.digests(repo, entry, released=True)
            if known is None:
                continue
            files[entry.path] = known[0]
            newest.append(known)
            key = f"link:{known[0]}" if entry.link else entry.blob
            hull = hulls.get(key)
            if hull is None:
                hulls[key] = [tag.version, tag.version]
            else:  # tags go in version order: only the top can move
                hull[1] = tag.version
            if not entry.link and not known[3]:
                known[3] = tag.name
        releases.save(Release(package, tag.version, files))
        stored = {sha: run.where[sha] for sha in files.values() if sha in run.where}
        content.put_release_index(package, tag.version, stored)
        content.put_sketches(
            package, tag.version, {sha: run.sketches[sha] for sha in stored if sha in run.sketches}
        )
        done.append(tag)
        between()
        if n % 20 == 0:
            say(f"tags: {n} of {len(tags)}, {len(run.blobs)} blobs")
        if n < len(tags) and stop():
            say(f"stopping at a checkpoint after {n} of {len(tags)} tags")
            break
    return hulls, done, [FileDigests(sha, kw, ws) for sha, kw, ws, _ in newest]


def _history(
    repo: GitRepo,
    run: _Run,
    hulls: dict[str, list[str]],
    hide: list[str],
    tips: list[str],
    say: Callable[[str], None],
    stop: Callable[[], bool],
    changes: _Changes,
) -> tuple[dict[str, FirstSeen], int, list[str], list[str], bool]:
    """(blob -> its first commit and paths, commits walked, their ids, what the next run hides, whether
    the walk ended) of the commits reachable from ``tips`` and not from ``hide``, from the worker's
    tree diffs (:class:`_Trees`); every blob met is hashed (once), and what the diff worker has sent
    meanwhile is taken.

    Commits come parents first, so the commits walked when ``stop`` says so hold all their own
    ancestors: hiding them (with ``hide``) is where the next run goes on."""
    first_commit: dict[str, FirstSeen] = {}
    commits = 0
    walked: list[str] = []
    pending: list[list[Entry]] = []  # each commit's blobs met first there and not hashed yet
    ended = True
    for commit, date, subject, files in changes.trees(repo):
        commits += 1
        walked.append(commit)
        new: list[Entry] = []
        for path, blob in files:
            prov = first_commit.get(blob)
            if prov is None:
                if hide and blob in run.blobs and blob not in hulls:
                    continue  # met by an earlier run's history: its provenance is written
                prov = first_commit[blob] = FirstSeen(commit, date, subject)
                if blob not in run.blobs:
                    new.append(Entry(path, blob, False))
            add_path(prov, path)
        pending.append(new)
        if commits % 500 == 0:
            changes.poll()
            if stop():
                say(f"stopping at a checkpoint after {commits} commits")
                ended = False
                break
        if commits % 2000 == 0:
            say(f"history: {commits} commits, {len(first_commit)} blobs")
    _hash_pending(repo, run, pending, changes)
    if not ended:
        return first_commit, commits, walked, hide + walked, False
    return first_commit, commits, walked, tips, True


def _hash_pending(repo: GitRepo, run: _Run, pending: list[list[Entry]], changes: _Changes) -> None:
    """Every blob the walk met first, read and hashed: from the last commit back, by the walk, until it
    meets the diff worker coming forward (which hashes what its diffs read: :class:`_BlobWork`); what
    the worker leaves (merges, root commits, a worker inline) the walk hashes too."""
    for n in range(len(pending) - 1, -1, -1):
        if changes.work is not None:
            changes.work.claimed.value = n  # the worker leaves this commit's blobs on
        if n % 16 == 0:
            changes.poll()
        for entry in pending[n]:
            if entry.blob in run.blobs or entry.blob in run.missing:
                continue
            if changes.hashed_by_worker(run, entry):
                continue
            run.digests(repo, entry)


def _where_json(where: dict[str, Location]) -> dict[str, Any]:
    packs = sorted({loc[0] for loc in where.values()})
    number = {k: i for i, k in enumerate(packs)}
    return {"packs": packs, "loc": {sha: [number[k], off, n] for sha, (k, off, n) in where.items()}}


def _store_evidence(
    content: ContentStore, package: str, run: _Run, changes: _Changes | None
) -> dict[str, Any]:
    """Upload this run's pack, and merge its hunks and revisions into the package's shards."""
    assert run.pack is not None
    segments = [*run.pack.segments, *(run.worker_pack.on_disk() if run.worker_pack is not None else [])]
    out: dict[str, Any] = {
        "stored": len(run.pack.locations) + run.worker_stored[0],
        "stored_bytes": run.pack.raw_bytes + run.worker_stored[1],
        "packed_bytes": sum(path.stat().st_size for path, _ in segments),
    }
    content.put_pack(segments)
    if changes is None:
        return out
    hunks: dict[int, dict[str, list[list[Any]]]] = {}
    for fp, pubs in changes.hunks.items():
        hunks.setdefault(hunk_shard(fp), {})[fp] = pubs
    old = content.shards(package, "hunks", hunks)
    for n, new in hunks.items():
        if not old.get(n):  # the lists are the run's, without repeats and cut already
            continue
        kept = {fp: [p.to_json() for p in published_list(raw)] for fp, raw in old[n].items()}
        for fp, pubs in new.items():  # an earlier run's commits are earlier: they come first
            listed = kept.setdefault(fp, [])
            listed.extend(p for p in pubs if p not in listed)
            del listed[MAX_PUBLISHED:]
        hunks[n] = kept
    content.put_shards(package, "hunks", hunks)
    by_shard: dict[int, dict[str, list[list[Any]]]] = {}
    for path, revs in changes.revisions.items():
        by_shard.setdefault(path_shard(path), {})[path] = revs
    old = content.shards(package, "history", by_shard)
    merged: dict[int, Any] = {}
    for n, paths in by_shard.items():
        into = (old.get(n) or {}).get("paths", {})
        for path, revs in paths.items():
            listed = into.setdefault(path, [])
            have = {r[0] for r in listed}
            for sha, c, t in revs:  # each state of a path once, with the commit that first made it
                if sha not in have and sha in run.where:
                    listed.append([sha, c, t, *run.where[sha]])
                    have.add(sha)
        merged[n] = {"paths": into}
    content.put_shards(package, "history", merged)
    if changes.diffs or changes.revisions:  # a run that walked nothing new leaves it as it is
        content.put_meta(package, {"history": True})
    return out | {
        "commits_diffed": changes.diffs,
        "commits_diffed_by_walk": changes.diffed_here,
        "diffs_failed": changes.failed,
        "waited_for_diffs_seconds": round(changes.waited, 3),
        "hunks": len(changes.hunks),
    }


def _contributions(
    package: str, run: _Run, hulls: dict[str, list[str]], first_commit: dict[str, FirstSeen]
) -> dict[str, Contribution]:
    out: dict[str, Contribution] = {}
    for key, (lo, hi) in hulls.items():
        if key.startswith("link:"):
            fd = FileDigests(EMPTY.sha256, EMPTY.sha256, EMPTY.sha256)
            contributions_of([fd], package, VersionRange(lo, hi), into=out)
            continue
        sha, kw, ws, tag = run.blobs[key]
        prov = first_commit.get(key)
        history: dict[str, Any] | None = None
        if prov is not None:
            history = {**prov.as_json(), **({"r": tag} if tag else {})}
        elif tag and key in run.unreleased:
            history = {"r": tag}  # models.earlier_provenance notes it on the provenance written before
        contributions_of([FileDigests(sha, kw, ws)], package, VersionRange(lo, hi), into=out, history=history)
    for blob, prov in first_commit.items():
        if blob in hulls or blob not in run.blobs:
            continue  # in a new release (done above), or missing
        sha, kw, ws, tag = run.blobs[blob]
        history = {**prov.as_json(), **({"r": tag} if tag else {})}
        contributions_of([FileDigests(sha, kw, ws)], package, None, into=out, history=history)
    return out


def ingest_bundle(
    svc: Services, bucket: str, key: str, *, stop: Callable[[], bool] | None = None
) -> dict[str, Any]:
    """Ingest a git bundle uploaded to ``upstream/<package>/git/<name>.bundle``, with its history.

    The repository is put together in scratch space from the packs of the package's earlier bundles
    (an incremental bundle's objects stand on them) and this one's, whose pack is kept beside them.
    Past ``IngestBudgetSeconds`` (or when ``stop`` says so) the run stops at a checkpoint, the git
    state, and sends the ingest queue a message to go on; the next run starts from the state.
    """
    parsed = parse_git_bundle_key(key)
    if parsed is None:
        raise ValueError(f"not a git bundle key: {key!r} (upstream/<package>/git/<name>.bundle)")
    package, _ = parsed
    obj = svc.objects.head(bucket, key)
    trust = Trust(obj.metadata["trust"]) if obj.metadata.get("trust") else None
    if stop is None:
        deadline = time.monotonic() + svc.settings.ingest_budget_seconds
        stop = lambda: time.monotonic() > deadline  # noqa: E731
    work = Path(tempfile.mkdtemp(prefix="git-"))
    try:
        repo_dir = work / "repo.git"
        init_repo(repo_dir)
        pack_dir = repo_dir / "objects" / "pack"
        for stored in svc.releases.git_packs(package):
            svc.releases.get_git_pack(stored, pack_dir)
        unbundled = unbundle(svc.objects.open(bucket, key, obj.version_id), repo_dir)
        if unbundled.pack is not None and unbundled.index is not None:
            svc.releases.put_git_pack(package, unbundled.index)
            svc.releases.put_git_pack(package, unbundled.pack)
        options = GitIngestOptions(history=True, trust=trust, source=f"s3://{bucket}/{key}", stop=stop)
        report = ingest_git(GitRepo(str(repo_dir)), package, svc.upstream(), svc.releases, options)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["bundle_etag"] = obj.etag or ""
    svc.releases.put_git_report(package, report)  # also when nothing was new: the uploader waits on it
    if not report["complete"]:
        svc.work.send_git_resume(bucket, key)
    logger.info("git bundle ingested", extra={"key": key, **{k: report[k] for k in ("complete", "commits")}})
    return report

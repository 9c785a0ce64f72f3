"""Ingest an upstream git repository: its tags as releases, with ``history`` every blob of every commit
with its provenance; incremental (what earlier runs did is in the package's git state).

:mod:`dropscan.git` reads the repository (with ``history``, a forked diff worker beside the walk);
this stage stores what it reads: each new tag's path list and release index, one contribution per
digest for the whole run (its range over every new tag holding it) merged shard by shard, the review
evidence, and the state the next run goes on from.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from aws_lambda_powertools import Logger

from dropscan import heap
from dropscan.forked import Feed, usable_cpus
from dropscan.git import diff_worker, history
from dropscan.git.bundle import init_repo, unbundle
from dropscan.git.commit_diffs import BlobWork, CommitChanges
from dropscan.git.diff_worker import Diffs, DiffSplit, Trees
from dropscan.git.history import Walked
from dropscan.git.repo import FirstSeen, GitRepo, Tag
from dropscan.git.run import EMPTY, Run
from dropscan.keys import pack_key, parse_git_bundle_key
from dropscan.models import FileDigests, Release, Trust, VersionRange, version_key
from dropscan.store.content import ContentStore, Location, PackWriter
from dropscan.store.evidence_shards import merge_hunks, merge_revisions
from dropscan.store.releases import Releases
from dropscan.store.services import Services
from dropscan.store.upstream import UpstreamDB
from dropscan.upstream_rules import Contribution, contributions_of

logger = Logger(service="dropscan", child=True)

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
class DiffWorker:
    """A ``--history`` run's forked diff worker (:mod:`dropscan.git.diff_worker`), with what it was
    given and the pack it fills."""

    feed: Feed[CommitChanges | Trees]
    work: BlobWork
    split: DiffSplit
    pack: PackWriter  # the blobs it hashes, packed: uploaded by the run
    tags: list[Tag]
    hide: list[str]
    ref_tips: list[str]
    folder: tempfile.TemporaryDirectory[str]  # its pack: removed by :meth:`cleanup`, after the upload

    def fits(self, tags: list[Tag], hide: list[str], ref_tips: list[str], run: Run) -> bool:
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
    work = BlobWork(blobs or {}, pack, where or {})
    feed, split = diff_worker.fork(repo.path, tags, hide or [], ref_tips, work)
    return DiffWorker(feed, work, split, pack, tags, hide or [], ref_tips, folder)


@dataclass
class _Done:
    """What the run did, for its report."""

    tags: list[Tag]  # the tags matching
    new_tags: list[Tag]  # those it took (all the new ones, unless it stopped at a checkpoint)
    complete: bool
    walked: Walked  # the history's (none yet: no commit, the tips the state had)
    digests: int = 0
    written: int = 0
    ranges: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def ingest_git(
    repo: GitRepo,
    package: str,
    db: UpstreamDB,
    releases: Releases,
    content: ContentStore,
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
        return _ingest_git(repo, package, db, releases, content, options, progress, worker)


def _ingest_git(
    repo: GitRepo,
    package: str,
    db: UpstreamDB,
    releases: Releases,
    content: ContentStore,
    options: GitIngestOptions,
    progress: Callable[[str], None] | None,
    worker: DiffWorker | None,
) -> dict[str, Any]:
    say = progress or (lambda _text: None)
    started = time.perf_counter()
    calls_before = db.stats.as_dict()
    scratch = tempfile.TemporaryDirectory(suffix=".packs")  # removed below
    pack = PackWriter(scratch.name, pack_key(package, f"git-{uuid.uuid4().hex[:16]}"))
    run = Run.resume(releases.git_state(package), pack)
    tags = repo.tags(options.tags, options.version_from)
    say(f"{len(tags)} tags, {len(run.new_tags(tags))} new")
    ref_tips = repo.ref_tips()
    with contextlib.ExitStack() as workers:
        # the commits' diffs are made beside the tags and the trees
        changes, worker = _diffs(repo, package, options, run, tags, ref_tips, worker)
        if worker is not None:
            workers.callback(worker.feed.close)
        poll = changes.poll if changes is not None else lambda: None
        hulls, new_tags, newest = _releases(
            repo, package, run.new_tags(tags), run, releases, content, say, options.stop, poll
        )
        unwalked = Walked({}, [], run.history_tips, True)
        done = _Done(tags, new_tags, len(new_tags) == len(run.new_tags(tags)), unwalked)
        done.seconds["tags"] = time.perf_counter() - started
        changes = _history(repo, run, hulls, ref_tips, options, say, changes, done)
        # the database's writes while the diff worker goes on with the last commits
        _write_digests(db, releases, package, run, hulls, newest, poll, done)
        mark = time.perf_counter()
        if changes is not None:
            changes.finish(repo, tags)
    pack.close()
    # what the worker packed is uploaded only with the history it was packed for
    worker_pack = worker.pack if worker is not None and changes is not None else None
    done.evidence = _store_evidence(content, package, run, pack, worker_pack, changes)
    scratch.cleanup()
    if worker is not None:
        worker.cleanup()
    done.seconds["evidence"] = time.perf_counter() - mark

    _register(db, package, new_tags, options.trust)
    changed = _save_state(releases, package, run, done)
    calls = {k: v - calls_before.get(k, 0) for k, v in db.stats.as_dict().items()}
    done.seconds["total"] = time.perf_counter() - started
    report = _report(repo, package, options, run, done, calls)
    if changed:
        releases.put_git_report(package, report)
    return report


def _diffs(
    repo: GitRepo,
    package: str,
    options: GitIngestOptions,
    run: Run,
    tags: list[Tag],
    ref_tips: list[str],
    worker: DiffWorker | None,
) -> tuple[Diffs | None, DiffWorker | None]:
    """What makes the run's diffs: ``worker`` if it was given what the state holds (else it is stopped
    and another forked), or on one CPU this process, when the walk asks."""
    hide = run.history_tips
    if worker is not None and not worker.fits(tags, hide, ref_tips, run):
        worker.cleanup()
        worker = None
    if not options.history:
        return None, worker
    worker = worker or start_diff_worker(repo, package, options, blobs=run.blobs, where=run.where, hide=hide)
    if worker is None:
        return Diffs(diff_worker.inline(repo.path, tags, hide, ref_tips)), None
    # and the blobs it reads for them are hashed there too
    return Diffs(worker.feed, worker.work, worker.split), worker


def _releases(
    repo: GitRepo,
    package: str,
    tags: list[Tag],
    run: Run,
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
    run: Run,
    hulls: dict[str, list[str]],
    ref_tips: list[str],
    options: GitIngestOptions,
    say: Callable[[str], None],
    changes: Diffs | None,
    done: _Done,
) -> Diffs | None:
    """With ``history``, the commits not walked before, each blob's provenance, every blob hashed
    (:func:`dropscan.git.history.walk`); from then on the diffs of the commits walked are folded as they
    come. None: no diffs to take (no history, or the tags stopped at a checkpoint and it waits)."""
    if changes is None or not done.complete:
        return None
    mark = time.perf_counter()
    done.walked = history.walk(repo, run, hulls, run.history_tips, ref_tips, say, options.stop, changes)
    done.complete = done.walked.ended
    changes.walked(done.walked.commits, run)
    done.seconds["history"] = time.perf_counter() - mark
    return changes


def _write_digests(
    db: UpstreamDB,
    releases: Releases,
    package: str,
    run: Run,
    hulls: dict[str, list[str]],
    newest: list[FileDigests],
    poll: Callable[[], None],
    done: _Done,
) -> None:
    """The run's contributions merged into the upstream table, the highest new tag's digests open, as
    an archive's are. ``poll`` is called between shards: the diff worker goes on meanwhile."""
    mark = time.perf_counter()
    contributions = _contributions(package, run, hulls, done.walked.first_commit)
    done.digests = len(contributions)
    if done.new_tags and contributions:
        wrote = db.write_releases(
            package,
            contributions,
            done.new_tags[-1].version,
            newest,
            previous=partial(releases.raw_digests, package),
            on_shard=lambda _shard: poll(),
        )
        done.written, done.ranges = wrote.items, {"mode": wrote.mode.value, "departed": wrote.departed}
    elif contributions:
        done.written = db.merge(contributions, on_shard=lambda _shard: poll())
    done.seconds["merge"] = time.perf_counter() - mark


def _store_evidence(
    content: ContentStore,
    package: str,
    run: Run,
    pack: PackWriter,
    worker_pack: PackWriter | None,
    changes: Diffs | None,
) -> dict[str, Any]:
    """Upload this run's packs (the walk's and the diff worker's), and merge its hunks and revisions
    into the package's shards."""
    segments = [*pack.segments, *(worker_pack.on_disk() if worker_pack is not None else [])]
    out: dict[str, Any] = {
        "stored": len(pack.locations) + run.worker_stored[0],
        "stored_bytes": pack.raw_bytes + run.worker_stored[1],
        "packed_bytes": sum(path.stat().st_size for path, _ in segments),
    }
    content.put_pack(segments)
    if changes is None:
        return out
    merge_hunks(content, package, changes.hunks)
    merge_revisions(content, package, changes.revisions, run.where, changes.renames)
    if changes.diffs or changes.revisions:  # a run that walked nothing new leaves it as it is
        content.put_meta(package, {"history": True})
    return out | {
        "commits_diffed": changes.diffs,
        "commits_diffed_by_walk": changes.diffed_here,
        "diffs_failed": changes.failed,
        "waited_for_diffs_seconds": round(changes.waited, 3),
        "hunks": len(changes.hunks),
        "renames": len(changes.renames),
    }


def _register(db: UpstreamDB, package: str, new_tags: list[Tag], trust: Trust | None) -> None:
    """The new tags registered, last (a registered release has its digests and its path list); a
    package known by its history alone, with its trust."""
    if new_tags:
        db.register(package, [tag.version for tag in new_tags], trust)
    if not new_tags and (trust is not None or package not in db.packages([package])):
        db.set_trust(package, trust or Trust.HIGH)


def _save_state(releases: Releases, package: str, run: Run, done: _Done) -> bool:
    """The git state the next run goes on from, saved if this run changed it; whether it did."""
    walked = done.walked
    changed = bool(done.new_tags or walked.first_commit or run.read) or walked.tips != run.history_tips
    if changed:
        releases.put_git_state(package, run.state(package, done.new_tags, walked.tips, len(walked.commits)))
    return changed


def _report(
    repo: GitRepo, package: str, options: GitIngestOptions, run: Run, done: _Done, calls: dict[str, Any]
) -> dict[str, Any]:
    """The run's report: what was new, read, missing, written and stored, its calls and its phases."""
    missing = sorted(run.still_missing().items())
    new_tags = done.new_tags
    return {
        "package": package,
        "repository": options.source,
        "complete": done.complete,
        "tags": {"matching": len(done.tags), "new": len(new_tags), "versions": [t.version for t in new_tags]},
        "commits": len(done.walked.commits),
        "blobs": {
            "known": len(run.blobs),
            "read": run.read,
            "bytes_read": run.bytes_read,
            "in_history": len(done.walked.first_commit),
            "missing": len(missing),
            "missing_met_now": len(run.missing),
            "missing_named": [{"blob": b, "paths": p} for b, p in missing[:MISSING_NAMED]],
            "missing_trees": sorted(repo.missing_trees)[:MISSING_NAMED],
        },
        "digests": done.digests,
        "items_written": done.written,
        "ranges": done.ranges,
        "evidence": done.evidence,
        "dynamodb": calls,
        "seconds": {k: round(v, 3) for k, v in done.seconds.items()},
    }


def _contributions(
    package: str, run: Run, hulls: dict[str, list[str]], first_commit: dict[str, FirstSeen]
) -> dict[str, Contribution]:
    """One contribution per digest for the whole run: each blob of the new tags with its range over
    them (and its provenance, if the walk met it), each blob of the history alone with its provenance."""
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
        repo = GitRepo(str(repo_dir))
        report = ingest_git(repo, package, svc.upstream(), svc.releases, svc.content(), options)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["bundle_etag"] = obj.etag or ""
    svc.releases.put_git_report(package, report)  # also when nothing was new: the uploader waits on it
    if not report["complete"]:
        svc.work.send_git_resume(bucket, key)
    logger.info("git bundle ingested", extra={"key": key, **{k: report[k] for k in ("complete", "commits")}})
    return report

"""Ingest an upstream git repository: its tags as releases, with ``history`` every blob of every commit
with its provenance; incremental (what earlier runs did is in the package's git state).

Each distinct blob is read and hashed once, ever: its digests are kept in the state, so a later run
that meets it in a new tag widens its range without reading it. The database gets one contribution per
digest for the whole run (its range over every new tag holding it), merged shard by shard.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
from aws_lambda_powertools import Logger
from pygit2.enums import DeltaStatus

from dropscan.archive.digest import digest_bytes
from dropscan.audit import similarity
from dropscan.audit.evidence import MAX_PUBLISHED, Published, hunks_of, published_list
from dropscan.gitbundle import init_repo, unbundle
from dropscan.gitrepo import LINK, Entry, FirstSeen, GitRepo, Tag, add_path, first_seen
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


@dataclass
class _Changes:
    """What ``--history`` records for review evidence: every commit's change hunks by fingerprint and
    every revision of every path (:mod:`dropscan.store.content`)."""

    releases: dict[str, str]  # commit -> the first release (by version) that holds it
    #: fingerprint (path, lines) -> the commits publishing it (Published.to_json()), earliest first
    hunks: dict[str, list[list[Any]]] = field(default_factory=dict)
    revisions: dict[str, list[list[Any]]] = field(default_factory=dict)  # path -> [[sha256, commit, date]]
    diffs: int = 0
    failed: int = 0

    def add(self, repo: GitRepo, commit: pygit2.Commit, run: _Run) -> None:
        """The hunks and new revisions of a commit with one parent (a merge's come from its branches)."""
        if len(commit.parents) != 1:
            return
        try:
            diff = repo.repo.diff(commit.parents[0], commit, context_lines=0)
            patches = list(diff)
        except (pygit2.GitError, KeyError, ValueError):
            self.failed += 1  # an object this copy lacks
            return
        self.diffs += 1
        seen = first_seen(commit)
        published = Published(seen.commit, self.releases.get(seen.commit), seen.date, seen.subject).to_json()
        for patch in patches:
            if patch is None:
                continue
            delta = patch.delta
            if delta.status not in (DeltaStatus.ADDED, DeltaStatus.MODIFIED) or delta.new_file.mode == LINK:
                continue
            known = run.blobs.get(str(delta.new_file.id))
            if known is not None:
                self.revisions.setdefault(delta.new_file.path, []).append([known[0], seen.commit, seen.date])
            if delta.status == DeltaStatus.MODIFIED and not delta.is_binary:
                for h in hunks_of(patch):
                    if not h.noise:
                        cited = self.hunks.setdefault(h.fingerprint(delta.new_file.path), [])
                        if len(cited) < MAX_PUBLISHED and published not in cited:
                            cited.append(published)  # parents first: the earliest first


def ingest_git(
    repo: GitRepo,
    package: str,
    db: UpstreamDB,
    releases: Releases,
    options: GitIngestOptions,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Ingest what is new in ``repo`` for ``package``; returns the run's report (also stored)."""
    say = progress or (lambda _text: None)
    started = time.perf_counter()
    calls_before = db.stats.as_dict()
    state = releases.git_state(package) or {}
    if state.get("format", STATE_FORMAT) != STATE_FORMAT:
        state = {}
    content = ContentStore(releases.s3, releases.bucket)
    stored = state.get("content") or {"packs": [], "loc": {}}
    run = _Run(blobs=state.get("blobs", {}))
    run.where = {sha: (stored["packs"][i], off, n) for sha, (i, off, n) in stored["loc"].items()}
    run.sketches = state.get("sketches", {})
    scratch = tempfile.TemporaryDirectory(suffix=".packs")  # removed below
    run.pack = PackWriter(scratch.name, pack_key(package, f"git-{uuid.uuid4().hex[:16]}"))
    known_missing: dict[str, list[str]] = state.get("missing", {})
    old_tags: dict[str, str] = state.get("tags", {})
    tags = repo.tags(options.tags, options.version_from)
    new_tags = [t for t in tags if old_tags.get(t.name) != t.commit]
    say(f"{len(tags)} tags, {len(new_tags)} new")

    hulls, new_tags = _releases(repo, package, new_tags, run, releases, content, say, options.stop)
    seconds = {"tags": time.perf_counter() - started}
    complete = len(new_tags) == len([t for t in tags if old_tags.get(t.name) != t.commit])

    first_commit: dict[str, FirstSeen] = {}
    commits = 0
    tips: list[str] = state.get("history_tips", [])
    changes: _Changes | None = None
    if options.history and complete:
        mark = time.perf_counter()
        changes = _Changes(repo.first_releases(tags))
        first_commit, commits, tips, complete = _history(repo, run, hulls, tips, say, options.stop, changes)
        seconds["history"] = time.perf_counter() - mark
    mark = time.perf_counter()
    run.pack.close()
    evidence = _store_evidence(content, package, run, changes)
    scratch.cleanup()
    seconds["evidence"] = time.perf_counter() - mark

    mark = time.perf_counter()
    contributions = _contributions(package, run, hulls, first_commit)
    written = db.merge(contributions) if contributions else 0
    seconds["merge"] = time.perf_counter() - mark
    for tag in new_tags:  # last: a registered release has its digests and its path list
        db.register(package, tag.version, options.trust)
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
        "evidence": evidence,
        "dynamodb": {k: v - calls_before.get(k, 0) for k, v in db.stats.as_dict().items()},
        "seconds": {k: round(v, 3) for k, v in {**seconds, "total": time.perf_counter() - started}.items()},
    }
    if changed:
        releases.put_git_report(package, report)
    return report


def _releases(
    repo: GitRepo,
    package: str,
    tags: list[Tag],
    run: _Run,
    releases: Releases,
    content: ContentStore,
    say: Callable[[str], None],
    stop: Callable[[], bool],
) -> tuple[dict[str, list[str]], list[Tag]]:
    """Each new tag's path list saved; every blob's range over the new tags ([lo, hi] by version); the
    tags done (all, unless ``stop`` said so)."""
    hulls: dict[str, list[str]] = {}
    done: list[Tag] = []
    for n, tag in enumerate(sorted(tags, key=lambda t: version_key(t.version)), 1):
        files: dict[str, str] = {}
        for entry in repo.files(tag.commit):
            known = run.digests(repo, entry, released=True)
            if known is None:
                continue
            files[entry.path] = known[0]
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
        if n % 20 == 0:
            say(f"tags: {n} of {len(tags)}, {len(run.blobs)} blobs")
        if n < len(tags) and stop():
            say(f"stopping at a checkpoint after {n} of {len(tags)} tags")
            break
    return hulls, done


def _history(
    repo: GitRepo,
    run: _Run,
    hulls: dict[str, list[str]],
    hide: list[str],
    say: Callable[[str], None],
    stop: Callable[[], bool],
    changes: _Changes | None = None,
) -> tuple[dict[str, FirstSeen], int, list[str], bool]:
    """(blob -> its first commit and paths, commits walked, what the next run hides, whether the walk
    ended) of the commits not reachable from ``hide``; every blob met is hashed (once).

    Commits come parents first, so the commits walked when ``stop`` says so hold all their own
    ancestors: hiding them (with ``hide``) is where the next run goes on."""
    first_commit: dict[str, FirstSeen] = {}
    commits = 0
    walked: list[str] = []
    tips = repo.ref_tips()
    for commit, entries in repo.history(hide, tips):
        commits += 1
        walked.append(str(commit.id))
        seen: FirstSeen | None = None
        for entry in entries:
            if entry.link:
                continue
            prov = first_commit.get(entry.blob)
            if prov is None:
                if hide and entry.blob in run.blobs and entry.blob not in hulls:
                    continue  # met by an earlier run's history: its provenance is written
                seen = seen or first_seen(commit)
                prov = first_commit[entry.blob] = FirstSeen(seen.commit, seen.date, seen.subject)
                run.digests(repo, entry)
            add_path(prov, entry.path)
        if changes is not None:
            changes.add(repo, commit, run)
        if commits % 2000 == 0:
            say(f"history: {commits} commits, {len(first_commit)} blobs")
        if commits % 500 == 0 and stop():
            say(f"stopping at a checkpoint after {commits} commits")
            return first_commit, commits, hide + walked, False
    return first_commit, commits, tips, True


def _where_json(where: dict[str, Location]) -> dict[str, Any]:
    packs = sorted({loc[0] for loc in where.values()})
    number = {k: i for i, k in enumerate(packs)}
    return {"packs": packs, "loc": {sha: [number[k], off, n] for sha, (k, off, n) in where.items()}}


def _store_evidence(
    content: ContentStore, package: str, run: _Run, changes: _Changes | None
) -> dict[str, Any]:
    """Upload this run's pack, and merge its hunks and revisions into the package's shards."""
    assert run.pack is not None
    content.put_pack(run.pack.segments)
    out: dict[str, Any] = {
        "stored": len(run.pack.locations),
        "stored_bytes": run.pack.raw_bytes,
        "packed_bytes": run.pack.packed_bytes,
    }
    if changes is None:
        return out
    hunks: dict[int, dict[str, list[list[Any]]]] = {}
    for fp, pubs in changes.hunks.items():
        hunks.setdefault(hunk_shard(fp), {})[fp] = pubs
    old = content.shards(package, "hunks", hunks)
    for n, new in hunks.items():
        kept = {fp: [p.to_json() for p in published_list(raw)] for fp, raw in (old.get(n) or {}).items()}
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
            have = {r[0] for r in into.get(path, ())}
            into.setdefault(path, []).extend(
                [sha, c, t, *run.where[sha]] for sha, c, t in revs if sha not in have and sha in run.where
            )
        merged[n] = {"paths": into}
    content.put_shards(package, "history", merged)
    content.put_meta(package, {"history": True})
    return out | {
        "commits_diffed": changes.diffs,
        "diffs_failed": changes.failed,
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
        history = {**prov.as_json(), **({"r": tag} if tag else {})} if prov else None
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

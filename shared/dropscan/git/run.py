"""One ingest run of a repository: the blobs it knows (the package's git state, what earlier runs
hashed, and what it hashes now) and what it found, and the state it leaves for the next run.

Each distinct blob is read and hashed once, ever: its digests are kept in the state, so a later run
that meets it in a new tag widens its range without reading it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dropscan.archive.digest import digest_bytes
from dropscan.audit import similarity
from dropscan.git.commit_diffs import Location, Pack
from dropscan.git.repo import Entry, GitRepo, Tag

STATE_FORMAT = 1
EMPTY = digest_bytes(b"")


@dataclass
class Run:
    """One run's working state: the blobs it knows (from the state and hashed now) and what it found."""

    blobs: dict[str, list[str]]  # blob id -> [sha256, kw, ws, first release tag or ""]
    read: int = 0
    bytes_read: int = 0
    missing: dict[str, list[str]] = field(default_factory=dict)  # blob id -> paths
    #: where each text content lies in the packs (earlier runs' and this run's), for review evidence
    where: dict[str, Location] = field(default_factory=dict)
    sketches: dict[str, str] = field(default_factory=dict)  # sha256 -> line sketch (audit.similarity)
    pack: Pack | None = None
    worker_stored: list[int] = field(default_factory=lambda: [0, 0])  # its blobs taken: count, bytes
    #: blobs an earlier run met in the history and in no release: a new tag holding one is its first
    #: release, though no new commit brings it (its provenance is written; the tag is noted on it)
    unreleased: set[str] = field(default_factory=set)
    #: what the state says earlier runs did: tag name -> its commit, the history tips walked, and the
    #: blobs this copy lacked (named again by every later run, read again when met again)
    tags_done: dict[str, str] = field(default_factory=dict)
    history_tips: list[str] = field(default_factory=list)
    #: commits earlier runs walked: this run's are numbered on from it, parents first (the order of
    #: ancestry that review evidence tells before from after by; dates lie)
    history_commits: int = 0
    known_missing: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def resume(cls, state: dict[str, Any] | None, pack: Pack | None = None) -> Run:
        """The run that goes on from the package's git state (None, or a format of before: from nothing),
        packing what it reads into ``pack``."""
        state = state or {}
        if state.get("format", STATE_FORMAT) != STATE_FORMAT:
            state = {}
        stored = state.get("content") or {"packs": [], "loc": {}}
        run = cls(blobs=state.get("blobs", {}), pack=pack)
        run.unreleased = {blob for blob, known in run.blobs.items() if not known[3]}
        run.where = {sha: (stored["packs"][i], off, n) for sha, (i, off, n) in stored["loc"].items()}
        run.sketches = state.get("sketches", {})
        run.known_missing = state.get("missing", {})
        run.tags_done = state.get("tags", {})
        run.history_tips = state.get("history_tips", [])
        run.history_commits = int(state.get("history_commits", 0))
        return run

    def new_tags(self, tags: list[Tag]) -> list[Tag]:
        """The tags no earlier run took (or whose commit moved since)."""
        return [t for t in tags if self.tags_done.get(t.name) != t.commit]

    def still_missing(self) -> dict[str, list[str]]:
        """The blobs this copy lacks, known before or met now, and their paths."""
        return {b: p for b, p in {**self.known_missing, **self.missing}.items() if b not in self.blobs}

    def state(self, package: str, new_tags: list[Tag], tips: list[str], walked: int = 0) -> dict[str, Any]:
        """The git state this run leaves (``walked``: the commits of the history it walked): the next
        run goes on from it."""
        return {
            "format": STATE_FORMAT,
            "package": package,
            "tags": {**self.tags_done, **{t.name: t.commit for t in new_tags}},
            "history_tips": tips,
            "history_commits": self.history_commits + walked,
            "blobs": self.blobs,
            "content": _where_json(self.where),
            "sketches": self.sketches,
            # blobs this copy lacked: named again by every later run, read again when met again
            "missing": self.still_missing(),
        }

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


def _where_json(where: dict[str, Location]) -> dict[str, Any]:
    packs = sorted({loc[0] for loc in where.values()})
    number = {k: i for i, k in enumerate(packs)}
    return {"packs": packs, "loc": {sha: [number[k], off, n] for sha, (k, off, n) in where.items()}}

"""Triage's evidence step: each modified file diffed against its upstream base (the matched release's
file), each hunk told apart as upstream's own later change (a backport, with its commit), a revert of
an upstream commit (named, and flagged), or the vendor's; what a ``debian/patches`` series in the drop
says of the file is reported beside.

Runs on the review set only, with the bytes triage read of the drop; the upstream side comes from the
contents, revisions and hunk index the ingests stored (:mod:`dropscan.store.content`).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dropscan.audit import dep3, hunk_origins, hunks, similarity
from dropscan.audit.components import release_paths
from dropscan.audit.hunk_origins import Candidate
from dropscan.audit.hunks import Published, fingerprint, published_list
from dropscan.store.content import ContentStore, Location, hunk_shard, path_shard
from dropscan.store.services import Services

#: the classes whose files get evidence (modified in full; the noise classes briefly)
_NOISE_CLASSES = ("vcs-keywords", "whitespace")
#: other paths (renames, either way) a file's history is followed to
MAX_ALIASES = 8


@dataclass
class _Component:
    """What one identified component needs: its release, where its contents lie, its paths' revisions."""

    package: str
    version: str
    where: dict[str, Location]
    revisions: dict[str, list[list[Any]]] = field(default_factory=dict)
    history: bool = False
    match_pct: float = 100.0
    #: path -> the renames of the file at it, either way: (other path, "from" | "to", place in the history)
    moves: dict[str, list[tuple[str, str, int | None]]] = field(default_factory=dict)

    def aliases(self, path: str) -> list[str]:
        """The other paths of the file at ``path``: the ones it was renamed from or to, transitively
        (within :data:`MAX_ALIASES`)."""
        seen, todo = [path], [path]
        while todo and len(seen) <= MAX_ALIASES:
            for other, _way, _seq in self.moves.get(todo.pop(0), ()):
                if other not in seen:
                    seen.append(other)
                    todo.append(other)
        return seen[1 : MAX_ALIASES + 1]

    def lineage(self, path: str) -> list[list[Any]]:
        """The revisions of the file at ``path`` and of its renamed-from paths before each rename and
        renamed-to paths after it (a path renamed away and later made again is another file)."""
        out = list(self.revisions.get(path, []))
        seen = {path}
        todo = [path]
        while todo and len(seen) <= MAX_ALIASES:
            for other, way, seq in self.moves.get(todo.pop(0), ()):
                if other in seen:
                    continue
                seen.add(other)
                todo.append(other)
                for r in self.revisions.get(other, []):
                    place = r[6] if len(r) > 6 else None
                    if seq is None or place is None or (place <= seq if way == "from" else place >= seq):
                        out.append(r)
        return out

    @property
    def snapshot(self) -> bool:
        """Matching no release well: each file is measured against its nearest upstream state."""
        return self.match_pct < hunk_origins.SNAPSHOT_PCT


@dataclass
class EvidenceReport:
    """What the step did (the manifest's ``stats.evidence``)."""

    files: int = 0
    diffed: int = 0
    candidates: int = 0
    without: int = 0
    similar: int = 0  # added files found close to an upstream file
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    store: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "diffed": self.diffed,
            "candidates": self.candidates,
            "without_diff": self.without,
            "similar": self.similar,
            "seconds": round(self.seconds, 3),
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
            "store": self.store,
        }


@dataclass
class Prefetched:
    """What the evidence step reads of the upstream side before it has the drop's bytes: triage does
    this while its forked child reads the drop again, so the reads cost the scan nothing on that path."""

    components: dict[str, _Component]
    states: dict[str, list[tuple[dict[str, Any], Location]]]  # drop path -> candidate upstream states
    blobs: dict[str, bytes]
    similar: dict[str, _Similar]
    store: ContentStore
    seconds: float = 0.0


@dataclass
class _Similar:
    """A component's release, ready for added files to be traced to it."""

    package: str
    version: str
    index: similarity.SketchIndex
    where: dict[str, Location]
    path_of: dict[str, str]


def prefetch(svc: Services, manifest: Mapping[str, Any]) -> Prefetched:
    """The upstream side: release content indexes, revisions, the candidate bases' bytes, sketches."""
    started = time.perf_counter()
    store = svc.content()
    components = _components(svc, store, manifest)
    states: dict[str, list[tuple[dict[str, Any], Location]]] = {}
    wanted: dict[str, Location] = {}
    for f in manifest["files"]:
        base, comp = f.get("base"), components.get(str(f.get("component", "")))
        if base is None or comp is None or f["class"] != "modified" or f["kind"] != "text":
            continue
        named = _named(comp, base)
        assert named is not None
        states[f["path"]] = _states(comp, base, named)
        wanted.update({st["sha256"]: loc for st, loc in states[f["path"]]})
    blobs = store.blobs(wanted) if wanted else {}
    out = Prefetched(components, states, blobs, _similar_releases(svc, store, manifest), store)
    out.seconds = time.perf_counter() - started
    return out


def add_evidence(
    svc: Services,
    manifest: dict[str, Any],
    content: Mapping[str, bytes],
    truncated: set[str],
    pre: Prefetched | None = None,
) -> EvidenceReport:
    """Write ``evidence`` into the manifest's modified (and noise-class) files, ``similar`` into its
    added ones, then the baselines; ``pre``: the upstream side read already (else read now)."""
    started = time.perf_counter()
    pre = pre or prefetch(svc, manifest)
    report = EvidenceReport()
    report.phases["prefetch"] = pre.seconds
    jobs: list[tuple[dict[str, Any], _Component, list[Candidate]]] = []
    for f in manifest["files"]:
        base = f.pop("base", None)
        comp = pre.components.get(str(f.get("component", "")))
        if comp is None or f["class"] not in ("modified", *_NOISE_CLASSES):
            continue
        report.files += 1
        named = _named(comp, base)
        if f["class"] in _NOISE_CLASSES:
            f["evidence"] = hunk_origins.noise_only(named, f["class"])
            continue
        reason = _cannot_diff(f, base, comp, content, truncated)
        if reason:
            f["evidence"] = hunk_origins.without_diff(named, reason)
            report.without += 1
            continue
        assert named is not None
        states = pre.states.get(f["path"], [])
        # the release's own state is the one without a commit: it wins ties
        jobs.append((f, comp, [Candidate(st, [], preferred="commit" not in st) for st, _ in states]))
    mark = time.perf_counter()
    index = _diff_all(pre.store, jobs, content, pre.blobs)
    stated = _series_statements(manifest, content)
    for f, comp, candidates in jobs:
        usable = [c for c in candidates if c.base["sha256"] in pre.blobs]
        if not usable:
            reason = "the upstream content could not be read"
            f["evidence"] = hunk_origins.without_diff(candidates[0].base if candidates else None, reason)
            report.without += 1
            continue
        snapshot = comp.snapshot or not any(c.preferred for c in usable)
        chosen, nearest = hunk_origins.base_of(usable, index, snapshot=snapshot)
        old, new = pre.blobs[chosen.base["sha256"]], content[f["sha256"]]
        patch = hunks.patch_text(old, new, chosen.base["path"])
        history = _PathHistory(pre.store, comp, chosen.base, index) if comp.history else None
        f["evidence"] = hunk_origins.evidence_of(
            chosen,
            index,
            patch,
            new=new,
            old=old,
            history=history,
            nearest=nearest,
            aliases=comp.aliases(chosen.base["path"]) if comp.history else (),
        )
        f["evidence"]["base_rule"] = "nearest" if snapshot else "release"
        if snapshot:
            f["evidence"]["base_note"] = (
                f"{comp.package} {comp.version} matches {comp.match_pct:g} % of the component: no release"
                " matches it well (a snapshot), so the file is measured against its nearest upstream state"
                if comp.snapshot
                else f"the file's content in {comp.package} {comp.version} is not stored: nearest state"
            )
        said = _stated_for(stated, f["path"])
        if said:
            f["evidence"]["patches"] = said
        report.diffed += 1
        report.candidates += len(usable)
    report.phases["diff"] = time.perf_counter() - mark
    mark = time.perf_counter()
    report.similar = _add_similar(pre, manifest, content)
    report.phases["similar"] = time.perf_counter() - mark
    hunk_origins.settle(manifest)
    report.seconds = time.perf_counter() - started
    report.store = {"gets": pre.store.stats.gets, "bytes_read": pre.store.stats.bytes_read}
    return report


def _components(svc: Services, store: ContentStore, manifest: Mapping[str, Any]) -> dict[str, _Component]:
    """Identified components that have files to diff, with their release's content index."""
    needed = {str(f.get("component", "")) for f in manifest["files"] if f.get("base")}
    out: dict[str, _Component] = {}
    for c in manifest.get("components") or []:
        if not c.get("identified") or c["prefix"] not in needed:
            continue
        comp = _Component(c["package"], c["version"], store.release_index(c["package"], c["version"]) or {})
        comp.match_pct = float(c.get("match_pct") or 100.0)
        comp.history = bool(store.meta(c["package"]).get("history"))
        if comp.history:
            mine = [f for f in manifest["files"] if f.get("component") == c["prefix"] and f.get("base")]
            _read_history(store, comp, {f["base"]["path"] for f in mine})
        out[c["prefix"]] = comp
    return out


def _read_history(store: ContentStore, comp: _Component, paths: set[str]) -> None:
    """The revisions of ``paths`` and of the paths their files were renamed from or to (a few rounds
    of shard reads: each round reads the shards of the renames the last one found)."""
    todo, asked = set(paths), set()
    for _round in range(3):
        if not todo:
            return
        asked |= todo
        shards = store.shards(comp.package, "history", {path_shard(p) for p in todo})
        found: set[str] = set()
        for p in todo:
            shard = shards.get(path_shard(p)) or {}
            if p in shard.get("paths", {}):
                comp.revisions[p] = shard["paths"][p]
            for key, way in (("renamed_from", "from"), ("renamed_to", "to")):
                for other, _commit, _date, *seq in (shard.get(key) or {}).get(p, ()):
                    move = (other, way, seq[0] if seq else None)
                    if move not in comp.moves.setdefault(p, []):
                        comp.moves[p].append(move)
                    found.add(other)
        todo = found - asked


def _named(comp: _Component, base: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The manifest's name of the release state a file is diffed against by default."""
    if base is None:
        return None
    return {"package": comp.package, "version": comp.version, "path": base["path"], "sha256": base["sha256"]}


def _cannot_diff(
    f: Mapping[str, Any],
    base: Mapping[str, Any] | None,
    comp: _Component,
    content: Mapping[str, bytes],
    truncated: set[str],
) -> str | None:
    """Why the file gets no diff, or None."""
    if base is None:
        return f"no file at this path in {comp.package} {comp.version}"
    if f["kind"] != "text":
        return f"a {f['kind']} file: no line diff"
    if f["sha256"] not in content or f["sha256"] in truncated or f.get("triage"):
        return "the drop's file was not read whole (triage limits)"
    if base["sha256"] not in comp.where and not comp.revisions.get(base["path"]):
        return f"the upstream file's content is not stored (ingest of {comp.package} {comp.version})"
    return None


def _states(
    comp: _Component, base: Mapping[str, Any], named: dict[str, Any]
) -> list[tuple[dict[str, Any], Location]]:
    """The upstream states the file may come from: the release's own, then (with a history) the
    revisions of its path nearest the release's in the history's order, each with where its content lies."""
    out: list[tuple[dict[str, Any], Location]] = []
    if base["sha256"] in comp.where:
        out.append((named, comp.where[base["sha256"]]))
    revs = comp.revisions.get(base["path"], [])
    if not revs:
        return out
    when = _order(revs)
    at = next((when(r) for r in revs if r[0] == base["sha256"]), None)
    at = max(map(when, revs)) if at is None else at
    nearest = sorted(revs, key=lambda r: abs(when(r) - at))
    seen = {base["sha256"]}
    for sha, commit, _date, key, off, n in (r[:6] for r in nearest):
        if sha in seen:
            continue
        seen.add(sha)
        state = {
            "package": comp.package,
            "version": None,
            "path": base["path"],
            "sha256": sha,
            "commit": commit,
        }
        out.append((state, (key, off, n)))
        if len(out) > hunk_origins.MAX_CANDIDATES:
            break
    return out


def _similar_releases(svc: Services, store: ContentStore, manifest: Mapping[str, Any]) -> dict[str, _Similar]:
    """The sketch index of each identified component's release that has added text files."""
    prefixes = {
        str(f.get("component", ""))
        for f in manifest["files"]
        if f["class"] == "added" and f["kind"] == "text"
    }
    out: dict[str, _Similar] = {}
    for c in manifest.get("components") or []:
        if not c.get("identified") or c["prefix"] not in prefixes:
            continue
        encoded = store.sketches(c["package"], c["version"])
        release = svc.releases.load(c["package"], c["version"]) if encoded else None
        if release is None:
            continue
        index = similarity.SketchIndex.build({sha: similarity.decode(v) for sha, v in encoded.items()})
        path_of: dict[str, str] = {}
        for path, sha in release_paths(release).items():
            path_of.setdefault(sha, path)
        where = store.release_index(c["package"], c["version"]) or {}
        out[c["prefix"]] = _Similar(c["package"], c["version"], index, where, path_of)
    return out


def _add_similar(pre: Prefetched, manifest: Mapping[str, Any], content: Mapping[str, bytes]) -> int:
    """``similar`` on each added text file close to a file of its component's release at another path
    (a copy the vendor edited): the upstream file, and the share of the added file's lines it holds."""
    picks: list[tuple[dict[str, Any], _Similar, list[str]]] = []
    for f in manifest["files"]:
        rel = pre.similar.get(str(f.get("component", "")))
        if rel is None or f["class"] != "added" or f["sha256"] not in content or f.get("triage"):
            continue
        shas = rel.index.candidates(similarity.sketch(content[f["sha256"]]))
        if shas:
            picks.append((f, rel, shas))
    wanted = {sha: rel.where[sha] for _, rel, shas in picks for sha in shas if sha in rel.where}
    blobs = pre.store.blobs(wanted) if wanted else {}
    found = 0
    for f, rel, shas in picks:
        measured = [(similarity.containment(content[f["sha256"]], blobs[s]), s) for s in shas if s in blobs]
        share, sha = max(measured, default=(0.0, ""))
        if share >= similarity.THRESHOLD and sha in rel.path_of:
            f["similar"] = {
                "package": rel.package,
                "version": rel.version,
                "path": rel.path_of[sha],
                "sha256": sha,
                "similarity": round(100 * share),
            }
            found += 1
    return found


def _seconds(date: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(date.replace("Z", "+00:00")).timestamp()


def _numbered(revs: list[list[Any]]) -> bool:
    """Whether the revisions carry their commit's place in the history (ingests since issue 36)."""
    return bool(revs) and all(len(r) > 6 for r in revs)


def _order(revs: list[list[Any]]) -> Any:
    """What orders a path's revisions as the history does: the place of their commit, parents first
    (ancestry: a commit merged late may bear an old date); revisions stored before, by date."""
    if _numbered(revs):
        return lambda r: float(r[6])
    return lambda r: _seconds(r[2])


def _diff_all(
    store: ContentStore,
    jobs: list[tuple[dict[str, Any], _Component, list[Candidate]]],
    content: Mapping[str, bytes],
    blobs: Mapping[str, bytes],
) -> dict[str, list[Published]]:
    """Diff every candidate; return the hunk index entries of every fingerprint met (batched by shard)."""
    asked: dict[str, set[str]] = {}
    for f, comp, candidates in jobs:
        new = content[f["sha256"]]
        for c in candidates:
            old = blobs.get(c.base["sha256"])
            if old is None:
                continue
            c.hunks = hunks.diff(old, new)
            if comp.history:
                keys = asked.setdefault(comp.package, set())
                for path in (c.base["path"], *comp.aliases(c.base["path"])):
                    for h in c.hunks:
                        key = h.key(path)
                        if key is not None:  # the change, and its opposite (a revert's)
                            keys.update((key, fingerprint(path, h.added, h.removed)))
    index: dict[str, list[Published]] = {}
    for package, fps in asked.items():
        shards = store.shards(package, "hunks", {hunk_shard(fp) for fp in fps})
        for fp in fps:
            raw = shards.get(hunk_shard(fp), {}).get(fp)
            if raw is not None:
                index[fp] = published_list(raw)
    return index


class _PathHistory:
    """The upstream states of one path, read from the packs as the checks of
    :func:`hunk_origins.origins` ask for them (:class:`hunk_origins.History`).

    ingest-git stores each state of a path once, with the first commit making it, so a commit that
    brings back an earlier state has no revision of its own: its states are found by its place in the
    history (parents first: an ancestor's states always come before; date only for data stored before
    places were recorded).
    """

    #: states read to find the commit that undid a change (a bisection in the history's order)
    MAX_READS = 24
    #: states nearest a commit in the history's order looked at when the commit's own is not stored
    NEAR = 3

    def __init__(
        self,
        store: ContentStore,
        comp: _Component,
        base: Mapping[str, Any],
        index: dict[str, list[Published]],
    ) -> None:
        self.store, self.comp, self.path, self.index = store, comp, base["path"], index
        revs = comp.lineage(self.path)
        self.paths = [self.path, *comp.aliases(self.path)]
        self.numbered = _numbered(revs)
        self.revs = sorted(revs, key=_order(revs))
        self.place = {r[1]: i for i, r in enumerate(self.revs)}
        #: the base's own state: a change the base lacks was undone before it
        self.base_at = next((i for i, r in enumerate(self.revs) if r[0] == base["sha256"]), None)
        self._read: dict[str, bytes | None] = {}

    def _content(self, i: int) -> bytes | None:
        sha, _commit, _date, key, off, n = self.revs[i][:6]
        if sha not in self._read:
            self._read[sha] = self.store.blobs({sha: (key, off, n)}).get(sha)
        return self._read[sha]

    def _at(self, pub: Published) -> int:
        """The place of ``pub``'s state, or where its place in the history (else its date) falls among
        the states."""
        if pub.commit in self.place:
            return self.place[pub.commit]
        if self.numbered and pub.seq is not None:
            return bisect.bisect_right([r[6] for r in self.revs], pub.seq)
        return bisect.bisect_right([r[2] for r in self.revs], pub.date or "")

    def states(self, pub: Published, side: str) -> list[bytes]:
        i = self._at(pub)
        own = pub.commit in self.place
        if side == "after":
            picks = [i] if own else list(range(i, min(i + self.NEAR, len(self.revs))))
        else:
            picks = list(range(i - 1, max(i - 1 - self.NEAR, -1), -1))
        return [c for c in map(self._content, picks) if c is not None]

    def undone_by(self, pub: Published, present: Any) -> Published | None:
        """The first state after ``pub``'s (in the history's order, up to the base's) that ``present``
        is false of."""
        if pub.commit not in self.place:
            return None
        return self._first_absent(self.place[pub.commit], present)

    def brought_back(self, present: Any) -> Published | None:
        """The commit that removed what ``present`` looks for, from the latest state before the base's
        holding it (some states, newest first, within :data:`MAX_READS`); None: no state holds it."""
        hi = self.base_at if self.base_at is not None else len(self.revs)
        step = max(1, hi // self.MAX_READS)
        for i in range(hi - 1, -1, -step):
            state = self._content(i)
            if state is not None and present(state):
                return self._first_absent(i, present)
        return None

    def _first_absent(self, lo: int, present: Any) -> Published | None:
        """The first state after ``lo`` (present) that ``present`` is false of, up to the base's: the
        next ones first (states of side branches interleave), then a bisection."""
        hi = self.base_at if self.base_at is not None and self.base_at > lo else len(self.revs) - 1
        for i in range(lo + 1, min(hi, lo + self.MAX_READS) + 1):
            state = self._content(i)
            if state is None:
                return None
            if not present(state):
                found = self._describe(i, [j for j in range(i - 1, lo - 1, -1) if self._holds(j, present)])
                if found.subject is not None:
                    return found
                continue  # not its commit's own change from a state holding the lines: another branch's
            lo = i
        last = self._content(hi) if hi > lo else None
        if last is None or present(last):
            return None
        reads = 0
        while hi - lo > 1 and reads < self.MAX_READS:  # present at lo, absent at hi
            mid = (lo + hi) // 2
            state = self._content(mid)
            reads += 1
            if state is None:
                return None
            lo, hi = (mid, hi) if present(state) else (lo, mid)
        return self._describe(hi, [lo]) if hi - lo == 1 else None

    def _holds(self, j: int, present: Any) -> bool:
        state = self._content(j)
        return state is not None and bool(present(state))

    def _describe(self, i: int, parents: list[int]) -> Published:
        """The commit of state ``i``, with its first release and subject from the hunk index, when its
        diff from one of ``parents`` (states before it holding the lines, nearest first) is its
        commit's own change: the commit removed them (a side branch's state never held them)."""
        _sha, commit, date, *_ = self.revs[i]
        new = self._content(i) or b""
        for j in parents[: self.NEAR]:
            changed = hunks.diff(self._content(j) or b"", new)
            keys = [k for h in changed for p in self.paths if (k := h.key(p))]
            missing = {k for k in keys if k not in self.index}
            if missing:
                shards = self.store.shards(self.comp.package, "hunks", {hunk_shard(k) for k in missing})
                for k in missing:
                    raw = shards.get(hunk_shard(k), {}).get(k)
                    self.index[k] = published_list(raw) if raw is not None else []
            for k in keys:
                found = next((p for p in self.index.get(k, ()) if p.commit == commit), None)
                if found is not None:
                    return found
        return Published(commit, None, date, None)


def _series_statements(manifest: Mapping[str, Any], content: Mapping[str, bytes]) -> dict[str, Any]:
    """Drop path -> what the patches of a ``debian/patches`` series in the drop state of it (DEP-3)."""
    out: dict[str, Any] = {}
    by_path = {f["path"]: f["sha256"] for f in manifest["files"] if f.get("sha256") in content}
    for path, sha in by_path.items():
        if not path.endswith("debian/patches/series"):
            continue
        folder = path.removesuffix("series")
        root = path.removesuffix("debian/patches/series")
        patches = {p.removeprefix(folder): content[s] for p, s in by_path.items() if p.startswith(folder)}
        for target, said in dep3.statements(content[sha], patches).items():
            out.setdefault(root + target, []).extend(said)
    return out


def _stated_for(stated: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    return list(stated.get(path, []))

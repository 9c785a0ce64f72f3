"""Triage's evidence step: each modified file diffed against the upstream state it came from, each hunk
told apart as upstream's own change (a backport, with its commit) or the vendor's.

Runs on the review set only, with the bytes triage read of the drop; the upstream side comes from the
contents, revisions and hunk index the ingests stored (:mod:`dropscan.store.content`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dropscan.audit import evidence
from dropscan.audit.evidence import Candidate, Published, published_list
from dropscan.store.content import ContentStore, Location, hunk_shard, path_shard
from dropscan.store.services import Services

#: the classes whose files get evidence (modified in full; the noise classes briefly)
_NOISE_CLASSES = ("vcs-keywords", "whitespace")


@dataclass
class _Component:
    """What one identified component needs: its release, where its contents lie, its paths' revisions."""

    package: str
    version: str
    where: dict[str, Location]
    revisions: dict[str, list[list[Any]]] = field(default_factory=dict)
    history: bool = False


@dataclass
class EvidenceReport:
    """What the step did (the manifest's ``stats.evidence``)."""

    files: int = 0
    diffed: int = 0
    candidates: int = 0
    without: int = 0
    seconds: float = 0.0
    store: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "diffed": self.diffed,
            "candidates": self.candidates,
            "without_diff": self.without,
            "seconds": round(self.seconds, 3),
            "store": self.store,
        }


def add_evidence(
    svc: Services, manifest: dict[str, Any], content: Mapping[str, bytes], truncated: set[str]
) -> EvidenceReport:
    """Write ``evidence`` into the manifest's modified (and noise-class) files, then the baselines."""
    started = time.perf_counter()
    store = svc.content()
    report = EvidenceReport()
    by_prefix = _components(svc, store, manifest)
    jobs: list[tuple[dict[str, Any], _Component, list[Candidate]]] = []
    wanted: dict[str, Location] = {}
    for f in manifest["files"]:
        base = f.pop("base", None)
        comp = by_prefix.get(str(f.get("component", "")))
        if comp is None or f["class"] not in ("modified", *_NOISE_CLASSES):
            continue
        report.files += 1
        named = _named(comp, base)
        if f["class"] in _NOISE_CLASSES:
            f["evidence"] = evidence.noise_only(named, f["class"])
            continue
        reason = _cannot_diff(f, base, comp, content, truncated)
        if reason:
            f["evidence"] = evidence.without_diff(named, reason)
            report.without += 1
            continue
        assert base is not None and named is not None
        states = _states(comp, base, named)
        wanted.update({s["sha256"]: loc for s, loc in states})
        jobs.append((f, comp, [Candidate(s, [], preferred=s is named) for s, _ in states]))
    blobs = store.blobs(wanted) if wanted else {}
    index = _diff_all(store, jobs, content, blobs)
    for f, _comp, candidates in jobs:
        usable = [c for c in candidates if c.base["sha256"] in blobs]
        if not usable:
            f["evidence"] = evidence.without_diff(
                candidates[0].base, "the upstream content could not be read"
            )
            report.without += 1
            continue
        chosen = evidence.choose(usable, index)
        old = blobs[chosen.base["sha256"]]
        patch = evidence.patch_text(old, content[f["sha256"]], chosen.base["path"])
        f["evidence"] = evidence.evidence_of(chosen, index, patch)
        report.diffed += 1
        report.candidates += len(usable)
    evidence.settle(manifest)
    report.seconds = time.perf_counter() - started
    report.store = {"gets": store.stats.gets, "bytes_read": store.stats.bytes_read}
    return report


def _components(svc: Services, store: ContentStore, manifest: Mapping[str, Any]) -> dict[str, _Component]:
    """Identified components that have files to diff, with their release's content index."""
    needed = {str(f.get("component", "")) for f in manifest["files"] if f.get("base")}
    out: dict[str, _Component] = {}
    for c in manifest.get("components") or []:
        if not c.get("identified") or c["prefix"] not in needed:
            continue
        comp = _Component(c["package"], c["version"], store.release_index(c["package"], c["version"]) or {})
        comp.history = bool(store.meta(c["package"]).get("history"))
        if comp.history:
            mine = [f for f in manifest["files"] if f.get("component") == c["prefix"] and f.get("base")]
            paths = {f["base"]["path"] for f in mine}
            for shard in store.shards(c["package"], "history", {path_shard(p) for p in paths}).values():
                comp.revisions.update((p, shard["paths"][p]) for p in paths if p in shard.get("paths", {}))
        out[c["prefix"]] = comp
    return out


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
    revisions of its path nearest in time to the release's, each with where its content lies."""
    out: list[tuple[dict[str, Any], Location]] = []
    if base["sha256"] in comp.where:
        out.append((named, comp.where[base["sha256"]]))
    revs = comp.revisions.get(base["path"], [])
    if not revs:
        return out
    at = next((r[2] for r in revs if r[0] == base["sha256"]), None) or max(r[2] for r in revs)
    nearest = sorted(revs, key=lambda r: abs(_seconds(r[2]) - _seconds(at)))
    seen = {base["sha256"]}
    for sha, commit, _date, key, off, n in nearest:
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
        if len(out) > evidence.MAX_CANDIDATES:
            break
    return out


def _seconds(date: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(date.replace("Z", "+00:00")).timestamp()


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
            c.hunks = evidence.diff(old, new)
            if comp.history:
                path = c.base["path"]
                asked.setdefault(comp.package, set()).update(
                    h.fingerprint(path) for h in c.hunks if not h.noise
                )
    index: dict[str, list[Published]] = {}
    for package, fps in asked.items():
        shards = store.shards(package, "hunks", {hunk_shard(fp) for fp in fps})
        for fp in fps:
            raw = shards.get(hunk_shard(fp), {}).get(fp)
            if raw is not None:
                index[fp] = published_list(raw)
    return index

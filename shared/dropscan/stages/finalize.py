"""Stage 3, finalize: the chunk results of a complete scan -> every file classed, components resolved,
the classified manifest handed to triage. Exactly one finalize message claims a scan."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dropscan import heap
from dropscan.archive.paths import distinct
from dropscan.audit.classify import file_entry
from dropscan.audit.components import component_of, declared_mismatches, parse_declared, resolve_component
from dropscan.audit.manifest import build_manifest, database_entry
from dropscan.keys import manifest_key, split_tag, walk_order, work_key
from dropscan.models import DigestInfo, FileRecord, PackageInfo, Scan, info_from_json
from dropscan.settings import Settings
from dropscan.stages.remember import remember
from dropscan.store.batch import CallStats
from dropscan.store.scans import now
from dropscan.store.services import Services


@dataclass
class _Gathered:
    """What the lookups of a scan found, merged: its records in walk order and every digest known."""

    records: list[FileRecord] = field(default_factory=list)
    known: dict[str, DigestInfo] = field(default_factory=dict)
    stats: CallStats = field(default_factory=CallStats)
    lookup_seconds: float = 0.0


def finalize_scan(svc: Services, scan_id: str, token: str) -> str | None:
    """Merge the chunk results into the classified manifest and hand it to triage.

    Returns the work key of the classified manifest, None if another run has it (or wrote it).
    """
    started = time.perf_counter()
    scan = _claim(svc, scan_id, token)
    if scan is None:
        return None
    with heap.building():  # a record and a file entry per member of the drop
        gathered = _gather(svc, scan)
        db = svc.upstream()
        everything = db.held()  # what the database held; the e-mail names it (``database``)
        packages = _packages(everything, gathered.known)
        trust = {n: p.trust for n, p in packages.items()}
        files = [file_entry(rec, gathered.known, trust) for rec in gathered.records]
    components = _components(svc, files, packages)
    mismatches = declared_mismatches(parse_declared(scan.metadata.get("components")), components)
    gathered.stats.add(**db.stats.as_dict())
    status, reason = outcome(svc.settings, scan)
    manifest = build_manifest(
        scan_id=scan_id,
        supplier=scan.supplier,
        source=_source(scan),
        status=status,
        reason=reason,
        files=files,
        components=components,
        mismatches=mismatches,
        stats={
            "dynamodb": gathered.stats.as_dict(),
            "chunks": int(scan.chunks_total or 0),
            "seconds": {
                "unpack": scan.unpack_seconds,
                "lookup": round(gathered.lookup_seconds, 3),
                "finalize": round(time.perf_counter() - started, 3),
            },
        },
        created_at=scan.created_at,
        finished_at=now(),
        database=_database(svc.settings, everything),
    )
    if status == "complete":  # a partial or rejected drop is neither compared nor cleared
        remember(svc, scan, manifest)
    return _hand_to_triage(svc, scan_id, manifest)


def _claim(svc: Services, scan_id: str, token: str) -> Scan | None:
    """The scan, if this message (``token``) is the one to finalize it and no manifest is written yet."""
    scan = svc.scans.get(scan_id)
    if scan is None:
        raise LookupError(f"no scan {scan_id}")
    if svc.work.exists(manifest_key(scan.supplier, scan_id)) or not svc.scans.claim_finalize(scan_id, token):
        return None
    return scan


def _gather(svc: Services, scan: Scan) -> _Gathered:
    """The chunks counted done (all of them, unless the sweeper gave up on the scan), merged."""
    out = _Gathered()
    for result in _chunk_results(svc, scan.scan_id, scan.done_chunks):
        out.records.extend(FileRecord.from_json(r) for r in result["records"])
        out.known.update((d, info_from_json(v)) for d, v in result["known"].items())
        out.stats.add(**result["dynamodb"])
        out.lookup_seconds += result["seconds"]
    if len(scan.parts_open or ()) > 1:
        distinct(out.records)  # each part told apart only its own members' paths
    return out


def _chunk_results(svc: Services, scan_id: str, tags: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The chunk results, in the order one walk of the upload would have met their members."""
    for part, seq in (split_tag(t) for t in sorted(tags, key=walk_order)):
        yield svc.work.get_json(work_key(scan_id, "results", seq, part))


def _packages(everything: dict[str, PackageInfo], known: dict[str, DigestInfo]) -> dict[str, PackageInfo]:
    """The packages any known digest belongs to, with their trust and versions."""
    names = {p for info in known.values() for p in info.names}
    return {n: everything[n] for n in sorted(names) if n in everything}


def _database(settings: Settings, everything: dict[str, PackageInfo]) -> dict[str, Any]:
    """The database as the stack knows it: its endpoint (``dropscan up``) or its upstream table."""
    kind, location = ("endpoint", settings.endpoint_url) if settings.endpoint_url else ("stack", None)
    return database_entry(kind, location or settings.upstream_table, settings.upstream_table, everything)


def _components(
    svc: Services, files: list[dict[str, Any]], packages: dict[str, PackageInfo]
) -> list[dict[str, Any]]:
    """Each top folder's component: its upstream release, missing files, and the trust it was taken at."""
    load = svc.releases.load  # at most TOP_CANDIDATES path lists per component, whatever the releases
    by_component: dict[str, list[dict[str, Any]]] = {}
    for f in files:
        by_component.setdefault(component_of(f["path"]), []).append(f)
    components = [resolve_component(p, fs, packages, load) for p, fs in sorted(by_component.items())]
    for c in components:  # the report tells lawyers at which trust level each upstream was taken
        info = packages.get(c["package"]) if c["identified"] else None
        c["trust"] = info.trust.value if info else None
    return components


def _source(scan: Scan) -> dict[str, Any]:
    """The upload, as the manifest names it."""
    return {
        "bucket": scan.bucket,
        "key": scan.key,
        "size": int(scan.source_size or 0),
        "sha256": scan.source_sha256 or None,
        "etag": scan.etag,
        "version_id": scan.version_id,
        "metadata": scan.metadata,
    }


def outcome(settings: Settings, scan: Scan) -> tuple[str, str | None]:
    """The scan's status and reason: its root part's, a limit tripped in another part, or the whole
    upload's limits against what every part unpacked together (each part checked only its lineage)."""
    if scan.status in ("rejected", "failed"):
        return scan.status, scan.reason
    if scan.part_reason:
        return "rejected", scan.part_reason
    parts = len(scan.parts_closed)
    if scan.unpacked_bytes > settings.max_unpacked_gib << 30:
        return "rejected", f"more than {settings.max_unpacked_gib:,} GiB unpacked ({parts} parts together)"
    if scan.members > settings.max_files:
        return "rejected", f"more than {settings.max_files:,} archive members ({parts} parts together)"
    return "complete", scan.reason


def _hand_to_triage(svc: Services, scan_id: str, manifest: dict[str, Any]) -> str:
    """The manifest is written by triage; finalize hands over the classified files."""
    work = work_key(scan_id, "classified", 0)
    svc.work.put_json(work, manifest)
    svc.work.send_triage(scan_id, work)
    return work

"""Ingest: an upstream release archive uploaded to the upstream bucket -> its digests in the upstream
table and its path list beside it, so that scans can set its files aside."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger

from dropscan.archive import ArchiveReadError, walk
from dropscan.forked import forked_iter, usable_cpus
from dropscan.keys import parse_git_bundle_key, parse_upstream_key
from dropscan.models import FileDigests, Release, Trust
from dropscan.store.objects import StoredObject
from dropscan.store.services import Services

logger = Logger(service="dropscan", child=True)


@dataclass(frozen=True, slots=True)
class IngestResult:
    package: str
    version: str
    files: int
    items_written: int
    error: str | None = None


def ingest_release(svc: Services, bucket: str, key: str) -> IngestResult:
    """Hash an upstream release archive into the upstream table and its path list."""
    if parse_git_bundle_key(key) is not None:
        from dropscan.stages.ingest_git import ingest_bundle  # pygit2 only where a bundle comes

        report = ingest_bundle(svc, bucket, key)
        return IngestResult(report["package"], "git", report["blobs"]["read"], report["items_written"])
    obj = svc.objects.head(bucket, key)
    package, version = release_of(obj)
    trust = Trust(obj.metadata["trust"]) if obj.metadata.get("trust") else None
    previous = svc.releases.report(package, version)
    if previous and previous.get("etag") == (obj.etag or "") and previous.get("source") == key:
        # a redelivered event or a repeated upload of the same archive: the release is in already
        if trust:
            svc.upstream().set_trust(package, trust)
        return IngestResult(package, version, int(previous["files"]), 0)
    started = time.perf_counter()
    db = svc.upstream()
    paths: dict[str, str] = {}
    try:
        # digests are written page by page while the walk goes on; an unreadable archive's are taken back
        written = db.merge_release(
            package, version, _walk_release(svc.objects.open(bucket, key), obj.name, paths)
        )
    except ArchiveReadError as e:
        logger.error("upstream archive unreadable", extra={"key": key, "reason": str(e)})
        svc.releases.put_error(package, version, key, str(e))
        return IngestResult(package, version, 0, 0, error=str(e))
    merged = time.perf_counter()
    svc.releases.save(Release(package, version, paths))
    db.register(package, version, trust)  # last: a registered release has its digests and path list
    report = {
        "package": package,
        "version": version,
        "source": key,
        "etag": obj.etag or "",
        "files": len(paths),
        "items_written": written,
        "dynamodb": db.stats.as_dict(),
        # hash and merge overlap: "hash_and_merge" is the walk with the database writes beside it
        "seconds": {
            "hash_and_merge": round(merged - started, 3),
            "release": round(time.perf_counter() - merged, 3),
        },
    }
    svc.releases.put_report(package, version, report)
    logger.info("ingested", extra=report)
    return IngestResult(package, version, len(paths), written)


def release_of(obj: StoredObject) -> tuple[str, str]:
    """(package, version) from the object's metadata, else from its key."""
    parsed = parse_upstream_key(obj.key) or ("", "")
    package = obj.metadata.get("package") or parsed[0]
    version = obj.metadata.get("version") or parsed[1]
    if not package or not version:
        raise ValueError(
            f"cannot tell package and version of {obj.key!r}: use upstream/<package>/<version>/<file>"
        )
    return package, version


def _release_digests(source: Any, name: str) -> Iterator[tuple[str, str, str, str]]:
    """(path, sha256, kw, ws) of every member of an upstream release archive."""
    for rec in walk(source, name, emit_containers=True):
        yield rec.path, rec.sha256, rec.kw, rec.ws


def _walk_release(source: Any, name: str, paths: dict[str, str]) -> Iterator[FileDigests]:
    """The release's digests as its walk goes on (in a forked child when there is a core for it, so that
    the database takes each page while the archive is read on), filling ``paths`` on the way."""
    walked = (
        forked_iter(_release_digests, source, name) if usable_cpus() > 1 else _release_digests(source, name)
    )
    for path, sha256, kw, ws in walked:
        paths[path] = sha256
        yield FileDigests(sha256, kw, ws)

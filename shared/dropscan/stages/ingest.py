"""Ingest: an upstream release archive uploaded to the upstream bucket -> its digests in the upstream
table and its path list beside it, so that scans can set its files aside."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from aws_lambda_powertools import Logger

from dropscan.archive import ArchiveReadError, walk
from dropscan.archive.extract import Extracted, contents_by_digest
from dropscan.audit import component_licence, licenses, similarity
from dropscan.firmware.literals import code_literals, is_source, release_literals
from dropscan.forked import Done, Forked, forked_iter, usable_cpus
from dropscan.keys import pack_key, parse_git_bundle_key, parse_upstream_key
from dropscan.models import FileDigests, Release, Trust
from dropscan.store.content import MAX_STORED, PackWriter
from dropscan.store.objects import StoredObject
from dropscan.store.services import Services
from dropscan.store.work import AWS_ERRORS

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
    same = previous and previous.get("etag") == (obj.etag or "") and previous.get("source") == key
    if same and previous and all(k in previous for k in ("license", "content", "literals")):
        # a redelivered event or a repeated upload of the same archive: the release is in already (a
        # release ingested before its licence, texts and literals were recorded is ingested again, once)
        if trust:
            svc.upstream().set_trust(package, trust)
        return IngestResult(package, version, int(previous["files"]), 0)
    started = time.perf_counter()
    db = svc.upstream()
    paths: dict[str, str] = {}
    sizes: dict[str, int] = {}
    texts: dict[str, int] = {}
    try:
        # the whole walk before any write: an unreadable archive leaves nothing behind
        files = list(_walk_release(svc.objects.open(bucket, key), obj.name, paths, sizes, texts))
    except ArchiveReadError as e:
        logger.error("upstream archive unreadable", extra={"key": key, "reason": str(e)})
        svc.releases.put_error(package, version, key, str(e))
        return IngestResult(package, version, 0, 0, error=str(e))
    # the path list first: once this release is the package's open one, the next closes by it
    svc.releases.save(Release(package, version, paths))
    wrote = db.write_release(package, version, files, previous=partial(svc.releases.raw_digests, package))
    written = wrote.items
    merged = time.perf_counter()
    sources = {d for p, d in paths.items() if is_source(p)} if svc.settings.ingest_literals else set()
    licence, stored, literals = release_licence(svc, obj, paths, sizes, texts, sources)
    licensed = time.perf_counter()
    recorded = record_literals(svc, package, version, literals)
    literal_done = time.perf_counter()
    db.register(package, version, trust)  # last: a registered release has its digests and path list
    report = {
        "package": package,
        "version": version,
        "source": key,
        "etag": obj.etag or "",
        "files": len(paths),
        "items_written": written,
        "ranges": {"mode": wrote.mode.value, "departed": wrote.departed},
        "dynamodb": db.stats.as_dict(),
        # "hash_and_merge": the walk, then the path list and the database writes
        "seconds": {
            "hash_and_merge": round(merged - started, 3),
            "release": round(time.perf_counter() - literal_done, 3),
            "license_and_content": round(licensed - merged, 3),
            "literals": round(literal_done - licensed, 3),  # the recording; reading is in the licence pass
        },
        "license": licence,
        "content": stored,
        "literals": recorded,
    }
    svc.releases.put_report(package, version, report)
    logger.info("ingested", extra=report)
    return IngestResult(package, version, len(paths), written)


def record_literals(svc: Services, package: str, version: str, literals: list[str]) -> dict[str, Any]:
    """The release's chosen literals into the upstream table (store.upstream_literals), for the firmware
    check to name binaries whose source a drop lacks; what was recorded, for the report."""
    if not svc.settings.ingest_literals:
        return {"recorded": 0, "items_written": 0, "reason": "not recorded: INGEST_LITERALS=0"}
    written = svc.literals().record(package, version, literals) if literals else 0
    return {"recorded": len(literals), "items_written": written}


def release_licence(
    svc: Services,
    obj: StoredObject,
    paths: dict[str, str],
    sizes: dict[str, int],
    texts: dict[str, int],
    sources: set[str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The release's licence (component_licence.release_record), computed once, here, for every scan,
    its text files stored for review evidence (store.content), with what was stored, and the string
    literals of its C sources (``sources``: their SHA-256s) that ingest records
    (firmware.literals.release_literals).

    All are read out of one copy of the archive, in a forked child while the licence index loads; a
    failure other than S3's is recorded as the reason no licence (or no content) is known.
    """
    package, version = release_of(obj)
    wanted = component_licence.release_wanted(paths, sizes)
    stored: dict[str, Any] = {"files": 0, "bytes": 0, "packed_bytes": 0}
    try:
        with (
            tempfile.NamedTemporaryFile(dir=svc.settings.scratch_dir, suffix=".release") as spool,
            tempfile.TemporaryDirectory(dir=svc.settings.scratch_dir, suffix=".packs") as pack_dir,
        ):
            if wanted or texts:
                svc.objects.download(obj.bucket, obj.key, obj.version_id, spool)
            key = pack_key(package, f"{version}-{(obj.etag or 'x')[:12]}")
            job = partial(
                _pack_release, spool.name, {**texts, **wanted}, set(wanted), pack_dir, key, sources or set()
            )
            reading = Forked(job) if usable_cpus() > 1 and (wanted or texts) else Done(job())
            with reading:
                detector = licenses.detector(svc.settings.triage_detector)
                content, pack, sketches, literals = reading.result()
            if pack.locations:
                store = svc.content()
                store.put_pack(pack.segments)
                store.put_release_index(package, version, pack.locations)
                store.put_sketches(package, version, sketches)
                stored = {
                    "files": len(pack.locations),
                    "bytes": pack.raw_bytes,
                    "packed_bytes": pack.packed_bytes,
                    "segments": len(pack.segments),
                }
        return component_licence.release_record(paths, content, detector, sizes), stored, literals
    except AWS_ERRORS:
        raise
    except Exception as e:  # errors are data: scans fall back to the drop's own licence files
        logger.exception("release licence not read", extra={"key": obj.key})
        reason = f"not read at ingest: {type(e).__name__}: {e}"[:300]
        return {"license": None, "license_reason": reason}, stored | {"error": reason}, []


def _pack_release(
    spool: str, wanted: dict[str, int], keep: set[str], pack_dir: str, key: str, sources: set[str]
) -> tuple[dict[str, bytes], PackWriter, dict[str, str], list[str]]:
    """(licence files' bytes, the pack of every text file, their line sketches, the chosen literals of
    the ``sources``) of a release copy: the C sources' literals come from the bytes the pack reads."""
    sketches: dict[str, str] = {}
    literals: set[str] = set()
    with PackWriter(pack_dir, key) as pack:

        def sink(digest: str, data: bytes) -> bool:
            pack.add(digest, data)
            if digest not in sketches:
                sketches[digest] = similarity.encode(similarity.sketch(data))
                if digest in sources:
                    literals.update(code_literals(data.decode("utf-8", "replace")))
            return digest in keep

        got = contents_by_digest(spool, wanted, sink=sink) if wanted else Extracted()
    return {d: b for d, b in got.content.items() if d in keep}, pack, sketches, release_literals(literals)


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


def _release_digests(source: Any, name: str) -> Iterator[tuple[str, str, str, str, int, bool]]:
    """(path, sha256, kw, ws, size, is text) of every member of an upstream release archive."""
    for rec in walk(source, name, emit_containers=True):
        yield rec.path, rec.sha256, rec.kw, rec.ws, rec.size, rec.kind == "text"


def _walk_release(
    source: Any, name: str, paths: dict[str, str], sizes: dict[str, int], texts: dict[str, int]
) -> Iterator[FileDigests]:
    """The release's digests as its walk goes on (in a forked child when there is a core for it),
    filling ``paths`` on the way (and ``texts``: the text files small enough to be stored for evidence)."""
    walked = (
        forked_iter(_release_digests, source, name) if usable_cpus() > 1 else _release_digests(source, name)
    )
    for path, sha256, kw, ws, size, text in walked:
        paths[path] = sha256
        sizes[path] = size
        if text and 0 < size <= MAX_STORED:
            texts[sha256] = size
        yield FileDigests(sha256, kw, ws)

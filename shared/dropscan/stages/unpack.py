"""Stage 1, unpack: an upload (or a part of one) -> every file hashed, in chunks on the lookup queue.

A drop is walked as a stream (``dropscan.archive``); a nested archive too big for this invocation is
handed to a part of its own, a big zip is split by its central directory, and a tar that outlasts this
invocation's budget is resumed by the next one at a checkpointed offset. Each part closes itself in the
scans table; the update that completes the scan hands it to finalize.
"""

from __future__ import annotations

import dataclasses
import hashlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from aws_lambda_powertools import Logger

from dropscan.archive import ArchiveReadError, LimitExceeded, Nested, Progress, Split, walk, walk_nested
from dropscan.archive.inflate import PlainStream, plain_stream
from dropscan.archive.zipsplit import Terminated, plan
from dropscan.keys import ROOT, next_segment, parse_drop_key, scan_id_for, segment
from dropscan.models import FileRecord, Scan, Upload
from dropscan.stages.unpack_send import ChunkSender, PartSender, ProgressSender, open_part
from dropscan.store.idempotency import once
from dropscan.store.objects import StoredObject
from dropscan.store.services import Services

logger = Logger(service="dropscan", child=True)


@dataclass
class _Outcome:
    """How a walk ended: ``status`` stays "scanning" unless the upload is rejected or failed."""

    status: str = "scanning"
    reason: str | None = None


@dataclass(frozen=True)
class _Walked:
    """What a part's walk tells the scan item as the part closes (see ``ScanStore.close_part``)."""

    chunks: int = 0
    unpacked: int = 0
    members: int = 0
    seconds: float | None = None
    size: int | None = None
    sha256: str | None = None
    reason: str | None = None
    status: str | None = None


class HashingReader:
    """Wraps a stream: SHA-256 and size of everything read through it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data: bytes = self._stream.read(n)
        self._sha.update(data)
        self.size += len(data)
        return data

    def readable(self) -> bool:
        return True

    def drain(self) -> None:
        """Read what the archive reader left (tar padding, trailing garbage) so the digest is whole."""
        while self.read(1 << 20):
            pass

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


# ------------------------------------------------------------------ an upload
def unpack_upload(svc: Services, bucket: str, key: str) -> str | None:
    """Hash every file of an uploaded drop into chunks; returns the scan id, None for a duplicate."""
    obj = svc.objects.head(bucket, key)
    # a redelivered event (same object version) stops here; a repeated upload, at the scan id
    identity = {"bucket": bucket, "key": key, "version": obj.version_id or obj.etag or ""}
    return once(svc, "unpack", _unpack_object, svc=svc, obj=obj, identity=identity)


def _unpack_object(*, svc: Services, obj: StoredObject, identity: dict[str, str]) -> str | None:
    """Begin the scan, reject what is no drop, then split a big zip or walk the upload."""
    scan_id = scan_id_for(obj.bucket, obj.key, obj.etag)
    parsed = parse_drop_key(obj.key)
    upload = Upload(
        bucket=obj.bucket,
        key=obj.key,
        etag=obj.etag,
        version_id=obj.version_id,
        supplier=parsed[0] if parsed else "unknown",
        metadata=obj.metadata,
    )
    if svc.scans.begin(scan_id, upload) is None and not _redo(svc, scan_id):
        logger.info("duplicate upload event", extra={"scan_id": scan_id})
        return None
    logger.append_keys(scan_id=scan_id, supplier=upload.supplier)
    if parsed is None or obj.size == 0:
        walked = _rejected(obj, parsed is not None)
    else:
        source = {
            "bucket": obj.bucket,
            "key": obj.key,
            "version_id": obj.version_id,
            "name": parsed[1].rsplit("/", 1)[-1],
        }
        walked = _split_zip(svc, scan_id, source, obj.size) or _hash_into_chunks(svc, scan_id, source)
    _close(svc, scan_id, ROOT, walked)
    return scan_id


def _redo(svc: Services, scan_id: str) -> bool:
    """For an existing scan: True to redo the unpack (an earlier attempt died before counting chunks)."""
    scan = svc.scans.get(scan_id)
    if scan is None or scan.finalized_at is not None:
        return False
    if not scan.part_closed(ROOT):
        return True
    _close(svc, scan_id, ROOT, scan)
    return False


def _close(svc: Services, scan_id: str, part: str, walked: _Walked | Scan) -> None:
    """Close ``part`` in the scan item with what its walk found, and hand the scan to finalize if that
    update completed it. Given the scan instead (the part was closed by an earlier run, which may have
    died before handing it on): hand it on if it is complete."""
    if isinstance(walked, Scan):
        complete = walked.is_complete()
    else:
        complete = svc.scans.close_part(
            scan_id,
            part,
            walked.chunks,
            unpacked=walked.unpacked,
            members=walked.members,
            seconds=walked.seconds,
            size=walked.size,
            sha256=walked.sha256,
            reason=walked.reason,
            status=walked.status,
        )
    if complete:
        svc.work.send_finalize(scan_id)


def _rejected(obj: StoredObject, under_drops: bool) -> _Walked:
    """An empty upload, or one outside ``drops/<supplier>/``: the scan ends rejected, with no files."""
    why = "empty upload" if under_drops else f"upload key {obj.key!r} is not under drops/<supplier>/<name>"
    sha = hashlib.sha256().hexdigest() if not obj.size else ""
    return _Walked(size=obj.size, sha256=sha, reason=why, status="rejected")


def _split_zip(svc: Services, scan_id: str, source: dict[str, Any], size: int) -> _Walked | None:
    """Hand the ranges of a big zip upload to parts of their own; None if it is not one to split.

    This invocation then reads the upload once, whole, for its size and SHA-256 (no member is walked
    here): what the root part closes with, no chunks of its own.
    """
    part_bytes = svc.settings.zip_part_mib << 20
    if not svc.work.fans_out or not part_bytes or size <= part_bytes:
        return None
    started = time.perf_counter()
    view = svc.objects.ranged(source["bucket"], source["key"], source["version_id"], size)
    ranges = plan(view, part_bytes)
    if ranges is None or len(ranges) < 2:
        return None
    for zip_range in ranges:
        part = segment(ROOT, zip_range.index)
        open_part(svc, {"scan_id": scan_id, "part": part, "source": source, "range": zip_range.to_json()})
    raw = HashingReader(svc.objects.open(source["bucket"], source["key"], source["version_id"]))
    raw.drain()
    logger.info("split zip", extra={"parts": len(ranges), "bytes": raw.size, "reads": view.requests})
    return _Walked(seconds=time.perf_counter() - started, size=raw.size, sha256=raw.hexdigest())


def _skip(stream: Any, count: int) -> None:
    """Read and drop ``count`` bytes: where a resumed segment of a compressed tar starts."""
    while count > 0:
        data = stream.read(min(count, 1 << 20))
        if not data:
            raise ArchiveReadError("the upload ended before the offset its walk was resumed at")
        count -= len(data)


def _budget(svc: Services, started: float, progress: Progress) -> Split | None:
    """When this invocation stops a top-level tar: past its time budget or its byte budget."""
    if not svc.work.fans_out:
        return None  # nowhere to send the rest
    deadline = started + svc.settings.unpack_budget_seconds
    limit = svc.settings.unpack_budget_mib << 20
    first = progress.total

    def stop(now: Progress) -> bool:
        return time.perf_counter() > deadline or bool(limit and now.total - first >= limit)

    return Split(stop)


def _is_known(svc: Services) -> Callable[[str], bool]:
    """Whether a nested archive is a known upstream file (kept whole, not unpacked), asked once each."""
    return lru_cache(maxsize=None)(svc.upstream().is_known)


def _hash_into_chunks(
    svc: Services,
    scan_id: str,
    source: dict[str, Any],
    part: str = ROOT,
    resume: dict[str, Any] | None = None,
    zip_range: dict[str, Any] | None = None,
) -> _Walked:
    """Stream the upload (or, ``resume``, the rest of it) through the walker into chunks; returns what
    the part closes with (its chunks counted).

    A resumed segment reads the upload from its start again: it decompresses and drops what earlier
    segments walked (nothing hashed but the upload's own SHA-256), so that the segment that gets to
    the end has read every byte of the upload and can tell its SHA-256. A ``zip_range`` (of
    :func:`_split_zip`) reads only its bytes of the upload, and never tells its SHA-256.
    """
    started = time.perf_counter()
    window = {"start": zip_range["start"], "end": zip_range["end"]} if zip_range else {}
    raw = HashingReader(svc.objects.open(source["bucket"], source["key"], source["version_id"], **window))
    sender = ChunkSender.of(svc, scan_id, part)
    parts = PartSender.of(svc, scan_id, part, defer=False)
    progress = Progress(*(resume or zip_range or {}).get("spent", (0, 0)))
    spent = dataclasses.replace(progress)
    split = _budget(svc, started, progress)
    reports = ProgressSender.of(svc, scan_id, part, progress, spent)
    outcome = _Outcome()
    stream: Any = Terminated(raw) if zip_range else raw
    if resume and resume["codec"]:
        stream = plain_stream(raw, resume["codec"])
    try:
        if resume:
            _skip(stream, resume["offset"])
        walked = walk(
            stream,
            source["name"],
            is_known=_is_known(svc),
            limits=svc.settings.walk_limits(),
            fan_out=parts,
            progress=progress,
            split=split,
        )
        for rec in walked:
            sender.add(rec)
            reports.tick()
    except LimitExceeded as e:  # a bomb, or more than the template allows: not something to scan
        outcome = _Outcome("rejected", f"{e.reason} (after {sender.files} files)")
    except ArchiveReadError as e:
        outcome = _Outcome("failed", f"archive is corrupt or truncated after {sender.files} files: {e}")
    finally:
        if isinstance(stream, PlainStream):
            stream.close()
    sender.flush()
    stopped = split is not None and split.offset is not None
    if split is not None and split.offset is not None:
        _resume_later(svc, scan_id, part, source, resume, split, progress)
    else:
        raw.drain()
    handed = parts.handed if parts else 0
    if part == ROOT and sender.files == 0 and not handed and not stopped and outcome.status == "scanning":
        outcome = _Outcome("rejected", "archive holds no files")
    extra = {"files": sender.files, "chunks": sender.chunks, "bytes": raw.size, "parts": handed}
    extra["progress_reports"] = reports.sent
    logger.info("unpacked", extra={**extra, "stopped": stopped})
    return _Walked(
        sender.chunks,
        unpacked=progress.total - spent.total,
        members=progress.members - spent.members,
        seconds=time.perf_counter() - started,
        # only the segment that read the upload to its end has all of it in its digest
        size=None if stopped or zip_range else raw.size,
        sha256=None if stopped or zip_range else raw.hexdigest(),
        reason=outcome.reason,
        status=outcome.status,
    )


def _resume_later(
    svc: Services,
    scan_id: str,
    part: str,
    source: dict[str, Any],
    resume: dict[str, Any] | None,
    split: Split,
    progress: Progress,
) -> None:
    """The rest of the tar: another invocation, opened before this one closes its part."""
    assert split.offset is not None
    base, codec = (resume["offset"], resume["codec"]) if resume else (0, split.codec)
    checkpoint = {"offset": base + split.offset, "codec": codec, "spent": [progress.members, progress.total]}
    open_part(svc, {"scan_id": scan_id, "part": next_segment(part), "source": source, "resume": checkpoint})


# ------------------------------------------------------------------ a part of an upload
def unpack_part(svc: Services, message: dict[str, Any]) -> str | None:
    """Unpack a part of an upload: a resumed segment, a zip range, or a nested archive fanned out of
    another part; None if the part was done before."""
    scan_id, part = str(message["scan_id"]), str(message["part"])
    scan = svc.scans.get(scan_id)
    if scan is None or scan.finalized_at is not None:
        return None
    if scan.part_closed(part):  # a redelivered part message
        _close(svc, scan_id, part, scan)
        return None
    logger.append_keys(scan_id=scan_id, part=part)
    if "resume" in message:  # the upload's walk, resumed where an earlier invocation stopped it
        walked = _hash_into_chunks(svc, scan_id, message["source"], part, resume=message["resume"])
    elif "range" in message:  # members of a zip upload, a range of its central directory
        walked = _hash_into_chunks(svc, scan_id, message["source"], part, zip_range=message["range"])
    else:
        walked = _unpack_nested(svc, scan_id, part, message)
    _close(svc, scan_id, part, walked)
    return part


def _unpack_nested(svc: Services, scan_id: str, part: str, message: dict[str, Any]) -> _Walked:
    """A nested archive, from its spooled copy: its members into chunks, its own nested archives on."""
    started = time.perf_counter()
    spent = Progress(*message["spent"])
    nested = Nested(FileRecord.from_json(message["record"]), message["fmt"], int(message["depth"]), 0, spent)
    sender = ChunkSender.of(svc, scan_id, part)
    parts = PartSender.of(svc, scan_id, part, defer=True)
    progress = dataclasses.replace(spent)
    reports = ProgressSender.of(svc, scan_id, part, progress, spent)
    outcome = _Outcome(status="")
    whole = 0  # records that are the nested archive itself, left one file
    scratch = svc.settings.scratch_dir
    with tempfile.TemporaryFile(dir=scratch) as spool:
        svc.work.get_file(message["key"], spool)
        walked = walk_nested(
            spool,
            nested,
            is_known=_is_known(svc),
            spool_dir=scratch,
            limits=svc.settings.walk_limits(),
            fan_out=parts,
            progress=progress,
        )
        try:
            for rec in walked:
                whole += rec.path == nested.record.path
                sender.add(rec)
                reports.tick()
        except LimitExceeded as e:  # a bound of the whole upload: the scan is rejected, as in-process
            where = f"in {nested.record.path}, after {sender.files} of its files"
            outcome = _Outcome("rejected", f"{e.reason} ({where})")
    sender.flush()
    if parts is not None and not outcome.status and not (whole and sender.files == 1):
        parts.release()  # it unpacked: its own nested archives are parts of the scan too
    extra = {"files": sender.files, "chunks": sender.chunks, "progress_reports": reports.sent}
    logger.info("unpacked part", extra=extra)
    return _Walked(
        sender.chunks,
        unpacked=progress.total - spent.total,
        members=progress.members - spent.members,
        seconds=time.perf_counter() - started,
        reason=outcome.reason,
        status=outcome.status or None,
    )

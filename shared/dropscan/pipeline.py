"""The stages of a scan, one function each: unpack, lookup, finalize, triage, notify; ingest of upstreams."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import IO, Any
from urllib.parse import unquote_plus

from aws_lambda_powertools import Logger
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

from dropscan import heap, licenses, reports, triage, zipsplit
from dropscan.archive import (
    MAGIC_SPAN,
    ArchiveReadError,
    LimitExceeded,
    Nested,
    Progress,
    Split,
    compressor_of,
    walk,
    walk_nested,
)
from dropscan.classify import classify
from dropscan.components import component_of, declared_mismatches, parse_declared, resolve_component
from dropscan.dynamo import CallStats
from dropscan.extract import Extracted, SourceFailed, contents_by_digest, streamed_contents
from dropscan.forked import Done, Forked, forked_iter, usable_cpus
from dropscan.idempotency import once
from dropscan.inflate import CODECS, PlainStream, plain_stream
from dropscan.manifest import REPORT_FORMATS, build_manifest, manifest_key, report_key, to_json
from dropscan.models import FileRecord, Trust
from dropscan.paths import distinct
from dropscan.releases import (
    Release,
    load_release,
    parse_archive_name,
    release_error_key,
    release_report_key,
    save_release,
)
from dropscan.scans import (
    ROOT,
    ScanItem,
    Upload,
    child_part,
    chunk_tag,
    is_complete,
    next_segment,
    now,
    part_closed,
    segment,
    split_tag,
    walk_order,
)
from dropscan.services import Services
from dropscan.summary import body, message_attributes, subject
from dropscan.upstream_db import DigestInfo, FileDigests, info_from_json, info_to_json

logger = Logger(service="dropscan", child=True)

DROP_PREFIX = "drops/"
UPSTREAM_PREFIX = "upstream/"
#: the drop is read again in 64 MiB ranges: still parallel for a big drop on AWS, and moto copies its
#: whole object for every ranged GET (the kernel drop, 283 MB: 4.5 s in 8 MiB ranges, 0.8 s in 64 MiB)
DOWNLOAD_PARTS = TransferConfig(multipart_threshold=64 * 1024**2, multipart_chunksize=64 * 1024**2)
INLINE_CHUNK_LIMIT = 200_000  # bytes; SQS takes 256 KiB, the rest goes to S3 with a pointer
_SUPPLIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


# ------------------------------------------------------------------ keys and ids
def object_key(raw: str) -> str:
    """S3 event keys arrive URL-encoded (spaces as '+')."""
    return unquote_plus(raw)


def parse_drop_key(key: str) -> tuple[str, str] | None:
    """``drops/<supplier>/<name>`` -> (supplier, name); None when the key does not follow the layout."""
    if not key.startswith(DROP_PREFIX):
        return None
    parts = key[len(DROP_PREFIX) :].split("/", 1)
    if len(parts) != 2 or not parts[1] or not _SUPPLIER.match(parts[0]):
        return None
    return parts[0], parts[1]


def scan_id_for(bucket: str, key: str, etag: str | None) -> str:
    """Deterministic: a redelivered event or a repeated upload of the same bytes is the same scan."""
    return "s-" + hashlib.sha256(f"{bucket}\0{key}\0{etag}".encode()).hexdigest()[:24]


def work_key(scan_id: str, kind: str, seq: int, part: str = ROOT) -> str:
    """The S3 key of a chunk, a chunk's result, or the classified files (the root part's keys as before)."""
    where = f"{seq:06d}" if part == ROOT else f"{part}/{seq:06d}"
    return f"work/{scan_id}/{kind}/{where}.json.gz"


def part_key(scan_id: str, part: str) -> str:
    """Where a fanned-out nested archive waits for the invocation that unpacks it."""
    return f"work/{scan_id}/parts/{part}.bin"


# ------------------------------------------------------------------ streaming helpers
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


def _gz_json(data: Any) -> bytes:
    # work files live for one scan: level 1 compresses a kernel's classified manifest (27 MB of JSON)
    # in 0.16 s against 0.30 s at level 5, for 7 % more bytes
    return gzip.compress(json.dumps(data, separators=(",", ":")).encode(), compresslevel=1, mtime=0)


def _compact(rec: FileRecord) -> dict[str, Any]:
    out = rec.to_json()
    # most files need no normalisation: drop digests equal to sha256 to keep chunks small
    for k in ("kw", "ws"):
        if out[k] == rec.sha256:
            del out[k]
    return out


def lookup_keys(rec: FileRecord) -> tuple[str, ...]:
    """The digests the upstream table is asked for on behalf of one file (none for an empty one)."""
    if not rec.size:
        return ()
    if rec.kw == rec.sha256 and rec.ws == rec.sha256:
        return (rec.sha256,)
    return tuple(dict.fromkeys((rec.sha256, rec.kw, rec.ws)))


@dataclass
class ChunkSender:
    """Cuts the walk into chunks and sends each to the hash-chunk queue (inline or via S3).

    Each digest of the scan is asked for in exactly one chunk: the first whose files bring it. A chunk
    asks for at most ``keys`` digests and holds at most ``size`` files; all but the last ask for a
    multiple of ``unit`` (100, one BatchGetItem) digests, leftovers wait for the next chunk. So a scan
    costs ceil(unique digests / 100) calls, however its duplicates fall.
    """

    svc: Services
    scan_id: str
    size: int
    keys: int = 1000
    part: str = ROOT  # chunk seqs count from 0 in each part; (part, seq) is unique in the scan
    chunks: int = 0
    files: int = 0
    _pending: list[FileRecord] = field(default_factory=list)
    _keys: list[str] = field(default_factory=list)
    # 96-bit prefixes of the digests already asked for: a third of the memory of the hex strings
    _seen: set[int] = field(default_factory=set)

    @property
    def unit(self) -> int:
        return min(100, self.keys)

    def add(self, rec: FileRecord) -> None:
        self._pending.append(rec)
        self.files += 1
        for key in lookup_keys(rec):
            prefix = int(key[:24], 16)
            if prefix not in self._seen:
                self._seen.add(prefix)
                self._keys.append(key)
        while len(self._keys) >= self.keys:
            self._send(self.keys)
        if len(self._pending) >= self.size:
            self._send(len(self._keys) // self.unit * self.unit)

    def flush(self) -> None:
        """Send what is left (the last chunk: any number of keys)."""
        while self._pending or self._keys:
            self._send(min(len(self._keys), self.keys))

    def _send(self, n_keys: int) -> None:
        seq = self.chunks
        keys, self._keys = self._keys[:n_keys], self._keys[n_keys:]
        records = [_compact(r) for r in self._pending]
        self._pending = []
        where: dict[str, Any] = {"scan_id": self.scan_id, "seq": seq}
        if self.part != ROOT:
            where["part"] = self.part
        msg: dict[str, Any] = {**where, "keys": keys, "records": records}
        text = json.dumps(msg, separators=(",", ":"))
        if len(text) > INLINE_CHUNK_LIMIT:
            key = work_key(self.scan_id, "chunks", seq, self.part)
            body = _gz_json({"keys": keys, "records": records})
            self.svc.s3.put_object(Bucket=self.svc.settings.results_bucket, Key=key, Body=body)
            text = json.dumps({**where, "records_key": key})
        self.svc.sqs.send_message(QueueUrl=self.svc.settings.chunk_queue_url, MessageBody=text)
        self.chunks += 1


@dataclass
class PartSender:
    """Hands nested archives of a part to invocations of their own (the walker's ``FanOut``).

    The archive goes to ``work/<scan>/parts/<part>.bin`` (from the walker's spool: bounded memory, a
    multipart upload when large), and a part message to the unpack queue, after the part is opened in
    the scan item. With ``defer``, the messages wait for :meth:`release`: a nested part hands its own
    nested archives on only once it is known to unpack at all (all or nothing, never half a tree).
    """

    svc: Services
    scan_id: str
    part: str
    threshold: int
    defer: bool = False
    handed: int = 0
    _pending: list[dict[str, Any]] = field(default_factory=list)

    def hand_over(self, spool: Any, nested: Nested) -> None:
        child = child_part(self.part, nested.member)
        key = part_key(self.scan_id, child)
        self.svc.s3.upload_fileobj(spool, self.svc.settings.results_bucket, key)
        message = {
            "scan_id": self.scan_id,
            "part": child,
            "key": key,
            "record": nested.record.to_json(),
            "fmt": nested.fmt,
            "depth": nested.depth,
            "spent": [nested.spent.members, nested.spent.total],
        }
        self.handed += 1
        if self.defer:
            self._pending.append(message)
        else:
            self._send(message)

    def release(self) -> None:
        for message in self._pending:
            self._send(message)
        self._pending = []

    def _send(self, message: dict[str, Any]) -> None:
        self.svc.scans.open_part(self.scan_id, message["part"])  # before the message: the scan waits for it
        self.svc.sqs.send_message(
            QueueUrl=self.svc.settings.unpack_queue_url, MessageBody=json.dumps({"part": message})
        )


def _part_sender(svc: Services, scan_id: str, part: str, *, defer: bool) -> PartSender | None:
    if not svc.settings.unpack_queue_url:
        return None  # no queue to send parts to (a stack without fan-out): everything in-process
    return PartSender(svc, scan_id, part, svc.settings.fan_out_mib << 20, defer=defer)


def send_finalize(svc: Services, scan_id: str) -> None:
    svc.sqs.send_message(
        QueueUrl=svc.settings.finalize_queue_url, MessageBody=json.dumps({"scan_id": scan_id})
    )


# ------------------------------------------------------------------ stage 1: unpack
def unpack_upload(svc: Services, bucket: str, key: str) -> str | None:
    """Hash every file of an uploaded drop into chunks; returns the scan id, None for a duplicate."""
    head = svc.s3.head_object(Bucket=bucket, Key=key)
    # a redelivered event (same object version) stops here; a repeated upload, at the scan id
    identity = {"bucket": bucket, "key": key, "version": head.get("VersionId") or head.get("ETag", "")}
    return once(svc, "unpack", _unpack_object, svc=svc, bucket=bucket, key=key, head=head, identity=identity)


def _unpack_object(
    *, svc: Services, bucket: str, key: str, head: dict[str, Any], identity: dict[str, str]
) -> str | None:
    etag = head.get("ETag", "").strip('"') or None
    parsed = parse_drop_key(key)
    upload = Upload(
        bucket=bucket,
        key=key,
        etag=etag,
        version_id=head.get("VersionId"),
        supplier=parsed[0] if parsed else "unknown",
        metadata=dict(head.get("Metadata", {})),
    )
    scan_id = scan_id_for(bucket, key, etag)
    if svc.scans.begin(scan_id, upload) is None and not _resume(svc, scan_id):
        logger.info("duplicate upload event", extra={"scan_id": scan_id})
        return None
    logger.append_keys(scan_id=scan_id, supplier=upload.supplier)
    size = int(head.get("ContentLength", 0))
    if parsed is None or size == 0:
        why = "empty upload" if parsed else f"upload key {key!r} is not under drops/<supplier>/<name>"
        _close_unpack(
            svc, scan_id, 0, size, hashlib.sha256().hexdigest() if not size else None, why, "rejected"
        )
        return scan_id
    source = {
        "bucket": bucket,
        "key": key,
        "version_id": head.get("VersionId"),
        "name": parsed[1].rsplit("/", 1)[-1],
    }
    if not _split_zip(svc, scan_id, source, size):
        _hash_into_chunks(svc, scan_id, source)
    return scan_id


def _split_zip(svc: Services, scan_id: str, source: dict[str, Any], size: int) -> bool:
    """Hand the ranges of a big zip upload to parts of their own; False if it is not one to split.

    This invocation then reads the upload once, whole, for its size and SHA-256 (no member is walked
    here), and closes the root part with no chunks of its own.
    """
    part_bytes = svc.settings.zip_part_mib << 20
    if not svc.settings.unpack_queue_url or not part_bytes or size <= part_bytes:
        return False
    started = time.perf_counter()
    view = zipsplit.RangedObject(svc.s3, source["bucket"], source["key"], source["version_id"], size)
    ranges = zipsplit.plan(view, part_bytes)
    if ranges is None or len(ranges) < 2:
        return False
    for zip_range in ranges:
        part = segment(ROOT, zip_range.index)
        message = {"scan_id": scan_id, "part": part, "source": source, "range": zip_range.to_json()}
        svc.scans.open_part(scan_id, part)  # before the message: the scan waits for it
        svc.sqs.send_message(
            QueueUrl=svc.settings.unpack_queue_url, MessageBody=json.dumps({"part": message})
        )
    version = {"VersionId": source["version_id"]} if source.get("version_id") else {}
    raw = HashingReader(svc.s3.get_object(Bucket=source["bucket"], Key=source["key"], **version)["Body"])
    raw.drain()
    done = svc.scans.close_part(
        scan_id, ROOT, 0, seconds=time.perf_counter() - started, size=raw.size, sha256=raw.hexdigest()
    )
    if done:
        send_finalize(svc, scan_id)
    logger.info("split zip", extra={"parts": len(ranges), "bytes": raw.size, "reads": view.requests})
    return True


def _skip(stream: Any, count: int) -> None:
    """Read and drop ``count`` bytes: where a resumed segment of a compressed tar starts."""
    while count > 0:
        data = stream.read(min(count, 1 << 20))
        if not data:
            raise ArchiveReadError("the upload ended before the offset its walk was resumed at")
        count -= len(data)


def _budget(svc: Services, started: float, progress: Progress) -> Split | None:
    """When this invocation stops a top-level tar: past its time budget or its byte budget."""
    if not svc.settings.unpack_queue_url:
        return None  # nowhere to send the rest
    deadline = started + svc.settings.unpack_budget_seconds
    limit = svc.settings.unpack_budget_mib << 20
    first = progress.total

    def stop(now: Progress) -> bool:
        return time.perf_counter() > deadline or bool(limit and now.total - first >= limit)

    return Split(stop)


def _hash_into_chunks(
    svc: Services,
    scan_id: str,
    source: dict[str, Any],
    part: str = ROOT,
    resume: dict[str, Any] | None = None,
    zip_range: dict[str, Any] | None = None,
) -> None:
    """Stream the upload (or, ``resume``, the rest of it) through the walker into chunks; count them.

    A resumed segment reads the upload from its start again: it decompresses and drops what earlier
    segments walked (nothing hashed but the upload's own SHA-256), so that the segment that gets to
    the end has read every byte of the upload and can tell its SHA-256. A ``zip_range`` (of
    :func:`_split_zip`) reads only its bytes of the upload, and never tells its SHA-256.
    """
    started = time.perf_counter()
    version = {"VersionId": source["version_id"]} if source.get("version_id") else {}
    if zip_range:  # members from local header to local header: one stream, no seeking
        version["Range"] = f"bytes={zip_range['start']}-{zip_range['end'] - 1}"
    raw = HashingReader(svc.s3.get_object(Bucket=source["bucket"], Key=source["key"], **version)["Body"])
    sender = ChunkSender(svc, scan_id, svc.settings.chunk_size, svc.settings.chunk_keys, part=part)
    parts = _part_sender(svc, scan_id, part, defer=False)
    progress = Progress(*(resume or zip_range or {}).get("spent", (0, 0)))
    spent = dataclasses.replace(progress)
    split = _budget(svc, started, progress)
    reason: str | None = None
    status = "scanning"
    is_known = lru_cache(maxsize=None)(svc.upstream().is_known)
    limits = svc.settings.walk_limits()
    stream: Any = zipsplit.Terminated(raw) if zip_range else raw
    if resume and resume["codec"]:
        stream = plain_stream(raw, resume["codec"])
    try:
        if resume:
            _skip(stream, resume["offset"])
        walked = walk(
            stream,
            source["name"],
            is_known=is_known,
            limits=limits,
            fan_out=parts,
            progress=progress,
            split=split,
        )
        for rec in walked:
            sender.add(rec)
    except LimitExceeded as e:  # a bomb, or more than the template allows: not something to scan
        reason, status = f"{e.reason} (after {sender.files} files)", "rejected"
    except ArchiveReadError as e:
        reason, status = f"archive is corrupt or truncated after {sender.files} files: {e}", "failed"
    finally:
        if isinstance(stream, PlainStream):
            stream.close()
    sender.flush()
    stopped = split is not None and split.offset is not None
    if split is not None and split.offset is not None:
        # the rest of the tar: another invocation, opened before this one closes
        base, codec = (resume["offset"], resume["codec"]) if resume else (0, split.codec)
        checkpoint = {
            "offset": base + split.offset,
            "codec": codec,
            "spent": [progress.members, progress.total],
        }
        following = next_segment(part)
        message = {"scan_id": scan_id, "part": following, "source": source, "resume": checkpoint}
        svc.scans.open_part(scan_id, following)
        svc.sqs.send_message(
            QueueUrl=svc.settings.unpack_queue_url, MessageBody=json.dumps({"part": message})
        )
    else:
        raw.drain()
    handed = parts.handed if parts else 0
    if part == ROOT and sender.files == 0 and not handed and not stopped and status == "scanning":
        reason, status = "archive holds no files", "rejected"
    seconds = time.perf_counter() - started
    done = svc.scans.close_part(
        scan_id,
        part,
        sender.chunks,
        unpacked=progress.total - spent.total,
        members=progress.members - spent.members,
        seconds=seconds,
        # only the segment that read the upload to its end has all of it in its digest
        size=None if stopped or zip_range else raw.size,
        sha256=None if stopped or zip_range else raw.hexdigest(),
        reason=reason,
        status=status,
    )
    if done:
        send_finalize(svc, scan_id)
    extra = {
        "files": sender.files,
        "chunks": sender.chunks,
        "bytes": raw.size,
        "parts": handed,
        "stopped": stopped,
    }
    logger.info("unpacked", extra=extra)


def unpack_part(svc: Services, message: dict[str, Any]) -> str | None:
    """Unpack a nested archive fanned out of another part into chunks; None if the part was done before."""
    scan_id, part = message["scan_id"], message["part"]
    scan = svc.scans.get(scan_id)
    if scan is None or scan.finalized_at is not None:
        return None
    if part_closed(scan, part):  # a redelivered part message
        if is_complete(scan):
            send_finalize(svc, scan_id)  # the earlier run may have died before triggering it
        return None
    logger.append_keys(scan_id=scan_id, part=part)
    if "resume" in message:  # the upload's walk, resumed where an earlier invocation stopped it
        _hash_into_chunks(svc, scan_id, message["source"], part, resume=message["resume"])
        return part
    if "range" in message:  # members of a zip upload, a range of its central directory
        _hash_into_chunks(svc, scan_id, message["source"], part, zip_range=message["range"])
        return part
    started = time.perf_counter()
    spent = Progress(*message["spent"])
    nested = Nested(FileRecord.from_json(message["record"]), message["fmt"], int(message["depth"]), 0, spent)
    sender = ChunkSender(svc, scan_id, svc.settings.chunk_size, svc.settings.chunk_keys, part=part)
    parts = _part_sender(svc, scan_id, part, defer=True)
    progress = dataclasses.replace(spent)
    reason: str | None = None
    status: str | None = None
    whole = 0  # records that are the nested archive itself, left one file
    is_known = lru_cache(maxsize=None)(svc.upstream().is_known)
    scratch = svc.settings.scratch_dir
    with tempfile.TemporaryFile(dir=scratch) as spool:
        svc.s3.download_fileobj(svc.settings.results_bucket, message["key"], spool)
        walked = walk_nested(
            spool,
            nested,
            is_known=is_known,
            spool_dir=scratch,
            limits=svc.settings.walk_limits(),
            fan_out=parts,
            progress=progress,
        )
        try:
            for rec in walked:
                whole += rec.path == nested.record.path
                sender.add(rec)
        except LimitExceeded as e:  # a bound of the whole upload: the scan is rejected, as in-process
            reason, status = (
                f"{e.reason} (in {nested.record.path}, after {sender.files} of its files)",
                "rejected",
            )
    sender.flush()
    if parts is not None and status is None and not (whole and sender.files == 1):
        parts.release()  # it unpacked: its own nested archives are parts of the scan too
    seconds = time.perf_counter() - started
    done = svc.scans.close_part(
        scan_id,
        part,
        sender.chunks,
        unpacked=progress.total - spent.total,
        members=progress.members - spent.members,
        seconds=seconds,
        reason=reason,
        status=status,
    )
    if done:
        send_finalize(svc, scan_id)
    logger.info("unpacked part", extra={"files": sender.files, "chunks": sender.chunks})
    return part


def _resume(svc: Services, scan_id: str) -> bool:
    """For an existing scan: True to redo the unpack (an earlier attempt died before counting chunks)."""
    scan = svc.scans.get(scan_id)
    if scan is None or scan.finalized_at is not None:
        return False
    if not part_closed(scan, ROOT):
        return True
    if is_complete(scan):
        send_finalize(svc, scan_id)  # the earlier attempt may have died before triggering it
    return False


def _close_unpack(
    svc: Services,
    scan_id: str,
    chunks: int,
    size: int,
    sha: str | None,
    reason: str | None,
    status: str,
    seconds: float | None = None,
) -> None:
    total = svc.scans.set_total(
        scan_id, chunks, size=size, sha256=sha or "", reason=reason, status=status, seconds=seconds
    )
    if total:
        send_finalize(svc, scan_id)


# ------------------------------------------------------------------ stage 2: lookup
def _chunk_body(svc: Services, message: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """(compact records, digests to ask for) of a chunk message, inline or from S3."""
    body: dict[str, Any] = message
    if message.get("records") is None:
        obj = svc.s3.get_object(Bucket=svc.settings.results_bucket, Key=message["records_key"])
        stored = json.loads(gzip.decompress(obj["Body"].read()))
        body = stored if isinstance(stored, dict) else {"records": stored}
    records: list[dict[str, Any]] = body["records"]
    keys = body.get("keys")
    if keys is None:  # a chunk cut before chunks carried their keys: its own files' digests
        keys = [k for r in records for k in lookup_keys(FileRecord.from_json(r))]
    return records, list(keys)


def lookup_chunk(svc: Services, message: dict[str, Any]) -> None:
    """Ask the upstream table for one chunk's digests; hand the files and what was found to finalize."""
    started = time.perf_counter()
    scan_id, seq, part = message["scan_id"], int(message["seq"]), message.get("part", ROOT)
    records, keys = _chunk_body(svc, message)
    db = svc.upstream()
    known = db.lookup(keys)
    # files are classed in finalize: a file's digest may have been asked for by an earlier chunk
    result = {
        "records": records,
        "known": {d: info_to_json(info) for d, info in known.items()},
        "dynamodb": db.stats.as_dict(),
        "seconds": time.perf_counter() - started,
    }
    svc.s3.put_object(
        Bucket=svc.settings.results_bucket, Key=work_key(scan_id, "results", seq, part), Body=_gz_json(result)
    )
    if svc.scans.chunk_done(scan_id, chunk_tag(part, seq)):
        send_finalize(svc, scan_id)


def file_entry(
    rec: FileRecord, known: Mapping[str, DigestInfo], trust: Mapping[str, Trust]
) -> dict[str, Any]:
    """A file of the manifest: what the walker saw and the class its digests earn."""
    cls, refs = classify(rec, known, trust)
    entry: dict[str, Any] = {
        "path": rec.path,
        "size": rec.size,
        "sha256": rec.sha256,
        "kind": rec.kind,
        "class": cls.value if cls else None,
    }
    if refs:
        entry["upstream"] = refs
    if rec.unreadable:
        entry["unreadable"] = rec.unreadable
    if rec.link is not None:  # links and odd names: recorded by the walker, shown as they are
        entry["link"] = rec.link
    if rec.note:
        entry["note"] = rec.note
    return entry


# ------------------------------------------------------------------ stage 3: finalize
def object_exists(s3: Any, bucket: str, key: str) -> bool:
    """HEAD the object; only "not found" means False (access denied and the like are raised)."""
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except s3.exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def _chunk_results(svc: Services, scan_id: str, tags: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The chunk results, in the order one walk of the upload would have met their members."""
    for part, seq in (split_tag(t) for t in sorted(tags, key=walk_order)):
        key = work_key(scan_id, "results", seq, part)
        obj = svc.s3.get_object(Bucket=svc.settings.results_bucket, Key=key)
        yield json.loads(gzip.decompress(obj["Body"].read()))


def finalize_scan(svc: Services, scan_id: str, token: str) -> str | None:
    """Merge the chunk results into the classified manifest and hand it to triage.

    Returns the work key of the classified manifest, None if another run has it (or wrote it).
    """
    started = time.perf_counter()
    scan = svc.scans.get(scan_id)
    if scan is None:
        raise LookupError(f"no scan {scan_id}")
    key = manifest_key(scan.supplier, scan_id)
    written = object_exists(svc.s3, svc.settings.results_bucket, key)
    if written or not svc.scans.claim_finalize(scan_id, token):
        return None
    records: list[FileRecord] = []
    known: dict[str, DigestInfo] = {}
    stats = CallStats()
    lookup_seconds = 0.0
    # the chunks counted done: all of them, unless the sweeper gave up on the scan
    with heap.building():  # a record and a file entry per member: 80,000 of each for a kernel
        for result in _chunk_results(svc, scan_id, scan.done_chunks or ()):
            records.extend(FileRecord.from_json(r) for r in result["records"])
            known.update((d, info_from_json(v)) for d, v in result["known"].items())
            stats.add(**result["dynamodb"])
            lookup_seconds += result["seconds"]
        if len(scan.parts_open or ()) > 1:
            distinct(records)  # each part told apart only its own members' paths
        db = svc.upstream()
        packages = db.packages({p for info in known.values() for p in info.packages}) if known else {}
        trust = {n: p.trust for n, p in packages.items()}
        files = [file_entry(rec, known, trust) for rec in records]
    load = lru_cache(maxsize=64)(lambda p, v: load_release(svc.s3, svc.settings.upstream_bucket, p, v))
    by_component: dict[str, list[dict[str, Any]]] = {}
    for f in files:
        by_component.setdefault(component_of(f["path"]), []).append(f)
    components = [resolve_component(p, fs, packages, load) for p, fs in sorted(by_component.items())]
    for c in components:  # the report tells lawyers at which trust level each upstream was taken
        info = packages.get(c["package"]) if c["identified"] else None
        c["trust"] = info.trust.value if info else None
    metadata = dict(scan.metadata.as_dict()) if scan.metadata else {}
    mismatches = declared_mismatches(parse_declared(metadata.get("components")), components)
    stats.add(**{k: v for k, v in db.stats.as_dict().items()})
    status, reason = _outcome(svc, scan)
    manifest = build_manifest(
        scan_id=scan_id,
        supplier=scan.supplier,
        source={
            "bucket": scan.bucket,
            "key": scan.key,
            "size": int(scan.source_size or 0),
            "sha256": scan.source_sha256 or None,
            "etag": scan.etag,
            "version_id": scan.version_id,
            "metadata": metadata,
        },
        status=status,
        reason=reason,
        files=files,
        components=components,
        mismatches=mismatches,
        stats={
            "dynamodb": stats.as_dict(),
            "chunks": int(scan.chunks_total or 0),
            "seconds": {
                "unpack": float(scan.unpack_seconds or 0.0),
                "lookup": round(lookup_seconds, 3),
                "finalize": round(time.perf_counter() - started, 3),
            },
        },
        created_at=scan.created_at,
        finished_at=now(),
    )
    # the manifest is written by triage; finalize hands over the classified files
    work = work_key(scan_id, "classified", 0)
    svc.s3.put_object(Bucket=svc.settings.results_bucket, Key=work, Body=_gz_json(manifest))
    svc.sqs.send_message(
        QueueUrl=svc.settings.triage_queue_url, MessageBody=json.dumps({"scan_id": scan_id, "key": work})
    )
    return work


def _outcome(svc: Services, scan: ScanItem) -> tuple[str, str | None]:
    """The scan's status and reason: its root part's, a limit tripped in another part, or the whole
    upload's limits against what every part unpacked together (each part checked only its lineage)."""
    if scan.status in ("rejected", "failed"):
        return scan.status, scan.reason
    if scan.part_reason:
        return "rejected", scan.part_reason
    s = svc.settings
    parts = len(scan.parts_closed or ())
    if int(scan.unpacked_bytes or 0) > s.max_unpacked_gib << 30:
        return "rejected", f"more than {s.max_unpacked_gib:,} GiB unpacked ({parts} parts together)"
    if int(scan.members or 0) > s.max_files:
        return "rejected", f"more than {s.max_files:,} archive members ({parts} parts together)"
    return "complete", scan.reason


# ------------------------------------------------------------------ stage 4: triage
def triage_scan(svc: Services, message: dict[str, Any]) -> str | None:
    """Licences and red flags of the review set, the reports, then the manifest; returns its key."""
    started = time.perf_counter()
    bucket = svc.settings.results_bucket
    obj = svc.s3.get_object(Bucket=bucket, Key=message["key"])
    with heap.building():
        manifest: dict[str, Any] = json.loads(gzip.decompress(obj["Body"].read()))
    key = manifest_key(manifest["supplier"], manifest["scan_id"])
    if object_exists(svc.s3, bucket, key):
        return None  # a redelivery after the manifest was written
    workers = svc.settings.triage_workers or usable_cpus()
    if manifest["status"] == "complete":
        _triage_into(svc, manifest, workers)
    manifest["reports"] = {
        fmt: report_key(manifest["supplier"], manifest["scan_id"], fmt) for fmt in REPORT_FORMATS
    }
    seconds = manifest["stats"]["seconds"]
    seconds["triage"] = round(time.perf_counter() - started, 3)
    manifest["finished_at"] = now()
    rendering = time.perf_counter()
    for fmt, text in reports.render_all(manifest, manifest["reports"], workers=workers).items():
        svc.s3.put_object(
            Bucket=bucket,
            Key=manifest["reports"][fmt],
            Body=text.encode(),
            ContentType=reports.FORMATS[fmt].media_type,
        )
    seconds["reports"] = round(time.perf_counter() - rendering, 3)  # the manifest's own, not in the reports
    # written last: its creation is what fires the notification
    svc.s3.put_object(Bucket=bucket, Key=key, Body=to_json(manifest).encode(), ContentType="application/json")
    svc.scans.set_status(manifest["scan_id"], manifest["status"])
    return key


def _triage_into(svc: Services, manifest: dict[str, Any], workers: int) -> None:
    """Write the triage into the manifest; a triage that breaks is recorded, not retried forever.

    S3 errors propagate (the message returns and is retried); anything else (a detector crash, a
    drop libarchive reads differently the second time) becomes ``triage.error`` in the manifest,
    which then still ends the scan with its classes, and the verdict is at least ``review``.
    """
    with tempfile.NamedTemporaryFile(dir=svc.settings.scratch_dir, suffix=".drop") as spool:
        extracted = Extracted()
        limits = svc.settings.triage_limits()
        read = triage.read_plan(manifest, limits)  # issue 22: what one invocation reads, and how much
        wanted, caps = read.wanted, read.caps
        try:
            streamed = _stream_again(svc, manifest, wanted, caps) if workers > 1 else None
            with streamed or _read_again(svc, manifest, spool, wanted, caps, beside=workers > 1) as reading:
                # the licence index loads (2 s) while the drop is read again (5 s for a kernel)
                detector = licenses.detector(svc.settings.triage_detector)
                got = reading.result()
            if isinstance(got, SourceFailed):
                raise DropReadError(got.message)
            if got is None:  # not an archive that reads as a stream: from a copy on disk
                with _read_again(svc, manifest, spool, wanted, caps, beside=False) as reading:
                    got = reading.result()
            extracted = got or extracted
            found = triage.triage_manifest(
                manifest,
                extracted.content,
                detector=detector,
                truncated=extracted.truncated,
                workers=workers,
                limits=limits,
                read=read,
            )
        except (DropReadError, BotoCoreError, ClientError):
            raise
        except Exception as e:  # errors are data: the manifest says triage did not finish
            logger.exception("triage failed", extra={"scan_id": manifest["scan_id"]})
            found = triage.TriageReport(
                detector=svc.settings.triage_detector, error=f"{type(e).__name__}: {e}"[:300]
            )
    triage.apply(manifest, found)
    for f in manifest["files"]:
        if f["sha256"] in extracted.sha1:
            f["sha1"] = extracted.sha1[f["sha256"]]


def _drop_version(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The drop's object version, as S3 calls take it (none in a bucket without versioning)."""
    version = manifest["source"].get("version_id")
    return {"VersionId": version} if version else {}


def _download_drop(svc: Services, manifest: Mapping[str, Any], spool: IO[bytes]) -> None:
    src, version = manifest["source"], _drop_version(manifest)
    svc.s3.download_fileobj(
        src["bucket"], src["key"], spool, ExtraArgs=version or None, Config=DOWNLOAD_PARTS
    )
    spool.flush()


def _read_again(
    svc: Services,
    manifest: Mapping[str, Any],
    spool: IO[bytes],
    wanted: Mapping[str, int],
    caps: Mapping[str, int],
    *,
    beside: bool,
) -> Forked[Extracted | None] | Done[Extracted | None]:
    """The bytes of the review set (and licence files) out of a copy of the drop on disk: in a forked
    child if ``beside``."""
    _download_drop(svc, manifest, spool)
    if beside:
        return Forked(partial(contents_by_digest, caps=caps), spool.name, wanted)
    return Done(contents_by_digest(spool.name, wanted, caps=caps))


def _stream_again(
    svc: Services, manifest: Mapping[str, Any], wanted: Mapping[str, int], caps: Mapping[str, int]
) -> Forked[Extracted | SourceFailed | None] | None:
    """The same, for a compressed drop, as it streams from S3: no copy on disk, no wait for one.

    A child forked now reads the object on an S3 client of its own (a fork does not carry
    connections) and decompresses beside its read. None when the drop does not start with a gzip,
    bzip2 or xz stream.
    """
    src, version = manifest["source"], _drop_version(manifest)
    span = f"bytes=0-{MAGIC_SPAN - 1}"
    head = svc.s3.get_object(Bucket=src["bucket"], Key=src["key"], Range=span, **version)["Body"].read()
    codec = compressor_of(head)
    if codec not in CODECS:
        return None

    def open_body() -> Any:
        return svc.new_s3().get_object(Bucket=src["bucket"], Key=src["key"], **version)["Body"]

    return Forked(streamed_contents, open_body, codec, wanted, caps)


class DropReadError(RuntimeError):
    """The drop could not be read again from S3: the triage message comes back and is retried."""


# ------------------------------------------------------------------ stage 5: notify
def notify_manifest(svc: Services, bucket: str, key: str) -> str | None:
    """Publish the summary of one manifest once; returns the SNS message id, None if published before."""
    identity = {"bucket": bucket, "key": key}
    return once(svc, "notify", _publish_summary, svc=svc, bucket=bucket, key=key, identity=identity)


def _publish_summary(*, svc: Services, bucket: str, key: str, identity: dict[str, str]) -> str:
    manifest = json.loads(svc.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    links = report_links(svc, bucket, key, manifest)
    resp = svc.sns.publish(
        TopicArn=svc.settings.topic_arn,
        Subject=subject(manifest),
        Message=body(manifest, links=links, links_expire=svc.settings.report_link_expiry),
        MessageAttributes=message_attributes(manifest),
    )
    return resp["MessageId"]


def report_links(svc: Services, bucket: str, key: str, manifest: Mapping[str, Any]) -> dict[str, str]:
    """Pre-signed GET URLs of the manifest and its reports (never logged: they are bearer tokens)."""
    keys = {"manifest": key, **(manifest.get("reports") or {})}
    return {
        name: svc.s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": bucket, "Key": k},
            ExpiresIn=svc.settings.report_link_expiry,
        )
        for name, k in keys.items()
    }


# ------------------------------------------------------------------ ingest of upstream releases
def parse_upstream_key(key: str) -> tuple[str, str] | None:
    """``upstream/<package>/<version>/<file>``, or ``upstream/<file>`` named like ``foo-1.0.tar.gz``."""
    if not key.startswith(UPSTREAM_PREFIX):
        return None
    parts = key[len(UPSTREAM_PREFIX) :].split("/")
    if len(parts) >= 3 and parts[0] and parts[1]:
        return parts[0], parts[1]
    return parse_archive_name(parts[-1])


@dataclass(frozen=True, slots=True)
class IngestResult:
    package: str
    version: str
    files: int
    items_written: int
    error: str | None = None


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


def _ingest_report(svc: Services, package: str, version: str) -> dict[str, Any] | None:
    try:
        obj = svc.s3.get_object(Bucket=svc.settings.upstream_bucket, Key=release_report_key(package, version))
    except svc.s3.exceptions.NoSuchKey:
        return None
    report: dict[str, Any] = json.loads(obj["Body"].read())
    return report


def ingest_release(svc: Services, bucket: str, key: str) -> IngestResult:
    """Hash an upstream release archive into the upstream table and its path list."""
    head = svc.s3.head_object(Bucket=bucket, Key=key)
    meta = head.get("Metadata", {})
    parsed = parse_upstream_key(key)
    package, version = (
        meta.get("package") or (parsed or ("", ""))[0],
        meta.get("version") or (parsed or ("", ""))[1],
    )
    if not package or not version:
        raise ValueError(
            f"cannot tell package and version of {key!r}: use upstream/<package>/<version>/<file>"
        )
    trust = Trust(meta["trust"]) if meta.get("trust") else None
    etag = head.get("ETag", "").strip('"')
    previous = _ingest_report(svc, package, version)
    if previous and previous.get("etag") == etag and previous.get("source") == key:
        # a redelivered event or a repeated upload of the same archive: the release is in already
        if trust:
            svc.upstream().set_trust(package, trust)
        return IngestResult(package, version, int(previous["files"]), 0)
    body_stream = svc.s3.get_object(Bucket=bucket, Key=key)["Body"]
    started = time.perf_counter()
    db = svc.upstream()
    paths: dict[str, str] = {}
    try:
        # digests are written page by page while the walk goes on; an unreadable archive's are taken back
        written = db.merge_release(
            package, version, _walk_release(body_stream, key.rsplit("/", 1)[-1], paths)
        )
    except ArchiveReadError as e:
        logger.error("upstream archive unreadable", extra={"key": key, "reason": str(e)})
        svc.s3.put_object(
            Bucket=svc.settings.upstream_bucket,
            Key=release_error_key(package, version),
            Body=json.dumps({"key": key, "error": str(e)}).encode(),
        )
        return IngestResult(package, version, 0, 0, error=str(e))
    merged = time.perf_counter()
    save_release(svc.s3, svc.settings.upstream_bucket, Release(package, version, paths))
    db.register(package, version, trust)  # last: a registered release has its digests and path list
    report = {
        "package": package,
        "version": version,
        "source": key,
        "etag": etag,
        "files": len(paths),
        "items_written": written,
        "dynamodb": db.stats.as_dict(),
        # hash and merge overlap: "hash_and_merge" is the walk with the database writes beside it
        "seconds": {
            "hash_and_merge": round(merged - started, 3),
            "release": round(time.perf_counter() - merged, 3),
        },
    }
    svc.s3.put_object(
        Bucket=svc.settings.upstream_bucket,
        Key=release_report_key(package, version),
        Body=json.dumps(report).encode(),
    )
    logger.info("ingested", extra=report)
    return IngestResult(package, version, len(paths), written)

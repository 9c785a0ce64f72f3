"""The scheduled sweep: scans past their deadline, and uploads whose events were dead-lettered, end failed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from aws_lambda_powertools import Logger

from dropscan.manifest import manifest_key
from dropscan.pipeline import finalize_scan, object_exists, object_key, parse_drop_key, scan_id_for
from dropscan.scans import OPEN, ROOT, ScanItem, Upload, part_closed, unfinished_parts
from dropscan.services import Services

logger = Logger(service="dropscan", child=True)

#: the sweeper's claim token: a sweep that died after claiming is finished by the next one
SWEEPER = "sweeper"


@dataclass
class SweepResult:
    timed_out: list[str] = field(default_factory=list)  # failed: past the deadline
    dead_lettered: list[str] = field(default_factory=list)  # failed: the upload's event was dead-lettered
    closed: list[str] = field(default_factory=list)  # had a manifest already: status recorded

    def as_dict(self) -> dict[str, list[str]]:
        return {"timed_out": self.timed_out, "dead_lettered": self.dead_lettered, "closed": self.closed}


def iso(t: datetime) -> str:
    """The form ``scans.now()`` writes, so that times compare as strings."""
    return t.astimezone(UTC).isoformat(timespec="seconds")


def sweep(svc: Services, at: datetime) -> SweepResult:
    """End, as ``failed`` with a reason and through the finalize claim, every scan that will not end itself.

    ``at`` is the time of the scheduled event the sweep runs for.
    """
    result = SweepResult()
    cutoff = iso(at - timedelta(minutes=svc.settings.scan_deadline_minutes))
    for scan_id in _dead_lettered_uploads(svc):
        if _give_up(svc, scan_id, _dead_letter_reason, at, cutoff):
            result.dead_lettered.append(scan_id)
    for scan_id in svc.scans.open_before(cutoff):
        if scan_id in result.dead_lettered:
            continue  # given up a moment ago: its manifest is on its way through triage
        if _record_written_manifest(svc, scan_id):
            result.closed.append(scan_id)
        elif _give_up(svc, scan_id, _timeout_reason, at, cutoff):
            result.timed_out.append(scan_id)
    logger.info("swept", extra=result.as_dict())
    return result


def _timeout_reason(scan: ScanItem, at: datetime) -> str:
    minutes = (at - datetime.fromisoformat(scan.created_at)).total_seconds() / 60
    done = int(scan.chunks_done or 0)
    if not part_closed(scan, ROOT):
        return f"timed out: {done} of ? chunks done after {minutes:.0f} min (the unpack did not finish)"
    unfinished = unfinished_parts(scan)
    if unfinished:
        of = len(scan.parts_open or ())
        why = f"{len(unfinished)} of {of} unpack parts did not finish: {', '.join(sorted(unfinished)[:5])}"
        return f"timed out: {done} of ? chunks done after {minutes:.0f} min ({why})"
    return f"timed out: {done} of {int(scan.chunks_total or 0)} chunks done after {minutes:.0f} min"


def _dead_letter_reason(scan: ScanItem, at: datetime) -> str:
    unfinished = sorted(unfinished_parts(scan))
    if part_closed(scan, ROOT) and unfinished:
        # a segment (``0+k``) is a stretch of the upload itself: a resumed tar, a range of a zip
        which = ", ".join(f"{'segment' if '+' in p else 'nested archive part'} {p}" for p in unfinished[:5])
        return f"{which} could not be unpacked: every delivery of its message failed (dead-letter queue)"
    return "the upload could not be unpacked: every delivery of its event failed (dead-letter queue)"


def _give_up(
    svc: Services, scan_id: str, why: Callable[[ScanItem, datetime], str], at: datetime, cutoff: str
) -> bool:
    """Claim the scan as failed and write its manifest from the chunks done; False if it is not ours."""
    scan = svc.scans.get(scan_id)
    if scan is None or scan.pending != OPEN:
        return False  # ended since the (eventually consistent) index was read
    reason = why(scan, at)
    if not svc.scans.claim_given_up(scan_id, SWEEPER, reason, stale_before=cutoff):
        return False  # a live finalize holds the scan, or it has just ended
    logger.warning("scan given up", extra={"scan_id": scan_id, "reason": reason})
    finalize_scan(svc, scan_id, token=SWEEPER)
    return True


def _record_written_manifest(svc: Services, scan_id: str) -> bool:
    """A finalize that died between writing the manifest and recording the status: record it now."""
    scan = svc.scans.get(scan_id)
    if scan is None or scan.pending != OPEN:
        return False
    key = manifest_key(scan.supplier, scan_id)
    if not object_exists(svc.s3, svc.settings.results_bucket, key):
        return False
    body = svc.s3.get_object(Bucket=svc.settings.results_bucket, Key=key)["Body"].read()
    svc.scans.set_status(scan_id, json.loads(body)["status"])
    return True


def _dead_lettered_uploads(svc: Services) -> Iterator[str]:
    """The scans of the uploads in the upload dead-letter queue, begun here if unpack never got so far.

    The messages stay in the queue (for whoever looks into why); each sweep reads each once.
    """
    url = svc.settings.upload_dlq_url
    if not url:
        return
    seen: set[str] = set()
    while True:
        messages = svc.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
            "Messages", []
        )
        fresh = [m for m in messages if m["MessageId"] not in seen]
        if not fresh:
            return
        for m in fresh:
            seen.add(m["MessageId"])
            part = _part_of(m["Body"])
            if part is not None:  # a nested archive fanned out of an upload, never unpacked
                scan = svc.scans.get(part[0])
                if scan is not None and not part_closed(scan, part[1]):
                    yield part[0]
                continue
            for upload in _uploads_of(m["Body"]):
                scan_id = scan_id_for(upload.bucket, upload.key, upload.etag)
                svc.scans.begin(scan_id, upload)  # None (exists already) is the usual case
                scan = svc.scans.get(scan_id)
                # a duplicate event may be dead-lettered while the first one's unpack went through
                if scan is not None and not part_closed(scan, ROOT):
                    yield scan_id


def _part_of(body: str) -> tuple[str, str] | None:
    """(scan id, part) of a part message, None for anything else."""
    try:
        part = json.loads(body).get("part")
    except (ValueError, AttributeError):
        return None
    return (part["scan_id"], part["part"]) if isinstance(part, dict) else None


def _uploads_of(body: str) -> Iterator[Upload]:
    """The objects an S3 notification names, as the unpack would have seen them."""
    try:
        records = json.loads(body).get("Records", [])
    except (ValueError, AttributeError):
        logger.error("unreadable message in the upload dead-letter queue")
        return
    for rec in records:
        if not str(rec.get("eventName", "")).startswith("ObjectCreated"):
            continue
        obj = rec["s3"]["object"]
        key = object_key(obj["key"])
        parsed = parse_drop_key(key)
        yield Upload(
            bucket=rec["s3"]["bucket"]["name"],
            key=key,
            etag=obj.get("eTag") or None,
            version_id=obj.get("versionId"),
            supplier=parsed[0] if parsed else "unknown",
            metadata={},
        )

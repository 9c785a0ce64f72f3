"""The scheduled sweep: scans past their deadline, and uploads whose events were dead-lettered, end failed
(through the finalize claim, so each still gets exactly one manifest and one notification)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from aws_lambda_powertools import Logger

from dropscan.events import created_objects, part_of
from dropscan.keys import ROOT, manifest_key, parse_drop_key, scan_id_for
from dropscan.models import Scan, Upload
from dropscan.stages.finalize import finalize_scan
from dropscan.store.scans import OPEN
from dropscan.store.services import Services

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


def _timeout_reason(scan: Scan, at: datetime) -> str:
    minutes = (at - datetime.fromisoformat(scan.created_at)).total_seconds() / 60
    done = int(scan.chunks_done or 0)
    if not scan.part_closed(ROOT):
        return f"timed out: {done} of ? chunks done after {minutes:.0f} min (the unpack did not finish)"
    unfinished = scan.unfinished_parts()
    if unfinished:
        of = len(scan.parts_open or ())
        why = f"{len(unfinished)} of {of} unpack parts did not finish: {', '.join(sorted(unfinished)[:5])}"
        return f"timed out: {done} of ? chunks done after {minutes:.0f} min ({why})"
    if scan.triage_parts and len(scan.triage_done) < scan.triage_parts:
        # the review set was fanned out to triage parts, and one never counted itself done
        missing = sorted(set(map(str, range(scan.triage_parts))) - set(scan.triage_done), key=int)
        return (
            f"timed out: triage did not finish: {len(scan.triage_done)} of {scan.triage_parts} triage parts "
            f"done after {minutes:.0f} min (parts not done: {', '.join(missing[:5])})"
        )
    return f"timed out: {done} of {int(scan.chunks_total or 0)} chunks done after {minutes:.0f} min"


def _dead_letter_reason(scan: Scan, at: datetime) -> str:
    unfinished = sorted(scan.unfinished_parts())
    if scan.part_closed(ROOT) and unfinished:
        # a segment (``0+k``) is a stretch of the upload itself: a resumed tar, a range of a zip
        which = ", ".join(f"{'segment' if '+' in p else 'nested archive part'} {p}" for p in unfinished[:5])
        return f"{which} could not be unpacked: every delivery of its message failed (dead-letter queue)"
    return "the upload could not be unpacked: every delivery of its event failed (dead-letter queue)"


def _give_up(
    svc: Services, scan_id: str, why: Callable[[Scan, datetime], str], at: datetime, cutoff: str
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
    if not svc.work.exists(key):
        return False
    svc.scans.set_status(scan_id, svc.work.get_document(key)["status"])
    return True


def _dead_lettered_uploads(svc: Services) -> Iterator[str]:
    """The scans of the uploads in the upload dead-letter queue, begun here if unpack never got so far.

    The messages stay in the queue (for whoever looks into why); each sweep reads each once.
    """
    url = svc.settings.upload_dlq_url
    if not url:
        return
    for _, body in svc.work.dead_letters(url):
        part = part_of(body)
        if part is not None:  # a nested archive fanned out of an upload, never unpacked
            scan = svc.scans.get(part[0])
            if scan is not None and not scan.part_closed(part[1]):
                yield part[0]
            continue
        for upload in _uploads_of(body):
            scan_id = scan_id_for(upload.bucket, upload.key, upload.etag)
            svc.scans.begin(scan_id, upload)  # None (exists already) is the usual case
            scan = svc.scans.get(scan_id)
            # a duplicate event may be dead-lettered while the first one's unpack went through
            if scan is not None and not scan.part_closed(ROOT):
                yield scan_id


def _uploads_of(body: str) -> Iterator[Upload]:
    """The objects an S3 notification names, as the unpack would have seen them."""
    objects = created_objects(body)
    if objects is None:
        logger.error("unreadable message in the upload dead-letter queue")
        return
    for obj in objects:
        parsed = parse_drop_key(obj.key)
        yield Upload(
            bucket=obj.bucket,
            key=obj.key,
            etag=obj.etag,
            version_id=obj.version_id,
            supplier=parsed[0] if parsed else "unknown",
            metadata={},
        )

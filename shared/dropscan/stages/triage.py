"""Stage 4, triage: the classified files of a scan -> licences and red flags of its review set, the
reports, then the manifest (whose creation fires the notification).

A message of the triage queue is one of three (:func:`triage_message` tells them apart):

- ``{"scan_id", "key"}``, a classified manifest: its review set is triaged here (:func:`triage_scan`),
  or, past what one invocation detects in full (TriageMaxFiles, TriageMaxMiB), cut by distinct content
  into parts (:func:`fan_out`);
- ``{..., "triage_part": n}``: detect part ``n`` (:func:`run_part`); the part that completes the set
  sends the last kind,
- ``{..., "assemble": true}``: the parts' results merged, then the reports and the manifest written as
  for a review set triaged whole (:func:`assemble`).

The parts are counted in a string set of the scans item (a redelivered part is counted once) and the
assembler is claimed by its message id (a second assemble message does nothing): one manifest.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import IO, Any

from aws_lambda_powertools import Logger

from dropscan import heap, reports
from dropscan.archive import MAGIC_SPAN, compressor_of
from dropscan.archive.extract import Extracted, SourceFailed, contents_by_digest, streamed_contents
from dropscan.archive.inflate import CODECS
from dropscan.audit import decision_rules, delta, findings, hunk_decisions, licenses
from dropscan.audit.flags import mark_upstream_text
from dropscan.audit.manifest import to_json
from dropscan.audit.triage_plan import (
    Entry,
    assembly_plan,
    cut,
    needs_parts,
    part_entries,
    part_plan,
    read_plan,
)
from dropscan.forked import Done, Forked, spread, usable_cpus
from dropscan.keys import manifest_key, report_keys, work_key
from dropscan.stages.evidence import Prefetched, add_evidence, prefetch
from dropscan.store.desk import write_index
from dropscan.store.scans import now
from dropscan.store.services import Services
from dropscan.store.work import AWS_ERRORS

logger = Logger(service="dropscan", child=True)

#: work files of a fanned-out triage: the cut (one file), and each part's results
PLAN = "triage-plan"
RESULTS = "triage-results"


class DropReadError(RuntimeError):
    """The drop could not be read again from S3: the triage message comes back and is retried."""


def triage_message(svc: Services, message: dict[str, Any], token: str) -> str | None:
    """One triage-queue message (``token``: its message id); returns the manifest's key if written."""
    if "triage_part" in message:
        run_part(svc, message)
        return None
    if message.get("assemble"):
        return assemble(svc, message, token)
    with heap.building():
        manifest: dict[str, Any] = svc.work.get_json(message["key"])
    if manifest["status"] == "complete" and fan_out(svc, manifest, message):
        return None
    return triage_scan(svc, message, manifest=manifest)


# ------------------------------------------------------------------ a review set in one invocation
def triage_scan(
    svc: Services,
    message: dict[str, Any],
    *,
    manifest: dict[str, Any] | None = None,
    parts: Sequence[findings.PartTriage] | None = None,
) -> str | None:
    """Licences and red flags of the review set, the reports, then the manifest; returns its key.

    ``manifest``: the classified manifest, if the caller read it already; ``parts``: what the parts of a
    fanned-out triage detected (:func:`assemble`), merged here.
    """
    started = time.perf_counter()
    if manifest is None:
        with heap.building():
            manifest = svc.work.get_json(message["key"])
    key = manifest_key(manifest["supplier"], manifest["scan_id"])
    if svc.work.exists(key):
        return None  # a redelivery after the manifest was written
    workers = _workers(svc)
    if manifest["status"] == "complete":
        _triage_into(svc, manifest, workers, parts)
    manifest["reports"] = report_keys(manifest["supplier"], manifest["scan_id"])
    seconds = manifest["stats"]["seconds"]
    seconds["triage"] = round(time.perf_counter() - started, 3)
    manifest["finished_at"] = now()
    _write_reports(svc, manifest, workers)
    # written last: its creation is what fires the notification
    etag = svc.work.put_text(key, to_json(manifest), "application/json")
    svc.scans.set_status(manifest["scan_id"], manifest["status"], outcome=delta.outcome(manifest))
    _desk_index(svc, manifest, etag)
    return key


def _desk_index(svc: Services, manifest: dict[str, Any], etag: str) -> None:
    """The review desk's index beside the manifest (docs/web.md): an aid, so a failed write is logged
    and the desk makes the index itself from the manifest."""
    try:
        write_index(svc.work.s3, svc.work.bucket, manifest, etag)
    except AWS_ERRORS:
        logger.exception("the desk index was not written", extra={"scan_id": manifest["scan_id"]})


def _triage_into(
    svc: Services, manifest: dict[str, Any], workers: int, parts: Sequence[findings.PartTriage] | None = None
) -> None:
    """Write the triage into the manifest: detect, the evidence of the modified files, the decisions.

    S3 errors propagate (the message returns and is retried); anything else (a detector crash, a
    drop libarchive reads differently the second time) becomes ``triage.error`` in the manifest,
    which then still ends the scan with its classes, and the verdict is at least ``review``.
    """
    extracted, found, upstream = _detect(svc, manifest, workers, parts)
    findings.apply(manifest, found)
    _evidence_into(svc, manifest, extracted, upstream)
    mark_upstream_text(manifest)  # flags on lines the vendor did not write: counted again by settle
    _hunk_decisions(svc, manifest)
    decision_rules.reopen(manifest)  # a decision that did not see what the file now carries
    decision_rules.settle(manifest)
    for f in manifest["files"]:
        if f["sha256"] in extracted.sha1:
            f["sha1"] = extracted.sha1[f["sha256"]]


def _hunk_decisions(svc: Services, manifest: dict[str, Any]) -> None:
    """Decisions on single vendor hunks (the desk's), now that the evidence names the hunks."""
    wanted = hunk_decisions.subjects(manifest["files"])
    if wanted:
        hunk_decisions.apply(manifest, svc.decisions().for_subjects(wanted, manifest["supplier"]))


def _detect(
    svc: Services, manifest: dict[str, Any], workers: int, parts: Sequence[findings.PartTriage] | None
) -> tuple[Extracted, findings.TriageReport, Prefetched | Exception | None]:
    """Read the review set again (the evidence's upstream side meanwhile) and detect its licences and
    red flags (with ``parts``, merge theirs); a failure is the report's ``error``, not an exception."""
    extracted = Extracted()
    upstream: Prefetched | Exception | None = None

    def fetch_upstream() -> None:  # the evidence's upstream side, read while the drop is
        nonlocal upstream
        upstream = _prefetch_evidence(svc, manifest)

    limits = svc.settings.triage_limits()
    # what one invocation reads, and how much of each file (assembling parts: what they did not read)
    read = read_plan(manifest, limits) if parts is None else assembly_plan(manifest, limits)
    try:
        extracted, detector = read_drop(
            svc, manifest, read.wanted, read.caps, workers, meanwhile=fetch_upstream
        )
        found = findings.triage_manifest(
            manifest,
            extracted.content,
            detector=detector,
            truncated=extracted.truncated,
            workers=workers,
            spread=spread,
            limits=limits,
            read=read,
            releases=release_licences(svc, manifest),
            parts=parts,
        )
    except (DropReadError, *AWS_ERRORS):
        raise
    except Exception as e:  # errors are data: the manifest says triage did not finish
        logger.exception("triage failed", extra={"scan_id": manifest["scan_id"]})
        found = findings.TriageReport(
            detector=svc.settings.triage_detector, error=f"{type(e).__name__}: {e}"[:300]
        )
    return extracted, found, upstream


def _prefetch_evidence(svc: Services, manifest: dict[str, Any]) -> Prefetched | Exception:
    """The evidence's upstream side (stages.evidence.prefetch), or what broke it (recorded later)."""
    try:
        return prefetch(svc, manifest)
    except AWS_ERRORS:
        raise
    except Exception as e:  # errors are data: the evidence step says so, the files stay in review
        logger.exception("evidence prefetch failed", extra={"scan_id": manifest["scan_id"]})
        return e


def _evidence_into(
    svc: Services, manifest: dict[str, Any], extracted: Extracted, upstream: Prefetched | Exception | None
) -> None:
    """Each modified file's diff against its upstream base and the origin of each hunk; a failure is
    recorded in ``stats.evidence`` and leaves the files in review (S3 errors are retried)."""
    try:
        if isinstance(upstream, Exception):
            raise upstream
        report = add_evidence(svc, manifest, extracted.content, extracted.truncated, upstream).to_json()
    except AWS_ERRORS:
        raise
    except Exception as e:  # errors are data: the files stay in review, unexplained
        logger.exception("evidence failed", extra={"scan_id": manifest["scan_id"]})
        report = {"error": f"{type(e).__name__}: {e}"[:300]}
    manifest["stats"]["evidence"] = report


def _write_reports(svc: Services, manifest: dict[str, Any], workers: int) -> None:
    """HTML, SPDX and CycloneDX beside the manifest; their time is the manifest's own, not theirs."""
    rendering = time.perf_counter()
    for fmt, text in reports.render_all(manifest, manifest["reports"], workers=workers).items():
        svc.work.put_text(manifest["reports"][fmt], text, reports.FORMATS[fmt].media_type)
    manifest["stats"]["seconds"]["reports"] = round(time.perf_counter() - rendering, 3)


def release_licences(svc: Services, manifest: Mapping[str, Any]) -> dict[str, dict[str, Any] | None]:
    """Component prefix -> the licence recorded for its release at ingest (None: none recorded)."""
    out: dict[str, dict[str, Any] | None] = {}
    for c in manifest["components"]:
        if c.get("identified"):
            report = svc.releases.report(c["package"], c["version"]) or {}
            out[c["prefix"]] = report.get("license")
    return out


def _workers(svc: Services) -> int:
    """Processes triage may detect and render on (TRIAGE_WORKERS; 0: one per CPU)."""
    return svc.settings.triage_workers or usable_cpus()


# ------------------------------------------------------------------ a review set in parts
def fan_out(svc: Services, manifest: dict[str, Any], message: dict[str, Any]) -> bool:
    """Send the review set to parts if one invocation would not detect it in full; False: triage here.

    The cut is deterministic: a redelivered message writes the same plan and count and sends the same
    parts again, which count themselves once.
    """
    limits = svc.settings.triage_limits()
    if not needs_parts(read_plan(manifest, limits), limits):
        return False
    scan_id = manifest["scan_id"]
    if svc.work.exists(manifest_key(manifest["supplier"], scan_id)):
        return True  # a redelivery after the manifest was written: nothing left to do
    parts = cut(part_entries(manifest), limits)
    if len(parts) < 2:
        return False
    metadata = manifest.get("source", {}).get("metadata") or {}
    planned = {
        "supplier": manifest["supplier"],
        "source": manifest["source"],
        "declared": metadata.get("arch"),
        "parts": parts,
    }
    svc.work.put_json(work_key(scan_id, PLAN, 0), planned)
    svc.scans.set_triage_parts(scan_id, len(parts))  # before any part can count itself done
    for n in range(len(parts)):
        svc.work.send_triage(scan_id, message["key"], triage_part=n)
    logger.info("triage fanned out", extra={"scan_id": scan_id, "parts": len(parts)})
    return True


def run_part(svc: Services, message: dict[str, Any]) -> None:
    """Detect one part's contents, write its results, count it done; the last one sends ``assemble``.

    S3 errors and a drop that cannot be read again propagate (the message returns, and a part that
    never succeeds is ended by the sweeper with the scan); a detector crash is recorded in the part's
    results and reaches the manifest's ``triage.error``.
    """
    scan_id, n = message["scan_id"], int(message["triage_part"])
    planned = svc.work.get_json(work_key(scan_id, PLAN, 0))
    if svc.work.exists(manifest_key(planned["supplier"], scan_id)):
        return  # the scan has ended (assembled, or given up by the sweeper)
    entries: list[Entry] = [(d, int(size), kind, config) for d, size, kind, config in planned["parts"][n]]
    limits = svc.settings.triage_limits()
    read = part_plan(entries, limits)
    workers = _workers(svc)
    started = time.perf_counter()
    try:
        extracted, detector = read_drop(svc, planned, read.wanted, read.caps, workers)
        found = findings.triage_part(
            n,
            entries,
            extracted.content,
            detector=detector,
            limits=limits,
            read=read,
            declared=planned["declared"],
            truncated=extracted.truncated,
            workers=workers,
            spread=spread,
        )
    except (DropReadError, *AWS_ERRORS):
        raise
    except Exception as e:  # errors are data: the assembler records them in triage.error
        logger.exception("triage part failed", extra={"scan_id": scan_id, "part": n})
        found = findings.PartTriage(n, error=f"{type(e).__name__}: {e}"[:300])
    found.seconds = time.perf_counter() - started
    svc.work.put_json(work_key(scan_id, RESULTS, n), found.to_json())
    complete = svc.scans.triage_part_done(scan_id, n)
    logger.info(
        "triage part done",
        extra={"scan_id": scan_id, "part": n, "contents": len(entries), "seconds": round(found.seconds, 3)},
    )
    if complete:
        svc.work.send_triage(scan_id, message["key"], assemble=True)


def assemble(svc: Services, message: dict[str, Any], token: str) -> str | None:
    """The parts' results merged into the manifest, the reports, the manifest: by one message only."""
    scan_id = message["scan_id"]
    if not svc.scans.claim_assembly(scan_id, token):
        return None  # another assemble message holds it (a part redelivered after the set was complete)
    planned = svc.work.get_json(work_key(scan_id, PLAN, 0))
    parts = [
        findings.PartTriage.from_json(svc.work.get_json(work_key(scan_id, RESULTS, n)))
        for n in range(len(planned["parts"]))
    ]
    return triage_scan(svc, message, parts=parts)


# ------------------------------------------------------------------ the drop, read again
def read_drop(
    svc: Services,
    manifest: Mapping[str, Any],
    wanted: Mapping[str, int],
    caps: Mapping[str, int],
    workers: int,
    *,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[Extracted, licenses.Detector]:
    """The ``wanted`` contents of the drop (at most ``caps`` of each), read again, and the licence
    detector, whose index loads while the drop is read (DropReadError: the drop could not be read);
    ``meanwhile`` runs then too, before the index loads."""
    with tempfile.NamedTemporaryFile(dir=svc.settings.scratch_dir, suffix=".drop") as spool:
        streamed = _stream_again(svc, manifest, wanted, caps) if workers > 1 else None
        reread = streamed or _read_again(svc, manifest, spool, wanted, caps, beside=workers > 1)
        with reread as reading:
            if meanwhile is not None:
                meanwhile()
            detector = licenses.detector(svc.settings.triage_detector)
            got = reading.result()
        if isinstance(got, SourceFailed):
            raise DropReadError(got.message)
        if got is None:  # not an archive that reads as a stream: from a copy on disk
            with _read_again(svc, manifest, spool, wanted, caps, beside=False) as reading:
                got = reading.result()
    return got or Extracted(), detector


def _drop(manifest: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(bucket, key, version) of the drop the manifest is about."""
    src = manifest["source"]
    return src["bucket"], src["key"], src.get("version_id")


def _read_again(
    svc: Services,
    manifest: Mapping[str, Any],
    spool: IO[bytes],
    wanted: Mapping[str, int],
    caps: Mapping[str, int],
    *,
    beside: bool,
) -> Forked[Extracted | None] | Done[Extracted | None]:
    """The bytes of the review set (and licence files) out of a copy of the drop on disk, at most
    ``caps`` of each: in a forked child if ``beside``."""
    svc.objects.download(*_drop(manifest), spool)
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
    codec = compressor_of(svc.objects.read_head(*_drop(manifest), MAGIC_SPAN))
    if codec not in CODECS:
        return None
    return Forked(streamed_contents, svc.objects.opener(*_drop(manifest)), codec, wanted, caps)

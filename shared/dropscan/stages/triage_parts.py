"""Triage fanned out across invocations: a review set past what one triage invocation detects in full
(TriageMaxFiles, TriageMaxMiB) is cut into parts by distinct content, each detected by an invocation of
its own; the part that completes the set hands it to one assembler, which writes the reports and the
single manifest (dropscan.stages.triage, with the parts' results).

Messages on the triage queue, by kind: ``{"scan_id", "key"}`` (a classified manifest: triage it, or fan
it out), ``{..., "triage_part": n}`` (detect part ``n``), ``{..., "assemble": true}`` (assemble).
The parts are counted in a string set of the scans item (a redelivered part is counted once) and the
assembler is claimed by its message id (a second assemble message does nothing): one manifest.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools import Logger

from dropscan import heap
from dropscan.audit import findings
from dropscan.audit.triage_plan import Entry, cut, needs_parts, part_entries, part_plan, read_plan
from dropscan.forked import spread, usable_cpus
from dropscan.keys import manifest_key, work_key
from dropscan.stages.triage import DropReadError, read_drop, triage_scan
from dropscan.store.services import Services
from dropscan.store.work import AWS_ERRORS

logger = Logger(service="dropscan", child=True)

#: work files of a fanned-out triage: the cut (one file), and each part's results
PLAN = "triage-plan"
RESULTS = "triage-results"


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
    workers = svc.settings.triage_workers or usable_cpus()
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

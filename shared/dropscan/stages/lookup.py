"""Stage 2, lookup: one hash chunk -> the upstream table's answer for its digests, kept for finalize."""

from __future__ import annotations

import time
from typing import Any

from dropscan.chunks import lookup_keys
from dropscan.keys import ROOT, chunk_tag, work_key
from dropscan.models import FileRecord, info_to_json
from dropscan.store.services import Services


def lookup_chunk(svc: Services, message: dict[str, Any]) -> None:
    """Ask the upstream table for one chunk's digests; hand the files and what was found to finalize."""
    started = time.perf_counter()
    scan_id, seq, part = message["scan_id"], int(message["seq"]), message.get("part", ROOT)
    records, keys = chunk_body(svc, message)
    db = svc.upstream()
    known = db.lookup(keys)
    # files are classed in finalize: a file's digest may have been asked for by an earlier chunk
    result = {
        "records": records,
        "known": {d: info_to_json(info) for d, info in known.items()},
        "dynamodb": db.stats.as_dict(),
        "seconds": time.perf_counter() - started,
    }
    svc.work.put_json(work_key(scan_id, "results", seq, part), result)
    if svc.scans.chunk_done(scan_id, chunk_tag(part, seq)):  # the scan's last chunk: hand it on
        svc.work.send_finalize(scan_id)


def chunk_body(svc: Services, message: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """(compact records, digests to ask for) of a chunk message, inline or from S3."""
    body: dict[str, Any] = message
    if message.get("records") is None:
        stored = svc.work.get_json(message["records_key"])
        body = stored if isinstance(stored, dict) else {"records": stored}
    records: list[dict[str, Any]] = body["records"]
    keys = body.get("keys")
    if keys is None:  # a chunk cut before chunks carried their keys: its own files' digests
        keys = [k for r in records for k in lookup_keys(FileRecord.from_json(r))]
    return records, list(keys)

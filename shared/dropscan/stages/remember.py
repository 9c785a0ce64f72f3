"""Finalize's memory: the product a drop is a release of, what changed since its previous drop, and
the auditors' decisions that already cover files of its review set.

Called by finalize on a complete scan, after the files are classed: one update of the scan item, one
query of the product-scans index, one read of the previous drop's file index and one write of this
drop's, and one BatchGetItem per 50 distinct contents of the review set; the file indexes are
handled while the decisions are read.
"""

from __future__ import annotations

import time
from typing import Any

from dropscan import heap
from dropscan.audit import decision_rules, delta
from dropscan.keys import file_index_key, product_key
from dropscan.models import Scan
from dropscan.store.services import Services


def remember(svc: Services, scan: Scan, manifest: dict[str, Any]) -> None:
    """Write ``product``, ``delta`` and the files' ``decision`` into a complete scan's manifest."""
    started = time.perf_counter()
    supplier, files = scan.supplier, manifest["files"]
    product = delta.product_of(scan.key, scan.metadata)
    key = product_key(supplier, product)
    svc.scans.set_product(scan.scan_id, key, product)
    changes: list[dict[str, Any] | None] = []

    def file_indexes() -> None:
        with heap.building():  # two file indexes of an entry per file, beside the manifest's own
            index = delta.index_of(files, manifest["components"])
            svc.work.put_json(file_index_key(supplier, scan.scan_id), delta.index_to_json(index))
            changes.append(_delta(svc, scan, key, index))

    store = svc.decisions()
    # the file indexes are written, read and compared while the decisions are read
    found = store.for_contents(decision_rules.review_digests(files), supplier, meanwhile=file_indexes)
    manifest["product"] = product
    manifest["delta"] = changes[0]
    decision_rules.attach(files, decision_rules.choose(found, supplier))
    decision_rules.settle(manifest)
    manifest["summary"]["delta"] = delta.counts(manifest["delta"])
    stats = manifest["stats"]
    # finalize's own seconds include these; the per-stage timings stay one entry per stage
    stats["decisions"] = {
        "batch_get_calls": store.stats.batch_get_calls,
        "keys_requested": store.stats.keys_requested,
        "found": len(found),
        "seconds": round(time.perf_counter() - started, 3),
    }


def _delta(svc: Services, scan: Scan, key: str, index: delta.Index) -> dict[str, Any] | None:
    """The comparison with the previous complete scan of the product; None for its first drop."""
    previous = svc.scans.previous_complete(key, scan.scan_id, scan.created_at)
    if previous is None:
        return None
    where = file_index_key(previous["supplier"], previous["scan_id"])
    if not svc.work.exists(where):
        return None  # a scan from before file indexes were written
    ref = {
        "scan_id": previous["scan_id"],
        "key": previous["key"],
        "finished_at": previous["finished_at"],
        "version": (previous.get("outcome") or {}).get("version") or delta.version_of(previous["key"]),
    }
    return delta.compare(delta.index_from_json(svc.work.get_json(where)), index, ref)

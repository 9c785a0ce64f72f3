"""What remembering costs a kernel-size scan: finalize's product, delta and decisions step
(``stages.remember``) and triage's re-open check, on a synthetic manifest of 80,715 files of which
3,022 are to review (the kernel drop's counts), every review content with a decision, the previous
drop's file index in place. Runs on the embedded stack (moto, in this process); medians of runs.

The floor is ``to_json`` of the manifest, timed in the same runs: triage writes it once anyway.

``index_round_trip_*``: the file index built, gzipped, parsed and compared in this process before the
embedded stack starts, i.e. with the collector as a deployed function has it (the embedded stack freezes
its survivors), once as it runs and once with collection paused as ``remember`` now does.

    cd bench && PYTHONPATH=../shared ../.venv/bin/python decisions_80k.py [--files 80715] [--review 3022] \
        [--runs 5]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import hashlib
import json
import os
import time
from typing import Any

from dropscan import heap
from dropscan.audit import decision_rules, delta
from dropscan.audit.manifest import build_manifest, to_json
from dropscan.keys import file_index_key, product_key
from dropscan.local.embedded import embedded
from dropscan.models import Decision, content_subject
from dropscan.stages.remember import remember
from dropscan.store.services import current_services
from dropscan.store.work import gz_json

from hash_bench import paired, timed

PREFIX = "linux-6.1.176-acme/"


def synthetic(n: int, review: int, salt: str = "") -> list[dict[str, Any]]:
    files = []
    for i in range(n):
        h = hashlib.sha256(f"{i}{salt if i < 50 else ''}".encode()).hexdigest()  # 50 files changed
        cls = "identical" if i >= review else ("modified" if i % 3 else "added")
        files.append({"path": f"{PREFIX}drivers/dir{i % 900:03d}/file{i:06d}.c", "size": 1000,
                      "sha256": h, "kind": "text", "class": cls, "component": PREFIX})  # fmt: skip
    return files


def manifest(files: list[dict[str, Any]], scan_id: str) -> dict[str, Any]:
    return build_manifest(
        scan_id=scan_id, supplier="acme", source={"key": "drops/acme/linux-6.1.176-acme.tar.gz"},
        status="complete", reason=None, files=files,
        components=[{"prefix": PREFIX, "identified": True, "package": "linux"}],
        stats={"seconds": {}}, created_at="2026-01-02T00:00:00+00:00", finished_at="x",
    )  # fmt: skip


def index_round_trip(files: list[dict[str, Any]], runs: int) -> tuple[float, float, float]:
    """(collector running, collector paused, ratio): a file index built, written, read and compared
    in a process that holds a kernel-size manifest, as finalize's does."""
    m = manifest(files, "s-cur")

    def trip() -> None:
        index = delta.index_of(m["files"], m["components"])
        stored = json.loads(gzip.decompress(gz_json(delta.index_to_json(index))))
        delta.compare(delta.index_from_json(stored), index, {})

    def paused() -> None:
        with heap.building():
            trip()

    on, off, ratio = paired(trip, paused, runs)
    return on, off, ratio


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=80_715)
    ap.add_argument("--review", type=int, default=3_022)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    gc_on, gc_paused, _ = index_round_trip(synthetic(a.files, a.review), a.runs)
    with embedded():
        svc = current_services()
        key = product_key("acme", "linux-acme")
        # the previous drop: complete, filed under the product, its file index written
        previous = synthetic(a.files, a.review)
        m0 = manifest(previous, "s-prev")
        svc.scans.model("s-prev", supplier="acme", bucket="b", key="drops/acme/linux-6.1.175-acme.tar.gz",
                        created_at="2026-01-01T00:00:00+00:00", status="complete", product="linux-acme",
                        product_key=key, finished_at="2026-01-01T01:00:00+00:00").save()  # fmt: skip
        svc.work.put_json(
            file_index_key("acme", "s-prev"), delta.index_to_json(delta.index_of(previous, m0["components"]))
        )
        # every review content of it accepted
        at = "2026-01-01T02:00:00+00:00"
        review = [f["sha256"] for f in m0["files"] if f["class"] in ("modified", "added")]
        svc.decisions().put(
            [Decision(content_subject(d), "supplier", "acme", "accepted", "bench", at) for d in review]
        )
        svc.scans.model("s-cur", supplier="acme", bucket="b", key="drops/acme/linux-6.1.176-acme.tar.gz",
                        created_at="2026-01-02T00:00:00+00:00").save()  # fmt: skip
        scan = svc.scans.get("s-cur")
        assert scan is not None
        base = manifest(synthetic(a.files, a.review, salt="next"), "s-cur")

        copies = [copy.deepcopy(base) for _ in range(a.runs + 1)]
        last: dict[str, Any] = {}

        def step() -> None:
            m = copies.pop()
            remember(svc, scan, m)
            last.update(m)

        floor, ours, ratio = paired(lambda: to_json(base), step, a.runs)
        if os.environ.get("BENCH_PROFILE"):
            import cProfile

            cProfile.runctx("step()", globals(), locals(), os.environ["BENCH_PROFILE"])
        assert last["summary"]["cleared"] == a.review - 50 and last["summary"]["delta"]["changed"] == 50
        store = svc.decisions()
        digests = decision_rules.review_digests(base["files"])
        lookup = timed(lambda: store.for_contents(digests, "acme"), a.runs)
        triaged = copy.deepcopy(last)
        triaged["flags"] = []

        def reopen() -> None:
            decision_rules.reopen(triaged)
            decision_rules.settle(triaged)

        after_triage = timed(reopen, a.runs)
        t = time.perf_counter()
        index = delta.index_of(base["files"], base["components"])
        delta.compare(index, index, {})
        pure_delta = time.perf_counter() - t
    out = {"files": a.files, "review": a.review, "decided": a.review, "runs": a.runs}
    out |= {"finalize_remember_s": ours, "floor_to_json_s": floor, "ratio": ratio}
    out |= {"decisions_lookup_s": lookup, "batch_get_calls": last["stats"]["decisions"]["batch_get_calls"]}
    out |= {"delta_index_and_compare_s": pure_delta, "triage_reopen_and_settle_s": after_triage}
    out |= {"index_round_trip_s": gc_on, "index_round_trip_gc_paused_s": gc_paused}
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}, indent=1))


if __name__ == "__main__":
    main()

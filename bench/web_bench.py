"""The review desk's latency on the local stack (issue 38): a drop's review page and a file's page,
against the same stack's plain ``GetItem`` of the scan, for a kernel-sized review set (3,000 files) and
a drop nothing upstream explains (120,000 files).

Each drop's manifest is written as triage writes one (a scan item, ``results/<supplier>/<id>/
manifest.json``; every file in the review set, a modified file with a 40-line diff and a red flag every
hundred files), on the embedded stack; a reviewer signs in through moto's Cognito and every request goes
through the local HTTP API's JWT check and the web function, in this process. The first request of a drop
(reading and parsing its manifest) is reported apart; then the median of ``--runs`` requests of each
page, and of as many ``GetItem`` calls, taken in turns.

    python bench/web_bench.py [--sizes 3000,120000] [--runs 15] [--out bench-out/web]

Writes ``<out>/web.json`` and ``<out>/web.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from dropscan.keys import desk_index_keys, manifest_key  # noqa: E402
from dropscan.local.embedded import embedded  # noqa: E402
from dropscan.models import Upload  # noqa: E402
from dropscan.store.desk import write_index  # noqa: E402
from dropscan.web import routes  # noqa: E402

from helpers.desk import DeskClient  # noqa: E402

PATCH = "--- a/x.c\n+++ b/x.c\n@@ -1,20 +1,20 @@\n" + "".join(
    f"-int old{i} = {i};\n+int new{i} = {i};\n" for i in range(20)
)


def review_file(i: int) -> dict[str, Any]:
    path = f"drop-1.0/d{i % 500:03d}/f{i:06d}.c"
    f: dict[str, Any] = {
        "path": path,
        "sha256": f"{i:064x}",
        "sha1": f"{i:040x}",
        "size": 400,
        "kind": "file",
    }
    f["class"] = "modified" if i % 3 == 0 else "added"
    f["component"] = "drop-1.0/"
    f["licenses"] = [{"expression": "GPL-2.0-only", "source": "spdx-tag", "line": 1}]
    if f["class"] == "modified":
        hunk = {"old_start": 1, "old_lines": 20, "new_start": 1, "new_lines": 20, "origin": "vendor"}
        base = {"package": "drop", "version": "1.0", "path": path[9:]}
        f["evidence"] = {"base": base, "origin": "vendor", "lines_added": 20, "lines_removed": 20}
        f["evidence"] |= {"patch": PATCH, "hunks": [hunk]}
    return f


def manifest(scan_id: str, n: int) -> dict[str, Any]:
    files = [review_file(i) for i in range(n)]
    flags = [
        {"kind": "proprietary", "severity": "action-required", "path": f["path"], "line": 3,
         "evidence": "CONFIDENTIAL", "component": "drop-1.0/", "detail": "a notice"}
        for i, f in enumerate(files) if i % 100 == 7
    ]  # fmt: skip
    modified = sum(f["class"] == "modified" for f in files)
    summary = {
        "files": n,
        "classes": {"modified": modified, "added": n - modified},
        "review": n,
        "cleared": 0,
    }
    summary["flags"] = {"action-required": len(flags), "review": 0}
    return {
        "schema": "dropscan.manifest/1",
        "scan_id": scan_id,
        "supplier": "acme",
        "status": "complete",
        "verdict": "action-required",
        "created_at": "2026-12-07T00:00:00+00:00",
        "finished_at": "2026-12-07T00:01:00+00:00",
        "source": {"bucket": "drops", "key": f"drops/acme/drop-{n}.tar.gz"},
        "summary": summary,
        "components": [{"prefix": "drop-1.0/", "package": "drop", "version": "1.0", "identified": True}],
        "files": files,
        "flags": flags,
        "reports": {},
    }


PAGES = ("review page", "review page, one folder", "review page 50, by folder", "file page")


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def timed(call: Callable[[], Any]) -> float:
    t = time.perf_counter()
    call()
    return time.perf_counter() - t


def synthetic(es: Any, n: int) -> tuple[str, str, int]:
    """A manifest of ``n`` review files written as triage writes one, its desk index beside it:
    (scan id, a modified file's path, the manifest's bytes)."""
    scan_id = f"s-{n:024x}"
    es.client.scans.begin(scan_id, Upload("drops", f"drops/acme/drop-{n}.tar.gz", "e", None, "acme", {}))
    es.client.scans.set_status(scan_id, "complete", outcome={"verdict": "action-required", "files": n})
    m = manifest(scan_id, n)
    body = json.dumps(m).encode()
    put = es.client.s3.put_object(
        Bucket=es.names.results_bucket, Key=manifest_key("acme", scan_id), Body=body
    )
    write_index(es.client.s3, es.names.results_bucket, m, put["ETag"])
    i = n // 2 - (n // 2) % 3
    return scan_id, f"drop-1.0/d{i % 500:03d}/f{i:06d}.c", len(body)


def scanned(es: Any, drop: Path, upstreams: list[str]) -> tuple[str, str, int]:
    """A real drop scanned through the whole flow (triage writes the index): (scan id, its first modified
    file with a diff, the manifest's bytes)."""
    for spec in upstreams:
        name, _, path = spec.partition("=")
        package, _, version = name.partition("@")
        es.client.ingest(Path(path), package, version)
    _, scan_id = es.client.upload_drop(drop, "acme")
    m = es.client.wait_manifest("acme", scan_id, timeout=3600)
    if m is None or not es.dispatcher.drain(timeout=600):
        raise SystemExit(f"{drop}: no manifest")
    files = [f for f in m["files"] if f["class"] == "modified" and f.get("evidence")]
    files = files or [f for f in m["files"] if f["class"] in ("modified", "added")]
    head = es.client.s3.head_object(Bucket=es.names.results_bucket, Key=manifest_key("acme", scan_id))
    return scan_id, str(files[0]["path"]), int(head["ContentLength"])


def measure(
    es: Any, alice: Any, label: str, scan_id: str, file_path: str, size: int, runs: int
) -> dict[str, Any]:
    """The first request of a drop (a fresh function: the index read and parsed) against a plain GetObject
    of the index; the same without an index (the manifest parsed, the index made and written); then the
    pages, each against a plain GetItem of the scan, medians of ``runs`` taken in turns."""
    s3, bucket = es.client.s3, es.names.results_bucket
    ddb, table = es.session.client("dynamodb"), es.names.scans_table
    index_key, _ = desk_index_keys("acme", scan_id)
    file_url = f"/scans/{scan_id}/file?path={quote(file_path, safe='')}"
    pages: dict[str, Callable[[], Any]] = {
        PAGES[0]: lambda: _ok(alice.get(f"/scans/{scan_id}")),
        PAGES[1]: lambda: _ok(alice.get(f"/scans/{scan_id}", folder=file_path.rpartition("/")[0] + "/")),
        PAGES[2]: lambda: _ok(alice.get(f"/scans/{scan_id}", group="folder", page="50")),
        PAGES[3]: lambda: _ok(alice.get(file_url)),
    }
    first: list[float] = []
    first_file: list[float] = []
    object_floor: list[float] = []
    for _ in range(max(3, runs // 3)):
        object_floor.append(timed(lambda: s3.get_object(Bucket=bucket, Key=index_key)["Body"].read()))
        routes.use_backend(None)  # a cold function: nothing kept
        first.append(timed(pages[PAGES[0]]))
        routes.use_backend(None)
        first_file.append(timed(pages[PAGES[3]]))
    s3.delete_object(Bucket=bucket, Key=index_key)  # as a scan from before the index
    routes.use_backend(None)
    no_index = timed(pages[PAGES[0]])
    floor: list[float] = []
    samples: dict[str, list[float]] = {k: [] for k in pages}
    for _ in range(runs):  # in turns, so that a drift of the machine touches all alike
        floor.append(timed(lambda: ddb.get_item(TableName=table, Key={"scan_id": {"S": scan_id}})))
        for name, call in pages.items():
            samples[name].append(timed(call))
    index_size = s3.head_object(Bucket=bucket, Key=index_key)["ContentLength"]
    row: dict[str, Any] = {"drop": label, "review": len(routes.backend().desk.index("acme", scan_id).rows)}  # type: ignore[union-attr]
    row |= {"manifest_mb": round(size / 1e6, 1), "index_mb": round(index_size / 1e6, 1)}
    row |= {
        "first_request_ms": median_ms(first),
        "first_file_page_ms": median_ms(first_file),
        "getobject_index_ms": median_ms(object_floor),
        "first_request_x": round(statistics.median(first) / statistics.median(object_floor), 1),
        "first_file_page_x": round(statistics.median(first_file) / statistics.median(object_floor), 1),
        "no_index_first_request_ms": round(no_index * 1000),
        "getitem_ms": median_ms(floor),
    }
    for name, t in samples.items():
        row[f"{name} ms"] = median_ms(t)
        row[f"{name} x"] = round(statistics.median(t) / statistics.median(floor), 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="3000,120000", help="synthetic review sets (empty: none)")
    ap.add_argument("--drop", type=Path, help="a real drop to scan first (the BusyBox acceptance case)")
    ap.add_argument("--upstream", action="append", default=[], help="PACKAGE@VERSION=ARCHIVE for --drop")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", default="bench-out/web")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    with embedded() as es:
        desk = DeskClient(es)
        desk.add_user("alice", "review-acme")
        alice = desk.sign_in("alice")
        drops: list[tuple[str, Callable[[], tuple[str, str, int]]]] = []
        if a.drop:
            drops.append((a.drop.name, partial(scanned, es, a.drop, a.upstream)))
        for n in (int(x) for x in a.sizes.split(",") if x):
            drops.append((f"synthetic {n:,}", partial(synthetic, es, n)))
        for label, make in drops:
            scan_id, path, size = make()
            row = measure(es, alice, label, scan_id, path, size, a.runs)
            results.append(row)
            print(json.dumps(row), flush=True)
    (out / "web.json").write_text(json.dumps(results, indent=1))
    head = " | ".join(f"{k} ms (x GetItem)" for k in PAGES)
    lines = [
        "| drop | review files | manifest MB | index MB | first review page ms (x GetObject of the index) "
        f"| first file page ms (x) | first request without an index ms | GetItem ms | {head} |",
        "|" + "---|" * 12,
    ]
    for r in results:
        cells = " | ".join(f"{r[f'{k} ms']} ({r[f'{k} x']}x)" for k in PAGES)
        lines.append(
            f"| {r['drop']} | {r['review']:,} | {r['manifest_mb']} | {r['index_mb']} "
            f"| {r['first_request_ms']} ({r['first_request_x']}x) "
            f"| {r['first_file_page_ms']} ({r['first_file_page_x']}x) "
            f"| {r['no_index_first_request_ms']} | {r['getitem_ms']} | {cells} |"
        )
    (out / "web.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _ok(answer: Any) -> None:
    if answer.status != 200:
        raise SystemExit(f"the desk answered {answer.status}: {answer.body[:300]}")


if __name__ == "__main__":
    sys.exit(main())

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
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from dropscan.keys import manifest_key  # noqa: E402
from dropscan.local.embedded import embedded  # noqa: E402
from dropscan.models import Upload  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="3000,120000")
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
        ddb = es.session.client("dynamodb")
        table = es.names.scans_table
        for n in (int(s) for s in a.sizes.split(",")):
            scan_id = f"s-{n:024x}"
            es.client.scans.begin(
                scan_id, Upload("drops", f"drops/acme/drop-{n}.tar.gz", "e", None, "acme", {})
            )
            es.client.scans.set_status(
                scan_id, "complete", outcome={"verdict": "action-required", "files": n}
            )
            body = json.dumps(manifest(scan_id, n)).encode()
            es.client.s3.put_object(
                Bucket=es.names.results_bucket, Key=manifest_key("acme", scan_id), Body=body
            )
            file_path = f"drop-1.0/d{(n // 2 - (n // 2) % 3) % 500:03d}/f{n // 2 - (n // 2) % 3:06d}.c"
            file_url = f"/scans/{scan_id}/file?path={quote(file_path, safe='')}"
            pages: dict[str, Callable[[], Any]] = {
                PAGES[0]: lambda s=scan_id: _ok(alice.get(f"/scans/{s}")),
                PAGES[1]: lambda s=scan_id: _ok(alice.get(f"/scans/{s}", folder="drop-1.0/d123/")),
                PAGES[2]: lambda s=scan_id: _ok(alice.get(f"/scans/{s}", group="folder", page="50")),
                PAGES[3]: lambda u=file_url: _ok(alice.get(u)),
            }
            first = timed(pages["review page"])
            floor: list[float] = []
            samples: dict[str, list[float]] = {k: [] for k in pages}
            for _ in range(a.runs):  # in turns, so that a drift of the machine touches all alike
                floor.append(
                    timed(lambda s=scan_id: ddb.get_item(TableName=table, Key={"scan_id": {"S": s}}))
                )
                for name, call in pages.items():
                    samples[name].append(timed(call))
            row: dict[str, Any] = {"files": n, "manifest_mb": round(len(body) / 1e6, 1)}
            row |= {"first_request_ms": round(first * 1000), "getitem_ms": median_ms(floor)}
            for name, s in samples.items():
                row[f"{name} ms"] = median_ms(s)
                row[f"{name} x"] = round(statistics.median(s) / statistics.median(floor), 1)
            results.append(row)
            print(json.dumps(row), flush=True)
    (out / "web.json").write_text(json.dumps(results, indent=1))
    head = " | ".join(f"{k} ms (x GetItem)" for k in PAGES)
    lines = [f"| files | manifest MB | first request ms | GetItem ms | {head} |", "|" + "---|" * 8]
    for r in results:
        cells = " | ".join(f"{r[f'{k} ms']} ({r[f'{k} x']}x)" for k in PAGES)
        lines.append(
            f"| {r['files']:,} | {r['manifest_mb']} | {r['first_request_ms']} | {r['getitem_ms']} | {cells} |"
        )
    (out / "web.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _ok(answer: Any) -> None:
    if answer.status != 200:
        raise SystemExit(f"the desk answered {answer.status}: {answer.body[:300]}")


if __name__ == "__main__":
    sys.exit(main())

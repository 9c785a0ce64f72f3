"""Render every report of a synthetic kernel-size manifest (80,715 files, 3,022 to review); medians of runs.

The floor is ``json.dumps`` of the manifest itself, timed in the same run: a report that must at least
walk every file record cannot be much cheaper than writing them out once.

    PYTHONPATH=shared python bench/reports_80k.py [--files 80715] [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
from typing import Any

from dropscan.audit.manifest import summarize
from dropscan.reports import FORMATS, render

from hash_bench import timed as median

LICENCES = ["GPL-2.0-only", "GPL-2.0-or-later", "GPL-2.0-only WITH Linux-syscall-note", "BSD-3-Clause", "MIT"]


def synthetic(n: int, review: int) -> dict[str, Any]:
    prefix = "linux-6.1.176-acme/"
    files = []
    for i in range(n):
        h = hashlib.sha256(str(i).encode()).hexdigest()
        cls = "identical" if i >= review else ("modified" if i % 3 else "added")
        f: dict[str, Any] = {
            "path": f"{prefix}drivers/dir{i % 900:03d}/file{i:06d}.c",
            "size": 1000 + i % 5000,
            "sha256": h,
            "sha1": hashlib.sha1(h.encode()).hexdigest(),
            "kind": "text",
            "class": cls,
            "component": prefix,
        }
        if cls == "identical":
            f["upstream"] = [{"package": "linux", "versions": ["6.1.176"]}]
        else:
            lic = LICENCES[i % len(LICENCES)]
            f["licenses"] = [
                {
                    "expression": lic,
                    "source": "spdx-tag",
                    "line": 1,
                    "end_line": 1,
                    "text": f"// SPDX-License-Identifier: {lic}",
                    "confidence": 100.0,
                }
            ]
        files.append(f)
    flags = [
        {
            "kind": "license-different",
            "severity": "review",
            "path": files[i]["path"],
            "line": 1,
            "evidence": "SPDX-License-Identifier: BSD-3-Clause",
            "component": prefix,
            "detail": "BSD-3-Clause in a GPL-2.0-only component.",
        }
        for i in range(3, review, 5 * 20)
    ]
    summary = summarize(files)
    classes = summary["classes"]
    return {
        "schema": "dropscan.manifest/1",
        "generator": "dropscan bench",
        "scan_id": "s-" + "0" * 24,
        "supplier": "acme",
        "status": "complete",
        "reason": None,
        "verdict": "review",
        "source": {
            "bucket": "b",
            "key": "drops/acme/acme-linux-6.1.176-gpl.tar.gz",
            "size": 1,
            "sha256": "0" * 64,
        },
        "created_at": "2026-12-03T10:00:00+00:00",
        "finished_at": "2026-12-03T10:03:00+00:00",
        "summary": {**summary, "flags": {"action-required": 0, "review": len(flags)}},
        "components": [
            {
                "prefix": prefix,
                "package": "linux",
                "version": "6.1.176",
                "identified": True,
                "match_pct": 96.3,
                "files": n,
                "classes": classes,
                "missing": [],
                "license": "GPL-2.0-only",
                "trust": "high",
            }
        ],
        "files": files,
        "flags": flags,
        "stats": {},
        "triage": {"detector": "spdx-tags+rules", "files": review, "seconds": 1.0},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=80_715)
    ap.add_argument("--review", type=int, default=3_022)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    m = synthetic(a.files, a.review)
    for fmt in FORMATS:  # imports (spdx-tools, cyclonedx) and licence tables out of the timing
        render(synthetic(10, 3), fmt)
    floor = median(lambda: json.dumps(m), a.runs)
    print(f"{a.files:,} files, {a.review:,} to review; floor json.dumps(manifest) {floor:.2f} s")
    for fmt in FORMATS:
        size = len(render(m, fmt))
        t = median(lambda fmt=fmt: render(m, fmt), a.runs)  # type: ignore[misc]
        print(f"  {fmt:<10} {t:6.2f} s  {t / floor:5.1f}x floor  {size / 1e6:6.1f} MB")


if __name__ == "__main__":
    main()

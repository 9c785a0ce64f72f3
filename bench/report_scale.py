"""Each report format of a review set of 20,000 to 160,000 files, against json.dumps of the manifest.

Synthetic manifests whose files are all in the review set (``reports_80k.synthetic(n, n)``: a licence
finding on every file, a red flag every 100): if a format stays within a constant factor of the floor as
the review set grows, it is linear (issue 22). One process, one run per size: a ratio taken beside its
floor is what a shared machine allows.

    PYTHONPATH=shared python bench/report_scale.py [--sizes 20000,40000,80000,160000]
"""

from __future__ import annotations

import argparse
import json
import time

from reports_80k import synthetic

from dropscan.reports import FORMATS, render


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,40000,80000,160000")
    a = ap.parse_args()
    for fmt in FORMATS:  # imports (spdx-tools, cyclonedx) out of the timing
        render(synthetic(10, 3), fmt)
    print("| review files | floor s | " + " | ".join(FORMATS) + " |")
    print("|---:|---:|" + "---|" * len(FORMATS))
    for n in (int(x) for x in a.sizes.split(",")):
        m = synthetic(n, n)
        started = time.perf_counter()
        json.dumps(m)
        floor = time.perf_counter() - started
        row = [f"{n:,}", f"{floor:.2f}"]
        for fmt in FORMATS:
            started = time.perf_counter()
            render(m, fmt)
            took = time.perf_counter() - started
            row.append(f"{took:.2f} ({took / floor:.1f}x)")
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()

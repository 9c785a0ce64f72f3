"""Triage benchmark for ``make bench``: a 1,000-file review set against the same detector on the whole drop.

The trust-upstream method exists to shrink what licence scanning must read; this measures by how much.
Writes ``<out>/triage.json`` and ``<out>/triage.md``. Medians of ``--runs`` runs, in one process, with
ScanCode's index loaded once beforehand (its start-up is reported on its own).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from dropscan.archive.binding import entry_filetype, open_reader, raw_name
from dropscan.audit.findings import triage_file
from dropscan.audit.licenses import Detector, TagDetector, detector

from hash_bench import timed

SEED_ORDER = "sha256"  # the filler files are taken in digest order: the same set every run


def read_drop(drop: Path) -> dict[str, bytes]:
    """Every regular file of the drop (top level only: the acceptance drops have no nested archives)."""
    out: dict[str, bytes] = {}
    with drop.open("rb") as stream:
        reader, entry = open_reader(stream, seekable=True)
        with reader:
            while entry is not None:
                if entry_filetype(entry) & 0o170000 == 0o100000:
                    name = raw_name(entry).decode()
                    out[name] = b"".join(iter(reader.read, b""))
                entry = reader.next_entry()
    return out


def review_set(files: Mapping[str, bytes], expected: Path | None, size: int) -> list[str]:
    """The drop's real review set (from the case's expected.json), filled up to ``size`` with other files."""
    chosen: list[str] = []
    if expected and expected.is_file():
        truth = json.loads(expected.read_text())["files"]
        chosen = sorted(p for p, v in truth.items() if v["class"] in ("modified", "added") and p in files)
    rest = sorted(
        (p for p in files if p not in set(chosen)), key=lambda p: hashlib.sha256(p.encode()).digest()
    )
    return (chosen + rest)[:size]


def _kind(data: bytes) -> str:
    from dropscan.archive.digest import sniff_kind

    return sniff_kind(data[:8192], "").value


def triage_all(paths: list[str], files: Mapping[str, bytes], det: Detector) -> int:
    flags = 0
    for p in paths:
        entry = {"path": p, "class": "added", "kind": _kind(files[p]), "component": ""}
        flags += len(
            triage_file(
                entry, files[p], detector=det, component_license="GPL-2.0-only", declared_arch=None
            ).flags
        )
    return flags


def run(drop: Path, expected: Path | None, size: int, runs: int) -> dict[str, Any]:
    files = read_drop(drop)
    review = review_set(files, expected, size)
    everything = sorted(files)
    t = time.perf_counter()
    det = detector("auto")
    startup = time.perf_counter() - t
    results: dict[str, Any] = {
        "drop": drop.name,
        "detector": det.name,
        "detector_startup_s": round(startup, 2),
        "drop_files": len(everything),
        "review_files": len(review),
        "runs": runs,
        "rows": [],
    }
    detectors: list[tuple[str, Detector]] = [("spdx tags only", TagDetector())]
    if det.name != "spdx-tags":
        detectors.insert(0, ("scancode (exact)", det))
    for name, d in detectors:
        review_s = timed(partial(triage_all, review, files, d), runs)
        whole_s = timed(partial(triage_all, everything, files, d), max(1, runs // 2))
        results["rows"].append(
            {
                "detector": name,
                "review_s": round(review_s, 2),
                "review_ms_per_file": round(1000 * review_s / len(review), 2),
                "whole_drop_s": round(whole_s, 2),
                "whole_drop_ms_per_file": round(1000 * whole_s / len(everything), 2),
                "reduction": round(whole_s / review_s, 2) if review_s else None,
            }
        )
    return results


def write(results: Mapping[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "triage.json").write_text(json.dumps(results, indent=1))
    lines = [
        f"# triage bench ({results['drop']}, median of {results['runs']} runs)",
        "",
        f"Detector {results['detector']}, start-up {results['detector_startup_s']} s (once per process).",
        f"Review set {results['review_files']:,} files; whole drop {results['drop_files']:,} files.",
        "",
        "| detector | review set s | ms/file | whole drop s | ms/file | whole/review |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['detector']} | {r['review_s']} | {r['review_ms_per_file']} | {r['whole_drop_s']} "
            f"| {r['whole_drop_ms_per_file']} | {r['reduction']}x |"
        )
    (out / "triage.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drop", type=Path, required=True)
    ap.add_argument("--expected", type=Path, help="the case's expected.json (its review set is used first)")
    ap.add_argument("--review", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    a = ap.parse_args(argv)
    write(run(a.drop, a.expected, a.review, a.runs), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What checking its firmware image adds to the kernel drop's end to end (issue 35: at most 30 s):
``dropscan scan`` of the kernel drop without and with ``--firmware router.bin``, alternately.

    python bench/firmware_kernel.py --upstream .cache/cases/linux_6.1.176.orig.tar.xz \
        --drop .cache/bench/linux/acme-linux-6.1.176-gpl.tar.gz --image .cache/firmware/images/router.bin \
        --runs 2 [--data .cache/bench/firmware-kernel/data] [--out bench-out/firmware-kernel]

linux 6.1.176 is ingested once into ``--data`` (skipped when it is there already); each scan then runs
in a fresh data folder of its own that links that database and its contents, so neither side pays the
ingest and neither finds the other's finished scan. Per side, medians of ``--runs``: the command's wall
time (the embedded stack's start, the database's load and saving the manifest and reports included)
and its peak RSS (``/usr/bin/time -v``: the largest process of the run, the CLI and the functions it runs
in-process); for the image, its section's own ``seconds`` and what it found. The last manifest with the
image is kept in ``--data``'s parent as ``manifest.json`` (the firmware part left out), for profiling
``firmware_section`` on the same drop.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[1] / "shared"
# what a data folder's database is (dropscan.local.embedded: DB_FILE, CONTENT_FOLDER)
LINKED = ("upstream-db.jsonl.gz", "content")
MAXRSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


def dropscan(*args: str) -> list[str]:
    return [sys.executable, "-m", "dropscan.cli", *args]


def ingest_once(archive: Path, package: str, version: str, data: Path) -> float | None:
    """Ingest the release into ``data`` unless its database is there; the seconds it took, or None."""
    if (data / LINKED[0]).is_file():
        return None
    started = time.perf_counter()
    subprocess.run(
        dropscan("ingest", str(archive), "--package", package, "--version", version, "--data-dir", str(data),
                 "-q"),
        check=True, env={**os.environ, "PYTHONPATH": str(SHARED)},
    )  # fmt: skip
    return time.perf_counter() - started


def scan_run(drop: Path, upstream: str, data: Path, image: Path | None, log: Path) -> dict[str, Any]:
    """One ``dropscan scan`` in a fresh data folder linking ``data``'s database: seconds, peak RSS (KiB)
    and the manifest; the functions' log is copied to ``log``."""
    with tempfile.TemporaryDirectory(prefix="fwkernel-") as tmp:
        run = Path(tmp) / "data"
        run.mkdir()
        for name in LINKED:
            if (data / name).exists():
                (run / name).symlink_to((data / name).resolve())
        out = Path(tmp) / "out" / "manifest.json"
        args = ["scan", str(drop), "--upstream", upstream, "--data-dir", str(run), "--manifest-out", str(out)]
        args += ["--firmware", str(image)] if image is not None else []
        rusage = Path(tmp) / "time.txt"
        began = time.time()
        started = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-v", "-o", str(rusage), *dropscan(*args, "-q")],
            env={**os.environ, "PYTHONPATH": str(SHARED)}, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        if not out.is_file():
            raise SystemExit(f"no manifest from {' '.join(args)} (exit {done.returncode})")
        log.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run / "logs" / "functions.log", log)
        found = MAXRSS.search(rusage.read_text())
        manifest: dict[str, Any] = json.loads(out.read_text())
        # the drop's own scan (upload to its first manifest: the same work on both sides, and most of the
        # load's noise) and what came after it: notify and saving without the image; with it, the
        # revision too. The difference of the tails is what the image adds, the scan's noise left out.
        finished = _stamp(manifest["finished_at"])
        return {
            "seconds": seconds,
            "drop_scan_s": finished - _stamp(manifest["created_at"]),
            "after_manifest_s": began + seconds - finished,
            "maxrss_kib": int(found.group(1)) if found else None,
            "manifest": manifest,
        }


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def image_facts(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the image's section says: verdict, the kernel's check, statuses, its seconds."""
    section = (manifest.get("firmware") or {}).get("images", [{}])[0]
    kernel = section.get("kernel") or {}
    return {
        "verdict": section.get("verdict"),
        "stopped": section.get("stopped"),
        "seconds": section.get("seconds") or {},
        "summary": section.get("summary"),
        "kernel": {k: v for k, v in kernel.items() if k != "option_differences"},
        "option_differences": len(kernel.get("option_differences") or {}),
        "by": _count(b["evidence"]["by"] for b in section.get("binaries") or []),
        "components": [
            {k: c[k] for k in ("prefix", "binaries", "counts")} for c in section.get("components") or []
        ],
        "revision": manifest.get("revision"),
    }


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in values:
        counts[str(v)] = counts.get(str(v), 0) + 1
    return counts


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", type=Path, required=True, help="linux_6.1.176.orig.tar.xz")
    p.add_argument("--package", default="linux")
    p.add_argument("--version", default="6.1.176")
    p.add_argument("--drop", type=Path, required=True)
    p.add_argument("--image", type=Path, required=True)
    p.add_argument("--data", type=Path, default=Path(".cache/bench/firmware-kernel/data"))
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench-out/firmware-kernel"))
    a = p.parse_args()
    upstream = f"{a.package}@{a.version}={a.upstream.resolve()}"
    ingest_s = ingest_once(a.upstream, a.package, a.version, a.data)
    runs: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    last: dict[str, Any] = {}
    for i in range(a.runs):
        # alternated, each side first in every other run: the machine's load drifts
        for side in ("without", "with") if i % 2 == 0 else ("with", "without"):
            log = a.out / "logs" / f"run{i + 1}-{side}.log"
            r = scan_run(a.drop, upstream, a.data, a.image if side == "with" else None, log)
            manifest = r.pop("manifest")
            if side == "with":
                r["image"] = image_facts(manifest)
                last = manifest
            r["status"], r["files"] = manifest.get("status"), len(manifest.get("files") or [])
            runs[side].append(r)
            print(
                f"run {i + 1} {side}: {r['seconds']:.1f} s, {(r['maxrss_kib'] or 0) / 1024:.0f} MiB",
                flush=True,
            )
    if last:
        kept = {k: v for k, v in last.items() if k != "firmware"}
        (a.data.parent / "manifest.json").write_text(json.dumps(kept))
    wall = {side: median([r["seconds"] for r in rs]) for side, rs in runs.items()}
    parts = [r["image"]["seconds"] for r in runs["with"]]
    result = {
        "drop": a.drop.name,
        "image": a.image.name,
        "runs": a.runs,
        "ingest_s": round(ingest_s, 1) if ingest_s is not None else None,
        "scan_s": wall,
        "added_s": round(wall["with"] - wall["without"], 2),
        "drop_scan_s": {side: median([r["drop_scan_s"] for r in rs]) for side, rs in runs.items()},
        "after_manifest_s": {side: median([r["after_manifest_s"] for r in rs]) for side, rs in runs.items()},
        "firmware_stage_s": {k: median([s.get(k, 0.0) for s in parts]) for k in parts[0]},
        "firmware_stage_total_s": median([sum(s.values()) for s in parts]),
        "maxrss_mib": {
            side: round(max(r["maxrss_kib"] or 0 for r in rs) / 1024) for side, rs in runs.items()
        },
        "image_facts": runs["with"][-1]["image"],
        "all": runs,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "firmware_kernel.json").write_text(json.dumps(result, indent=1))
    tail = result["after_manifest_s"]
    result["added_after_manifest_s"] = round(tail["with"] - tail["without"], 2)
    print(
        f"kernel drop end to end: {wall['without']:.1f} s without the image, {wall['with']:.1f} s with it"
        f" (+{result['added_s']:.1f} s; after the drop's manifest +{result['added_after_manifest_s']:.1f} s;"
        f" the firmware stage {result['firmware_stage_total_s']:.1f} s);"
        f" peak RSS {result['maxrss_mib']['without']} / {result['maxrss_mib']['with']} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

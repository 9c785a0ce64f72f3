"""`dropscan ingest-git` of a real repository on a fresh embedded stack, against the floor of reading
every object once with git, measured in the same run (the median of three readings); then the same
again with nothing new; then, optionally, a drop scanned against that database alone.

    python bench/git_ingest.py REPO --package NAME [--drop DROP --expected expected.json] [--out DIR]

Each step runs as a child process: wall time and its peak RSS (wait4). The ingest's own report gives
blobs, items written, DynamoDB calls and its phases' seconds (the rest of the wall time is the embedded
stack starting, loading and saving its database).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def _run(argv: list[str], stdout: Any = subprocess.PIPE) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB, stdout) of a child."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            argv, stdout=out if stdout is subprocess.PIPE else stdout, stderr=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        if status != 0:
            raise RuntimeError(f"{argv[:3]} exited with {status}")
        out.seek(0)
        text = out.read().decode() if stdout is subprocess.PIPE else ""
    return seconds, usage.ru_maxrss / 1024, text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("repo")
    ap.add_argument("--package", required=True)
    ap.add_argument("--drop")
    ap.add_argument("--expected")
    ap.add_argument("--out", default="bench-out/git")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"repo": a.repo}
    # the floor's own spread on these shared machines is 10-20 %: the median of three readings
    with open(os.devnull, "wb") as null:
        floors = [
            _run(["git", "--git-dir", a.repo, "cat-file", "--batch-all-objects", "--batch"], stdout=null)[0]
            for _ in range(3)
        ]
    floor = statistics.median(floors)
    results["floor_cat_file_seconds"] = round(floor, 1)
    results["floor_readings"] = [round(f, 2) for f in floors]
    print(json.dumps(results), flush=True)
    with tempfile.TemporaryDirectory() as data:
        ingest = [str(BIN / "dropscan"), "ingest-git", a.repo, "--package", a.package, "--history", "--quiet"]
        ingest += ["--data-dir", data]
        for name in ("first", "again"):
            seconds, rss, text = _run(ingest)
            report = json.loads(text)
            results[name] = {
                "wall_seconds": round(seconds, 1),
                "peak_rss_mib": round(rss),
                "ratio_to_floor": round(seconds / floor, 2),
                "ingest_seconds": report["seconds"],
                "ingest_ratio_to_floor": round(report["seconds"]["total"] / floor, 2),
                "tags": report["tags"]["new"],
                "commits": report["commits"],
                "blobs": report["blobs"],
                "items_written": report["items_written"],
                "evidence": report["evidence"],
                "dynamodb": report["dynamodb"],
            }
            print(json.dumps({name: results[name]}), flush=True)
        if a.drop:
            manifest = out / "manifest.json"
            scan = [
                str(BIN / "dropscan"),
                "scan",
                a.drop,
                "--supplier",
                "acme",
                "--quiet",
                "--data-dir",
                data,
            ]
            scan += ["--manifest-out", str(manifest), "--eml-dir", str(out / "eml")]
            seconds, rss, _ = _run(scan)
            m = json.loads(manifest.read_text())
            comp = m["components"][0]
            scanned: dict[str, Any] = {
                "wall_seconds": round(seconds, 1),
                "peak_rss_mib": round(rss),
                "identified": f"{comp['package']} {comp['version']}",
                "nearest": comp.get("nearest"),
                "runner_up": comp.get("runner_up"),
                "releases_in_range": comp.get("releases_in_range"),
                "classes": comp["classes"],
                "missing": comp["missing"],
            }
            if a.expected:
                want = {p: v["class"] for p, v in json.loads(Path(a.expected).read_text())["files"].items()}
                got = {f["path"]: f for f in m["files"]}
                scanned["differ_from_expected"] = {
                    p: {"expected": c, "got": got[p]["class"] if p in got else None,
                        "upstream": got[p].get("upstream") if p in got else None}
                    for p, c in want.items() if p not in got or got[p]["class"] != c
                }  # fmt: skip
            results["scan"] = scanned
            print(json.dumps({"scan": scanned}), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What recording a release's literals adds to its ingest: ``dropscan ingest`` of BusyBox 1.35.0 with
literals (the default) and without (``INGEST_LITERALS=0``), alternately, into a fresh embedded stack
each run.

    python bench/ingest_literals.py --archive .cache/cases/busybox_1.35.0.orig.tar.bz2 --runs 3 \
        [--out bench-out/ingest-literals]

Two figures per side, medians of ``--runs``: the wall time of the command (the embedded stack's start
included), and the ingest function's own seconds as its report states them (the walk and merge, the
licence and content pass, which also reads the literals, and the recording of them). The bound of
issue 35: literals add at most 30 %.
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

SHARED = Path(__file__).resolve().parents[1] / "shared"


def command_run(archive: Path, literals: bool) -> float:
    """Seconds of one ``dropscan ingest`` into a fresh data folder."""
    env = {**os.environ, "INGEST_LITERALS": "1" if literals else "0", "PYTHONPATH": str(SHARED)}
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as data:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "dropscan.cli", "ingest", str(archive), "--data-dir", data, "-q"],
            check=True, env=env, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        return time.perf_counter() - started


def stage_run(archive: Path, literals: bool, package: str, version: str) -> dict[str, Any]:
    """The ingest function's report (its seconds, what it recorded) of one ingest in a fresh stack."""
    os.environ["INGEST_LITERALS"] = "1" if literals else "0"
    from dropscan.local.embedded import embedded

    with embedded() as es:
        es.client.ingest(archive, package, version)
        body = es.client.s3.get_object(
            Bucket=es.names.upstream_bucket, Key=f"releases/{package}/{version}.ingest.json"
        )["Body"].read()
    report: dict[str, Any] = json.loads(body)
    return report


def reading_s(archive: Path, runs: int) -> float:
    """Median seconds to take the literals out of the release's C sources, the bytes already in memory
    (what the ingest's licence-and-content pass adds for them)."""
    import tarfile

    from dropscan.firmware.literals import code_literals, is_source, release_literals

    with tarfile.open(archive) as tar:
        texts = [tar.extractfile(m).read() for m in tar if m.isfile() and is_source(m.name)]  # type: ignore[union-attr]
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        found: set[str] = set()
        for data in texts:
            found.update(code_literals(data.decode("utf-8", "replace")))
        release_literals(found)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", type=Path, required=True)
    p.add_argument("--package", default="busybox")
    p.add_argument("--version", default="1.35.0")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    wall: dict[bool, list[float]] = {True: [], False: []}
    own: dict[bool, list[float]] = {True: [], False: []}
    parts: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    recorded: dict[str, Any] = {}
    for _ in range(a.runs):
        for literals in (False, True):
            wall[literals].append(command_run(a.archive, literals))
            report = stage_run(a.archive, literals, a.package, a.version)
            own[literals].append(sum(report["seconds"].values()))
            parts[literals].append(report["seconds"])
            if literals:
                recorded = report.get("literals") or {}
    reading = reading_s(a.archive, a.runs)
    med = {k: statistics.median(v) for k, v in wall.items()}
    med_own = {k: statistics.median(v) for k, v in own.items()}
    result = {
        "archive": a.archive.name,
        "runs": a.runs,
        "command_s": {"without": round(med[False], 2), "with": round(med[True], 2)},
        "command_added": round(med[True] / med[False] - 1, 3),
        "ingest_function_s": {"without": round(med_own[False], 2), "with": round(med_own[True], 2)},
        "ingest_function_added": round(med_own[True] / med_own[False] - 1, 3),
        "parts_added": round(
            sum(statistics.median(r.get(k, 0.0) for r in parts[True]) for k in parts[True][0])
            / sum(statistics.median(r.get(k, 0.0) for r in parts[False]) for k in parts[False][0])
            - 1,
            3,
        ),
        "reading_s": round(reading, 3),
        # the work literals add (reading them, recording them) against the ingest without them: steadier
        # than the ratio of the totals, which the machine's load moves by more than the step costs
        "step_added": round(
            (reading + statistics.median(r.get("literals", 0.0) for r in parts[True])) / med_own[False], 3
        ),
        "literals_step_s": round(statistics.median(s.get("literals", 0.0) for s in parts[True]), 3),
        "parts_s": {
            ("with" if side else "without"): {
                k: round(statistics.median(run.get(k, 0.0) for run in runs), 3) for k in runs[0]
            }
            for side, runs in parts.items()
        },
        "recorded": recorded,
        "all": {
            "command": {("with" if k else "without"): v for k, v in wall.items()},
            "function": {("with" if k else "without"): v for k, v in own.items()},
        },
    }
    print(json.dumps(result, indent=1))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "ingest_literals.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A drop nothing upstream explains: every file ``added``, the whole drop the review set (issue 22).

For each size N, two drops are built: N copies of one short C file, and N distinct small C files. Each is
scanned on the embedded stack with an empty database (``dropscan scan DROP --supplier acme -q``, one
process: wall time, peak RSS, and the manifest's own ``stats.seconds`` per stage), then every report is
rendered again from its manifest by ``dropscan report`` (one process per format: time and peak RSS).

The floor, measured in the same run, is ``json.loads`` + ``json.dumps`` of the manifest in a process of its
own: a report must at least read the manifest and write something of every review file.

    python bench/review_scale.py [--sizes 20000,40000,80000,160000] [--runs 1] [--out bench-out/scale]

Writes ``<out>/results.json`` and ``<out>/results.md``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
FORMATS = ("text", "html", "spdx", "cyclonedx")

SHORT_C = b"""/* A helper the supplier wrote. */
#include <stdio.h>

int helper(int x)
{
\treturn x * 2 + 1;
}
"""


def distinct_c(i: int) -> bytes:
    """A small C file of its own: a licence tag on a third of them, as a real tree would have."""
    tag = b"// SPDX-License-Identifier: GPL-2.0-only\n" if i % 3 == 0 else b""
    return tag + f"/* unit {i} */\nint unit_{i}(int x)\n{{\n\treturn x + {i};\n}}\n".encode()


def build_drop(path: Path, n: int, *, distinct: bool) -> Path:
    """``n`` files under 400 folders of ``acme-bsp/``, as a .tar.gz."""
    with tarfile.open(path, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tf:
        for i in range(n):
            data = distinct_c(i) if distinct else SHORT_C
            info = tarfile.TarInfo(f"acme-bsp/drivers/d{i % 400:03d}/f{i:06d}.c")
            info.size, info.mtime, info.mode = len(data), 1_600_000_000, 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


def measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(wall s, peak RSS MB of the process and its children, exit status) of one command (GNU time)."""
    started = time.perf_counter()
    res = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *cmd],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - started
    rss_kb = int(res.stderr.strip().splitlines()[-1])
    return wall, rss_kb / 1024, res.returncode


def scan(drop: Path, work: Path) -> dict[str, Any]:
    manifest = work / (drop.stem + ".manifest.json")
    env = dict(os.environ, XDG_DATA_HOME=str(work / "data"))  # an empty database of its own
    wall, rss, status = measured(
        [
            str(BIN / "dropscan"),
            "scan",
            str(drop),
            "--supplier",
            "acme",
            "-q",
            "--manifest-out",
            str(manifest),
        ],
        env,
    )
    out: dict[str, Any] = {"wall": round(wall, 2), "rss_mb": round(rss), "exit": status}
    if manifest.exists():
        m = json.loads(manifest.read_text())
        out |= {
            "status": m["status"],
            "review": m["summary"]["review"],
            "stages": m["stats"]["seconds"],
            "triage": {k: m["triage"].get(k) for k in ("files", "distinct", "limited", "parts", "seconds")},
            "manifest": str(manifest),
            "manifest_mb": round(manifest.stat().st_size / 1e6, 1),
        }
    return out


RENDER = """
import json, sys, time
from dropscan.reports import render
manifest = json.load(open(sys.argv[1]))
render({**manifest, "files": manifest["files"][:10]}, sys.argv[2])  # imports out of the timing
started = time.perf_counter()
text = render(manifest, sys.argv[2])
print(time.perf_counter() - started, len(text.encode()))
"""


def render_once(manifest: str, fmt: str) -> tuple[float, float, int]:
    """(render s, peak RSS MB of the process, bytes written) of one format, in a process of its own."""
    res = subprocess.run(
        ["/usr/bin/time", "-f", "%M", sys.executable, "-c", RENDER, manifest, fmt],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, size = res.stdout.split()
    return float(seconds), int(res.stderr.strip().splitlines()[-1]) / 1024, int(size)


def reports(manifest: str, runs: int) -> dict[str, Any]:
    """Each format rendered from the manifest (as the triage stage renders it), and ``dropscan report``
    (which also checks the manifest against its JSON Schema first)."""
    floor_code = "import json,sys; json.dumps(json.load(open(sys.argv[1])))"
    floor = [measured([sys.executable, "-c", floor_code, manifest]) for _ in range(runs)]
    out: dict[str, Any] = {"floor": {"s": round(statistics.median(w for w, _, _ in floor), 2)}}
    for fmt in FORMATS:
        done = [render_once(manifest, fmt) for _ in range(runs)]
        wall = statistics.median(s for s, _, _ in done)
        cmd = [str(BIN / "dropscan"), "report", manifest, "--format", fmt, "--out", os.devnull]
        cli = statistics.median(measured(cmd)[0] for _ in range(runs))
        out[fmt] = {
            "s": round(wall, 2),
            "x_floor": round(wall / out["floor"]["s"], 1),
            "rss_mb": round(max(r for _, r, _ in done)),
            "mb": round(done[0][2] / 1e6, 1),
            "cli_s": round(cli, 2),
        }
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| drop | files | status | wall s | peak RSS MB | unpack | lookup | finalize | triage | reports "
        "| distinct triaged |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        s, st = r["scan"], r["scan"].get("stages", {})
        cells = [r["kind"], f"{r['files']:,}", s.get("status", "no manifest"), s["wall"], s["rss_mb"]]
        cells += [st.get(k, "") for k in ("unpack", "lookup", "finalize", "triage", "reports")]
        cells.append(s.get("triage", {}).get("distinct", ""))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += [
        "",
        "Each format rendered from the manifest in a process of its own: seconds (times the floor), peak "
        "RSS MB, output MB; then `dropscan report`, which also checks the manifest against its schema.",
        "",
        "| drop | files | floor s | " + " | ".join(FORMATS) + " |",
        "|---|---:|---:|" + "---|" * len(FORMATS),
    ]
    for r in results:
        rep = r.get("reports") or {}
        cells = [
            f"{rep[f]['s']} s ({rep[f]['x_floor']}x), {rep[f]['rss_mb']} MB, {rep[f]['mb']} MB; "
            f"CLI {rep[f]['cli_s']} s"
            if f in rep
            else ""
            for f in FORMATS
        ]
        lines.append(
            f"| {r['kind']} | {r['files']:,} | {rep.get('floor', {}).get('s', '')} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,40000,80000,160000")
    ap.add_argument("--kinds", default="identical,distinct")
    ap.add_argument("--runs", type=int, default=1, help="runs of each report (median)")
    ap.add_argument("--out", type=Path, default=Path("bench-out/scale"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dropscan-scale-") as tmp:
        work = Path(tmp)
        for n in (int(x) for x in a.sizes.split(",")):
            for kind in a.kinds.split(","):
                drop = build_drop(work / f"acme-{kind}-{n}.tar.gz", n, distinct=kind == "distinct")
                r: dict[str, Any] = {"kind": kind, "files": n, "scan": scan(drop, work)}
                if r["scan"].get("manifest"):
                    r["reports"] = reports(r["scan"]["manifest"], a.runs)
                    Path(r["scan"].pop("manifest")).unlink()
                print(json.dumps(r), flush=True)
                results.append(r)
                drop.unlink()
    (a.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (a.out / "results.md").write_text(table(results))
    print(table(results))


if __name__ == "__main__":
    main()

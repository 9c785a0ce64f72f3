"""Benchmarks for ``make bench``: dropscan against floors measured in the same run, medians of runs.

Never part of ``make test``: these machines are shared and noisy, so only ratios taken in one run mean
anything. Writes ``<out>/results.json``, ``<out>/results.md`` and, with matplotlib, ``<out>/hash.png``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def timed(fn: Callable[[], object], runs: int) -> float:
    """Median wall time of ``runs`` calls."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def paired(floor: Callable[[], object], ours: Callable[[], object], runs: int) -> tuple[float, float, float]:
    """(median floor s, median ours s, median of the per-run ratios), the two alternating run by run.

    A shared machine's load drifts over minutes: timing all floors and then all of ours can put the
    two in different weather; a ratio taken within each run compares like with like.
    """
    floors, ourses = [], []
    for _ in range(runs):
        floors.append(timed(floor, 1))
        ourses.append(timed(ours, 1))
    ratio = statistics.median(o / f for o, f in zip(ourses, floors, strict=True))
    return statistics.median(floors), statistics.median(ourses), ratio


def sh(cmd: str) -> Callable[[], object]:
    return lambda: subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)


def peak_rss_mb(cmd: list[str]) -> float:
    """Peak RSS of one command, as GNU time reports it (rusage of children keeps the maximum of all)."""
    res = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], check=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
    return int(res.stderr.strip().splitlines()[-1]) / 1024


def formats_of(source: Path, work: Path) -> dict[str, Path]:
    """The same tree as .tar, .tar.gz, .tar.xz and .zip."""
    tar = work / "tree.tar"
    if source.suffix == ".xz":
        with lzma.open(source) as src, tar.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    else:
        subprocess.run(f"bzip2 -dc '{source}' > '{tar}'", shell=True, check=True)
    out = {"tar": tar, "tar.xz": source if source.suffix == ".xz" else work / "tree.tar.xz"}
    if not out["tar.xz"].exists():
        subprocess.run(f"xz -T2 -6 -c '{tar}' > '{out['tar.xz']}'", shell=True, check=True)
    out["tar.gz"] = work / "tree.tar.gz"
    with tar.open("rb") as src, gzip.open(out["tar.gz"], "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    out["zip"] = work / "tree.zip"
    with tarfile.open(tar) as tf, zipfile.ZipFile(out["zip"], "w", zipfile.ZIP_DEFLATED) as zf:
        for m in tf:
            f = tf.extractfile(m) if m.isfile() else None
            if f is not None:
                zf.writestr(m.name, f.read())
    return out


# a plain tar's floor is one SHA-256 of its bytes (OpenSSL through hashlib, as dropscan's own), not cat:
# the page cache serves 1.3 GB in 0.2 s, which no hashing tool can approach
_SHA256_FILE = (
    f"'{sys.executable}' -c 'import hashlib, sys; hashlib.file_digest(open(sys.argv[1], \"rb\"), \"sha256\")'"
)
FLOORS = {
    "tar": _SHA256_FILE + " '{f}'",
    "tar.gz": "gzip -dc '{f}'",
    "tar.xz": "xz -dc '{f}'",
    "zip": "unzip -p '{f}'",
}


def bench_hash(files: dict[str, Path], runs: int) -> list[dict[str, Any]]:
    rows = []
    for fmt, path in files.items():
        floor, ours, ratio = paired(
            sh(FLOORS[fmt].format(f=path) + " > /dev/null"),
            sh(f"'{BIN / 'dropscan'}' hash '{path}' > /dev/null"),
            runs,
        )
        rss = peak_rss_mb([str(BIN / "dropscan"), "hash", str(path), "--out", os.devnull])
        size = path.stat().st_size
        rows.append(
            {
                "format": fmt,
                "bytes": size,
                "floor_s": round(floor, 3),
                "dropscan_s": round(ours, 3),
                "ratio": round(ratio, 3),
                "MB_per_s": round(size / ours / 1e6, 1),
                "peak_rss_MB": round(rss, 1),
            }
        )
    return rows


def bench_peers(tar: Path, work: Path, runs: int) -> dict[str, Any]:
    tree = work / "tree"
    tree.mkdir(exist_ok=True)
    subprocess.run(["tar", "-xf", str(tar), "-C", str(tree)], check=True)
    out: dict[str, Any] = {}
    hash_tar = sh(f"'{BIN / 'dropscan'}' hash '{tar}' > /dev/null")
    sums, ours, ratio = paired(
        sh(f"cd '{tree}' && find . -type f -print0 | xargs -0 sha256sum > /dev/null"), hash_tar, runs
    )
    out["sha256sum_tree_s"], out["dropscan_tar_s"] = round(sums, 3), round(ours, 3)
    out["dropscan_vs_sha256sum"] = round(ratio, 3)
    if shutil.which("hashdeep"):
        known = work / "known.txt"
        subprocess.run(f"cd '{tree}' && hashdeep -c sha256 -r -l . > '{known}'", shell=True, check=True)
        audit, _, ratio = paired(
            sh(f"cd '{tree}' && hashdeep -c sha256 -r -l -a -k '{known}' . || true"), hash_tar, runs
        )
        out["hashdeep_audit_s"] = round(audit, 3)
        out["dropscan_vs_hashdeep_audit"] = round(ratio, 3)
    else:
        out["hashdeep_audit_s"] = None  # apt-get install hashdeep
    return out


def bench_flow(upstream: tuple[str, str, Path], drop: Path, lookup_keys: int) -> dict[str, Any]:
    """Ingest and scan on the embedded stack; DynamoDB calls per 1,000 files; lookups per second."""
    from dropscan.keys import release_report_key
    from dropscan.local.embedded import embedded
    from dropscan.store.batch import BatchTable
    from dropscan.store.upstream_items import LOOKUP_PROJECTION

    pkg, ver, archive = upstream
    with open(os.devnull, "w") as log, embedded(log_stream=log) as es:
        t = time.perf_counter()
        es.client.ingest(archive, pkg, ver)
        ingest_s = time.perf_counter() - t
        key = release_report_key(pkg, ver)
        report = json.loads(es.client.s3.get_object(Bucket=es.names.upstream_bucket, Key=key)["Body"].read())
        t = time.perf_counter()
        _, scan_id = es.client.upload_drop(drop, "bench")
        manifest = es.client.wait_manifest("bench", scan_id, timeout=3600)
        scan_s = time.perf_counter() - t
        assert manifest is not None
        dyn = manifest["stats"]["dynamodb"]
        table = BatchTable(es.session.client("dynamodb"), es.names.upstream_table)
        # digests the table holds (what a scan asks for), and as many it does not
        present = sorted({f["sha256"] for f in manifest["files"] if f["class"] == "identical"})
        keys = [{"pk": {"S": d}} for d in present[:lookup_keys]]
        t = time.perf_counter()
        table.get_many(keys, projection=LOOKUP_PROJECTION)  # as a scan's lookups ask
        lookups_per_s = len(keys) / (time.perf_counter() - t)
        absent = [{"pk": {"S": f"{i:064x}"}} for i in range(len(keys))]
        t = time.perf_counter()
        table.get_many(absent, projection=LOOKUP_PROJECTION)
        absent_per_s = len(absent) / (time.perf_counter() - t)
    files = report["files"]
    calls = report["dynamodb"]["batch_get_calls"] + report["dynamodb"]["batch_write_calls"]
    scanned = max(1, manifest["summary"]["files"])
    total = ingest_s + scan_s
    stages = {f"ingest {k}": v for k, v in report["seconds"].items()}
    stages |= {f"scan {k}": v for k, v in manifest["stats"]["seconds"].items()}
    return {
        "total_s": round(total, 2),
        "share_of_total": {k: round(v / total, 3) for k, v in stages.items()},
        "ingest": {
            "wall_s": round(ingest_s, 2),
            "files_per_s": round(files / ingest_s, 1),
            "dynamodb_calls_per_1000_files": round(1000 * calls / files, 1),
            **report,
        },
        "scan": {
            "files": scanned,
            "wall_s": round(scan_s, 2),
            "batch_get_calls_per_1000_files": round(1000 * dyn["batch_get_calls"] / scanned, 1),
            "stats": manifest["stats"],
        },
        "lookup_keys_per_s_moto": {"present": round(lookups_per_s, 1), "absent": round(absent_per_s, 1)},
    }


def bench_cli(upstream: str, drop: Path, runs: int) -> dict[str, Any]:
    """The whole command a user runs, ``dropscan scan DROP --upstream ...``, on a fresh data dir each run:
    start-up, ingest, scan, triage, reports, saving the database; wall seconds and peak RSS."""
    walls, rss = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as data:
            argv = [
                str(BIN / "dropscan"),
                "scan",
                str(drop),
                "--upstream",
                upstream,
                "-q",
                "--data-dir",
                data,
            ]
            argv += ["--manifest-out", str(Path(data) / "manifest.json")]
            t = time.perf_counter()
            rss.append(peak_rss_mb(argv))
            walls.append(time.perf_counter() - t)
    return {"runs": runs, "wall_s": round(statistics.median(walls), 2), "peak_rss_MB": max(rss)}


def write_report(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    lines = [
        f"# dropscan bench ({results['source']}, median of {results['runs']} runs)",
        "",
        "Each ratio is the median of per-run ratios (floor and dropscan timed one after the other each run).",
        "",
        "| format | MB | floor s | dropscan s | ratio | MB/s | RSS MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["hash"]:
        cells = [r["format"], f"{r['bytes'] / 1e6:.0f}", r["floor_s"], r["dropscan_s"], r["ratio"]]
        cells += [r["MB_per_s"], r["peak_rss_MB"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += ["", "```", json.dumps({k: v for k, v in results.items() if k != "hash"}, indent=1), "```"]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax, stages) = plt.subplots(1, 2, figsize=(10, 3.2), width_ratios=[1, 1.3])
    fmts = [r["format"] for r in results["hash"]]
    ax.bar(fmts, [r["ratio"] for r in results["hash"]], color="#4477aa")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_ylabel("dropscan hash / floor")
    ax.set_title("hash vs decompression (tar: vs SHA-256 of its bytes)", fontsize=9)
    flow = results.get("flow", {})
    seconds = {f"ingest {k}": v for k, v in flow.get("ingest", {}).get("seconds", {}).items()}
    seconds |= {f"scan {k}": v for k, v in flow.get("scan", {}).get("stats", {}).get("seconds", {}).items()}
    stages.barh(list(seconds)[::-1], list(seconds.values())[::-1], color="#cc6677")
    stages.set_xlabel("seconds")
    cli = results.get("cli", {}).get("wall_s")
    title = f"stages on the embedded stack: {flow.get('total_s', 0):.0f} s"
    stages.set_title(title + (f"; the scan command: {cli:.0f} s" if cli else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "hash.png", dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--upstream", required=True, help="PACKAGE@VERSION=ARCHIVE (.tar.xz or .tar.bz2)")
    ap.add_argument("--drop", required=True, help="a drop derived from that upstream")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lookup-keys", type=int, default=20_000)
    ap.add_argument("--cli-runs", type=int, default=1, help="runs of the whole scan command (0: none)")
    ap.add_argument("--out", default="bench-out")
    a = ap.parse_args(argv)
    spec, _, path = a.upstream.partition("=")
    pkg, _, ver = spec.partition("@")
    source = Path(path)
    results: dict[str, Any] = {"source": source.name, "runs": a.runs, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        files = formats_of(source, Path(tmp))
        results["hash"] = bench_hash(files, a.runs)
        results["peers"] = bench_peers(files["tar"], Path(tmp), a.runs)
    results["flow"] = bench_flow((pkg, ver, source), Path(a.drop), a.lookup_keys)
    if a.cli_runs:
        results["cli"] = bench_cli(a.upstream, Path(a.drop), a.cli_runs)
    write_report(results, Path(a.out))
    print((Path(a.out) / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Review evidence on the kernel drop (issue 24): what the evidence step adds to a scan, the manifest's
size with and without it, and the two ways to get the upstream side of ~800 modified files' diffs.

One embedded stack: linux 6.1.176 ingested from its tarball (texts packed, sketches made), then the
drop (bench/linux.json) scanned alternately without the evidence step (triage's ``_evidence_into``
replaced by a no-op: an A/B in one process, never done outside this program) and with it, ``--runs``
times each. Then the upstream contents of the modified files' bases are read both ways, alternately:
ranged GETs into the packs (what the step does) and a second read of the release tarball (the
alternative the issue names). Writes ``<out>/results.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from dropscan.archive.extract import contents_by_digest
from dropscan.audit.manifest import to_json
from dropscan.local.embedded import embedded
from dropscan.stages import triage
from dropscan.store.content import ContentStore

EVIDENCE_KEYS = ("evidence", "similar")


def without_evidence(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as it was before issue 24: no evidence, similar, baseline or counts."""
    out = {k: v for k, v in manifest.items() if k != "evidence"}
    out["files"] = [{k: v for k, v in f.items() if k not in EVIDENCE_KEYS} for f in manifest["files"]]
    out["components"] = [{k: v for k, v in c.items() if k != "baseline"} for c in manifest["components"]]
    out["summary"] = {
        k: v for k, v in manifest["summary"].items() if k not in ("backported", "vendor_changed")
    }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--upstream", type=Path, required=True, help="linux_6.1.176.orig.tar.xz")
    ap.add_argument("--drop", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("bench-out/evidence-kernel"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"runs": a.runs}
    real = triage._evidence_into
    with embedded() as es:
        t = time.perf_counter()
        es.client.ingest(a.upstream, "linux", "6.1.176")
        results["ingest_seconds"] = round(time.perf_counter() - t, 1)
        from dropscan.store.releases import Releases

        report = Releases(es.client.s3, es.names.upstream_bucket).report("linux", "6.1.176") or {}
        results["ingest_report"] = {k: report.get(k) for k in ("files", "seconds", "content")}
        scans: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
        manifest: dict[str, Any] = {}
        for n in range(a.runs):
            for mode in ("without", "with"):
                triage._evidence_into = real if mode == "with" else (lambda *_a, **_k: None)  # type: ignore[assignment]
                t = time.perf_counter()
                _, scan_id = es.client.upload_drop(a.drop, f"acme{n}{mode}")
                manifest = es.client.wait_manifest(f"acme{n}{mode}", scan_id, timeout=3600) or {}
                wall = time.perf_counter() - t
                es.dispatcher.drain(timeout=600)
                scans[mode].append(
                    {
                        "wall": round(wall, 2),
                        "seconds": manifest["stats"]["seconds"],
                        "evidence": manifest["stats"].get("evidence"),
                        "manifest_bytes": len(to_json(manifest)),
                    }
                )
                print(mode, n, json.dumps(scans[mode][-1]), flush=True)
        triage._evidence_into = real
        results["scans"] = scans
        results["median_wall"] = {m: statistics.median(s["wall"] for s in v) for m, v in scans.items()}
        results["median_triage"] = {
            m: statistics.median(s["seconds"]["triage"] for s in v) for m, v in scans.items()
        }
        results["median_evidence_step"] = statistics.median(s["evidence"]["seconds"] for s in scans["with"])
        full = len(to_json(manifest))
        bare = len(to_json(without_evidence(manifest)))
        results["manifest"] = {"with": full, "without": bare, "ratio": round(full / bare, 3)}
        files = manifest["files"]
        modified = [f for f in files if f["class"] == "modified"]
        results["files"] = {
            "modified": len(modified),
            "diffed": sum(1 for f in modified if "patch" in f.get("evidence", {})),
            "backported": manifest["summary"].get("backported"),
            "vendor_changed": manifest["summary"].get("vendor_changed"),
            "without_diff": sum(1 for f in modified if f.get("evidence", {}).get("error")),
            "errors": sorted(
                {f["evidence"]["error"].split(":")[0] for f in modified if f.get("evidence", {}).get("error")}
            ),
            "added": sum(1 for f in files if f["class"] == "added"),
            "similar": sum(1 for f in files if "similar" in f),
            "patch_bytes": sum(len(f.get("evidence", {}).get("patch", "")) for f in modified),
        }
        # the upstream side of the diffs, both ways
        store = ContentStore(es.client.s3, es.names.upstream_bucket)
        where = store.release_index("linux", "6.1.176") or {}
        bases = {f["evidence"]["base"]["sha256"] for f in modified if (f.get("evidence") or {}).get("base")}
        wanted = {sha: where[sha] for sha in bases if sha in where}
        sizes = {sha: len(data) for sha, data in store.blobs(wanted).items()}
        packs, tarball = [], []
        for _ in range(a.runs + 1):
            t = time.perf_counter()
            got = store.blobs(wanted)
            packs.append(time.perf_counter() - t)
            t = time.perf_counter()
            again = contents_by_digest(str(a.upstream), sizes)
            tarball.append(time.perf_counter() - t)
        assert set(got) == set(wanted) <= set(again.content), "both ways must find every base"
        results["upstream_side"] = {
            "bases": len(wanted),
            "packs_median_s": round(statistics.median(packs), 3),
            "tarball_reread_median_s": round(statistics.median(tarball), 3),
            "pack_gets": store.stats.gets,
        }
    (a.out / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps({k: v for k, v in results.items() if k != "scans"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

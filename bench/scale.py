"""The upstream database at scale, synthetic (issue 23): `make bench-scale`, not part of `make test`.

1. Finalize's release identification for one kernel-size component (80,000 files) against 1, 100 and
   1,000 releases of its package (each release 300 files apart from the one before): time and peak
   Python memory (tracemalloc) of `resolve_component` as finalize runs it now (ranked by ranges, three
   path lists read), and of the earlier way (every release in range read and scored) at 1 and 10.
2. 10,000 small packages sharing a licence text, merged into moto: the largest item, the licence's
   items, and what a lookup of it reads.
3. Items written per release: 6 releases of 20,000 files (200 apart), ingested one at a time in version
   order (as archives come: open ranges, and for comparison all closed, as before issue 23's open
   ranges) and at once (as ingest-git merges its tags).
4. Fifty ingests at once (10 packages x 5 releases, 2,000 files each, 500 shared by all): all complete,
   every range right.

    python bench/scale.py [--out bench-out/scale] [--quick] [--only writes_per_release]
"""

from __future__ import annotations

import argparse
import bisect
import functools
import gc
import hashlib
import json
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from dropscan.audit.components import identify, resolve_component
from dropscan.models import FileDigests, PackageInfo, Release, Trust, VersionRange
from dropscan.store.upstream import UpstreamDB
from dropscan.upstream_rules import PACKAGES_PER_ITEM, contributions_of

FILES = 80_000
STEP = 300  # files changed from one release to the next


def _d(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


class Synthetic:
    """A package of R releases; release r changes files [r*STEP, r*STEP+STEP) mod FILES."""

    def __init__(self, releases: int, files: int = FILES, step: int = STEP) -> None:
        self.n, self.files, self.step = releases, files, step
        self.versions = tuple(f"6.1.{r}" for r in range(releases))
        self.changes: dict[int, list[int]] = {}  # file -> releases that changed it
        for r in range(1, releases):
            start = (r * step) % files
            for j in range(step):
                self.changes.setdefault((start + j) % files, []).append(r)

    def gen(self, i: int, r: int) -> tuple[int, int, int]:
        """(the release whose version of file i release r holds, first, last release holding it)."""
        ch = self.changes.get(i, [])  # ascending
        k = bisect.bisect_right(ch, r)
        lo = ch[k - 1] if k else 0
        hi = ch[k] - 1 if k < len(ch) else self.n - 1
        return lo, lo, hi

    def release(self, r: int) -> Release:
        files = {f"linux-6.1.{r}/dir{i % 97}/file{i}.c": _d(i, self.gen(i, r)[0]) for i in range(self.files)}
        return Release("linux", self.versions[r], files)

    def drop(self, r: int, modified: int = 200) -> list[dict[str, Any]]:
        """Release r as finalize holds it after the lookups, ``modified`` files changed."""
        out = []
        for i in range(self.files):
            path = f"acme-linux/dir{i % 97}/file{i}.c"
            if i < modified:
                out.append({"path": path, "size": 100, "sha256": _d("changed", i), "class": None})
                continue
            g, lo, hi = self.gen(i, r)
            ref = {"package": "linux", "versions": [self.versions[lo], self.versions[hi]]}
            out.append(
                {"path": path, "size": 100, "sha256": _d(i, g), "class": "identical", "upstream": [ref]}
            )
        return out


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    gc.collect()
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def _peak_mib(fn: Callable[[], Any]) -> float:
    """Peak Python memory of ``fn`` (tracemalloc: run apart from the timing, which it slows)."""
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return peak


def finalize_at(releases: int, runs: int, earlier_too: bool) -> dict[str, Any]:
    syn = Synthetic(releases)
    target = releases // 2
    packages = {"linux": PackageInfo("linux", Trust.HIGH, syn.versions)}
    out: dict[str, Any] = {"releases": releases}
    times, loads = [], []
    for _ in range(runs):
        files = syn.drop(target)
        loaded: list[float] = []

        def load(package: str, version: str, loaded: list[float] = loaded) -> Release:
            # the synthetic path list is made here: its making is not finalize's (S3 + gunzip are)
            started = time.perf_counter()
            rel = syn.release(syn.versions.index(version))
            loaded.append(time.perf_counter() - started)
            return rel

        entry, seconds = _timed(functools.partial(resolve_component, "acme-linux/", files, packages, load))
        times.append(seconds - sum(loaded))
        loads.append(len(loaded))
    assert entry["version"] == syn.versions[target], entry["version"]
    files = syn.drop(target)
    peak = _peak_mib(
        lambda: resolve_component(
            "acme-linux/", files, packages, lambda p, v: syn.release(syn.versions.index(v))
        )
    )
    out["now"] = {
        "seconds_median": round(statistics.median(times), 2),
        "runs": runs,
        "peak_mib": round(peak, 1),
        "path_lists_read": loads[0],
        "nearest": entry["nearest"],
        "runner_up": entry["runner_up"],
    }
    if earlier_too:
        files = syn.drop(target)
        every = [syn.release(r) for r in range(releases)]  # what the earlier finalize loaded: all in range
        ident, seconds = _timed(lambda: identify(files, "acme-linux/", every))
        assert ident.release is not None and ident.release.version == syn.versions[target]
        files = syn.drop(target)
        # its path lists were held at once (and made by the load): counted in its peak
        peak = _peak_mib(lambda: identify(files, "acme-linux/", [syn.release(r) for r in range(releases)]))
        out["earlier"] = {
            "seconds": round(seconds, 2),
            "peak_mib": round(peak, 1),
            "path_lists_read": releases,
        }
        del every
    return out


def _table(client: Any) -> None:
    client.create_table(
        TableName="upstream",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def _items(client: Any) -> Iterator[dict[str, Any]]:
    kwargs: dict[str, Any] = {"TableName": "upstream"}
    while True:
        resp = client.scan(**kwargs)
        yield from resp.get("Items", [])
        if "LastEvaluatedKey" not in resp:
            return
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def many_packages(n: int) -> dict[str, Any]:
    licence = _d("GPL-2.0 text")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _table(client)
        db = UpstreamDB(client, "upstream")
        started = time.perf_counter()
        group = 500
        for first in range(0, n, group):
            contributions: dict[str, Any] = {}
            for p in range(first, min(n, first + group)):
                files = [
                    FileDigests(licence, licence, licence),
                    *(FileDigests(_d(p, k), _d(p, k), _d(p, k)) for k in range(2)),
                ]
                contributions_of(
                    files, f"package-{p:05d}", VersionRange("1.0.0", "1.0.0"), into=contributions
                )
            db.merge(contributions)
        merged = time.perf_counter() - started
        sizes = [(len(i["v"]["S"]) + len(i["pk"]["S"]), i["pk"]["S"]) for i in _items(client) if "v" in i]
        mine = [s for s, k in sizes if k.startswith(licence)]
        reader = UpstreamDB(client, "upstream")
        found = reader.lookup([licence])[licence]
        return {
            "packages": n,
            "merge_seconds": round(merged, 1),
            "largest_item_bytes": max(s for s, _ in sizes),
            "licence_items": len(mine),
            "licence_largest_item_bytes": max(mine),
            "packages_per_item": PACKAGES_PER_ITEM,
            "lookup_of_the_licence": {
                "packages": len(found.packages),
                "keys_read": reader.stats.keys_requested,
                "batch_get_calls": reader.stats.batch_get_calls,
            },
        }


def _one_at_a_time(rels: list[Release], *, open_mode: bool) -> dict[str, Any]:
    """Items written by each release ingested alone, in version order, as the ingest stage does it
    (open mode: the path list of the open release gives the digests that left), and seconds each."""
    path_lists = {rel.version: set(rel.files.values()) for rel in rels}
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _table(client)
        db = UpstreamDB(client, "upstream")
        written, read, seconds = [], [], []
        for rel in rels:
            files = [FileDigests(d, d, d) for d in rel.files.values()]
            keys_before = db.stats.keys_requested
            started = time.perf_counter()
            if open_mode:
                written.append(db.add_release("linux", rel.version, files, previous=path_lists.get))
            else:
                written.append(db.add_release("linux", rel.version, files))
            seconds.append(round(time.perf_counter() - started, 2))
            read.append(db.stats.keys_requested - keys_before)
        return {"items_written": written, "keys_read": read, "seconds": seconds}


def writes_per_release(files: int, releases: int, step: int) -> dict[str, Any]:
    syn = Synthetic(releases, files, step)
    rels = [syn.release(r) for r in range(releases)]
    out: dict[str, Any] = {"files": files, "releases": releases, "changed_per_release": step}
    out["one_at_a_time_in_version_order"] = _one_at_a_time(rels, open_mode=True)
    out["one_at_a_time_closed_mode"] = _one_at_a_time(rels, open_mode=False)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _table(client)
        db = UpstreamDB(client, "upstream")
        contributions: dict[str, Any] = {}
        for rel in rels:
            contributions_of(
                [FileDigests(d, d, d) for d in rel.files.values()],
                "linux",
                VersionRange(rel.version, rel.version),
                into=contributions,
            )
        out["at_once_as_ingest_git"] = {
            "items_written": db.merge(contributions),
            "distinct_digests": len(contributions),
        }
    return out


class _AtomicCalls:
    """Each call alone, as DynamoDB makes each call atomic (moto checks a condition without a lock)."""

    def __init__(self, client: Any) -> None:
        self._client, self._lock = client, threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name == "exceptions":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


def concurrent_ingests(packages: int, versions: int, files: int, shared: int) -> dict[str, Any]:
    common = [FileDigests(_d("shared", k), _d("shared", k), _d("shared", k)) for k in range(shared)]
    with mock_aws():
        client = _AtomicCalls(boto3.client("dynamodb", region_name="us-east-1"))
        _table(client)
        barrier = threading.Barrier(packages * versions)
        errors: list[str] = []
        modes: list[str] = []

        def own(p: int, v: int) -> list[FileDigests]:
            return [FileDigests(_d(p, v, k), _d(p, v, k), _d(p, v, k)) for k in range(files - shared)]

        # as the ingest stage does: each release's path list is saved before its digests are written
        lists = {(f"pkg{p}", f"1.{v}"): [f.sha256 for f in common + own(p, v)] for p in range(packages)
                 for v in range(versions)}  # fmt: skip

        def ingest(job: tuple[int, int]) -> float:
            p, v = job
            db = UpstreamDB(client, "upstream", concurrency=1)  # type: ignore[arg-type]
            package = f"pkg{p}"
            barrier.wait()
            started = time.perf_counter()
            try:
                wrote = db.write_release(
                    package, f"1.{v}", common + own(p, v), previous=lambda r: lists.get((package, r))
                )
                db.register(package, f"1.{v}", None)
                modes.append(wrote.mode.value)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
            return time.perf_counter() - started

        jobs = [(p, v) for p in range(packages) for v in range(versions)]
        started = time.perf_counter()
        with ThreadPoolExecutor(len(jobs)) as pool:
            took = list(pool.map(ingest, jobs))
        wall = time.perf_counter() - started
        db = UpstreamDB(client, "upstream")  # type: ignore[arg-type]
        found = db.lookup([f.sha256 for f in common])
        want = {f"pkg{p}": VersionRange("1.0", f"1.{versions - 1}") for p in range(packages)}
        right = sum(info.packages == want for info in found.values())
        return {
            "ingests": len(jobs),
            "completed": len(jobs) - len(errors),
            "errors": errors[:5],
            "wall_seconds": round(wall, 1),
            "slowest_ingest_seconds": round(max(took), 1),
            "shared_digests_with_every_range": f"{right} of {shared}",
            "modes": {m: modes.count(m) for m in sorted(set(modes))},
            "registered": sum(len(p.versions) for p in db.packages().values()),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench-out/scale")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    ap.add_argument("--only", metavar="STEP", help="run only the steps whose name starts with STEP")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    q = a.quick
    results: dict[str, Any] = {}

    def step(name: str, fn: Callable[[], Any]) -> None:
        if a.only and not name.startswith(a.only):
            return
        print(f"{name} ...", file=sys.stderr, flush=True)
        results[name] = fn()
        print(json.dumps({name: results[name]}), flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))

    for r in (1, 100) if q else (1, 100, 1000):
        step(f"finalize_{r}_releases", functools.partial(finalize_at, r, 1 if q else 3, earlier_too=r == 1))
    if not q:
        step("finalize_10_releases_earlier_way", lambda: finalize_at(10, 1, earlier_too=True))
    step("many_packages", lambda: many_packages(1000 if q else 10_000))
    step("writes_per_release", lambda: writes_per_release(2000 if q else 20_000, 6, 200))
    step("fifty_ingests_at_once", lambda: concurrent_ingests(10, 5, 500 if q else 2000, 500))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

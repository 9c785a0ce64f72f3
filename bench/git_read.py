"""Read every object of a git repository once: git cat-file (the floor), pygit2, dulwich.

    python bench/git_read.py REPO [--dulwich-seconds N]

Prints one JSON line per reader: objects, blobs, blob bytes, seconds, peak RSS of this process (MiB).
Each reader runs in a fresh child process so that peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import subprocess
import time
from typing import Any


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cat_file(repo: str, _limit: float) -> dict[str, Any]:
    started = time.perf_counter()
    with open("/dev/null", "wb") as null:
        subprocess.run(
            ["git", "--git-dir", repo, "cat-file", "--batch-all-objects", "--batch"], stdout=null, check=False
        )
    return {
        "reader": "git cat-file --batch-all-objects --batch",
        "seconds": round(time.perf_counter() - started, 2),
    }


def with_pygit2(repo: str, _limit: float) -> dict[str, Any]:
    import pygit2

    started = time.perf_counter()
    r = pygit2.Repository(repo)
    odb = r.odb
    objects = blobs = size = missing = 0
    for oid in odb:
        objects += 1
        try:
            kind, data = odb.read(oid)
        except KeyError:
            missing += 1
            continue
        if kind == pygit2.enums.ObjectType.BLOB:
            blobs += 1
            size += len(data)
    return {
        "reader": f"pygit2 {pygit2.__version__} (libgit2 {pygit2.LIBGIT2_VERSION})",
        "objects": objects,
        "blobs": blobs,
        "blob_bytes": size,
        "missing": missing,
        "seconds": round(time.perf_counter() - started, 2),
        "peak_rss_mib": round(_rss_mib(), 1),
    }


def with_dulwich(repo: str, limit: float) -> dict[str, Any]:
    import dulwich
    from dulwich.repo import Repo

    started = time.perf_counter()
    r = Repo(repo)
    store = r.object_store
    objects = blobs = size = 0
    complete = True
    for sha in store:
        objects += 1
        obj = store[sha]
        if obj.type_name == b"blob":
            blobs += 1
            size += len(obj.as_raw_string())
        if time.perf_counter() - started > limit:
            complete = False
            break
    return {
        "reader": f"dulwich {getattr(dulwich, '__version__', '?')}",
        "objects": objects,
        "blobs": blobs,
        "blob_bytes": size,
        "complete": complete,
        "seconds": round(time.perf_counter() - started, 2),
        "peak_rss_mib": round(_rss_mib(), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("repo")
    ap.add_argument("--dulwich-seconds", type=float, default=300.0)
    a = ap.parse_args()
    ctx = multiprocessing.get_context("spawn")
    for fn in (cat_file, with_pygit2, with_dulwich):
        with ctx.Pool(1) as pool:
            print(json.dumps(pool.apply(fn, (a.repo, a.dulwich_seconds))), flush=True)


if __name__ == "__main__":
    main()

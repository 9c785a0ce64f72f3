"""The reports of a kernel-size manifest with review evidence (issue 24): ~800 modified files, each with
a unified diff of about 3 KB, against the same manifest without evidence; medians of runs.

The floor is each report of the manifest without evidence, timed in the same run (alternating): what
evidence adds is the difference. The diffs are made by libgit2 (pygit2) from generated C sources, a
third backports, a third vendor changes, a third both.

    PYTHONPATH=shared:bench python bench/evidence_reports.py [--modified 800] [--runs 3]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
from typing import Any

import pygit2
from reports_80k import synthetic

from dropscan.reports import FORMATS, render

from hash_bench import paired


def source(i: int, functions: int = 40) -> list[str]:
    """A C file of ``functions`` functions (seven lines each), varied by ``i``."""
    lines = [
        f"/* drivers/acme/file{i:06d}.c: generated for the benchmark */",
        "#include <linux/module.h>",
        "",
    ]
    for k in range(functions):
        lines += [
            f"/* step {k} of device {i}: checks the descriptor and returns the next state */",
            f"static int acme_step_{i}_{k}(struct acme_dev *dev, int fd)",
            "{",
            f'\tif (fd < 0) return dev_err(dev->dev, "bad descriptor %d at step {k}\\n", fd);',
            f"\treturn acme_next(dev, fd + {k * 7 + i % 13});",
            "}",
            "",
        ]
    return lines


def changed(i: int, base: list[str]) -> tuple[list[str], list[int]]:
    """``base`` with six edited functions (three lines each, far apart: one 3-context hunk each); the
    indices of the hunks upstream published (all, none, or every other one)."""
    new = list(base)
    for k in range(0, 36, 6):
        at = 3 + 7 * k + 3
        new[at] = (
            f'\tif (fd < 0 || fd > ACME_MAX_FD) return dev_err(dev->dev, "fd %d out of range ({k})\\n", fd);'
        )
        new[at + 1] = f"\treturn acme_next_checked(dev, fd + {k * 7 + i % 13}, ACME_FLAG_{k});"
        new.insert(at + 2, f"\t/* acme: step {k} re-checked after the vendor's hardware erratum {i} */")
    kind = i % 3
    upstream = list(range(6)) if kind == 0 else [] if kind == 1 else [0, 2, 4]
    return new, upstream


def evidence(i: int, commits: list[str]) -> dict[str, Any]:
    base = source(i)
    new, upstream = changed(i, base)
    old_text, new_text = ("\n".join(base) + "\n").encode(), ("\n".join(new) + "\n").encode()
    path = f"drivers/dir{i % 900:03d}/file{i:06d}.c"
    zero = pygit2.Patch.create_from(old_text, new_text, old_as_path=path, new_as_path=path, context_lines=0)
    three = pygit2.Patch.create_from(old_text, new_text, old_as_path=path, new_as_path=path, context_lines=3)
    hunks = []
    for n, h in enumerate(zero.hunks):
        hunk: dict[str, Any] = {
            "old_start": h.old_start,
            "old_lines": h.old_lines,
            "new_start": h.new_start,
            "new_lines": h.new_lines,
            "origin": "upstream" if n in upstream else "vendor",
        }
        if n in upstream:
            commit = commits[(i + n) % len(commits)]
            hunk.update(commit=commit, release="6.1.177", subject=f"acme: fix step {n} of device {i}")
        hunks.append(hunk)
    origin = "upstream" if len(upstream) == len(hunks) else "vendor" if not upstream else "mixed"
    text = three.text or ""
    _, added, removed = three.line_stats
    return {
        "base": {
            "package": "linux",
            "version": "6.1.176",
            "path": path,
            "sha256": hashlib.sha256(old_text).hexdigest(),
        },
        "lines_added": added,
        "lines_removed": removed,
        "hunks": hunks,
        "origin": origin,
        "patch": text[text.index("--- ") :],
    }


def with_evidence(m: dict[str, Any], modified: int) -> dict[str, Any]:
    """``m`` with evidence on its first ``modified`` modified files, and the counts and commits."""
    m = copy.deepcopy(m)
    commits = [hashlib.sha1(f"commit {n}".encode()).hexdigest() for n in range(200)]
    done = backported = vendor = 0
    for f in m["files"]:
        if f["class"] != "modified" or done >= modified:
            continue
        f["evidence"] = evidence(done, commits)
        backported += f["evidence"]["origin"] == "upstream"
        vendor += f["evidence"]["origin"] != "upstream"
        done += 1
    s = m["summary"]
    s["backported"], s["vendor_changed"] = backported, vendor
    s["review"] -= backported
    c = m["components"][0]
    c["baseline"] = {
        "release": "6.1.176",
        "backported": backported,
        "commits": commits,
        "vendor_changed": vendor,
        "added": c["classes"]["added"],
    }
    m["evidence"] = {
        "commits": {
            sha: {
                "subject": f"acme: upstream fix {n}",
                "date": "2025-01-01T00:00:00+00:00",
                "release": "6.1.177",
            }
            for n, sha in enumerate(commits)
        }
    }
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=80_715)
    ap.add_argument("--review", type=int, default=3_022)
    ap.add_argument("--modified", type=int, default=800)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    plain = synthetic(a.files, a.review)
    rich = with_evidence(plain, a.modified)
    patches = [f["evidence"]["patch"] for f in rich["files"] if "evidence" in f]
    size = sum(len(p) for p in patches)
    print(
        f"{a.files:,} files, {a.review:,} to review, {len(patches):,} with evidence: patches "
        f"{size / 1e6:.2f} MB ({size / len(patches) / 1e3:.1f} KB each); manifest "
        f"{len(json.dumps(plain)) / 1e6:.1f} MB without evidence, {len(json.dumps(rich)) / 1e6:.1f} MB with"
    )
    for fmt in FORMATS:  # imports (spdx-tools, cyclonedx, Pygments' lexers) out of the timing
        render(with_evidence(synthetic(10, 6), 2), fmt)
    for fmt in FORMATS:
        floor, ours, ratio = paired(
            lambda fmt=fmt: render(plain, fmt), lambda fmt=fmt: render(rich, fmt), a.runs
        )  # type: ignore[misc]
        grown = len(render(rich, fmt)) / 1e6
        print(
            f"  {fmt:<10} without {floor:6.2f} s  with {ours:6.2f} s  "
            f"(+{ours - floor:5.2f} s, {ratio:4.2f}x)  {grown:6.1f} MB"
        )


if __name__ == "__main__":
    main()

"""A release as its tarball and as its git tag: do the two ingests record the same files? (issue 23)

For each ``--pair TARBALL REPO TAG``: the path list and SHA-256 of every file as an archive ingest
walks the tarball (its top folder removed, as release identification aligns it) and as ingest-git
reads the tag's tree, compared: files only in the tarball (generated at release time), only in the tag
(left out of the tarball), and at the same path with different bytes (keyword expansion, generated
content). Writes ``<out>/results.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from dropscan.archive import walk
from dropscan.archive.digest import digest_bytes
from dropscan.git.repo import GitRepo

EXAMPLES = 12


def from_tarball(path: Path) -> dict[str, tuple[str, str]]:
    """aligned path -> (sha256, ws digest) of every member, its one top folder removed as
    ``audit.components.release_paths`` removes it."""
    with path.open("rb") as f:
        recs = {r.path: (r.sha256, r.ws) for r in walk(f, path.name, emit_containers=True)}
    tops = {p.split("/", 1)[0] for p in recs if "/" in p}
    strip = len(tops) == 1 and all("/" in p for p in recs)
    return {(p.split("/", 1)[1] if strip else p): v for p, v in recs.items()}


def from_tag(repo: GitRepo, tag: str) -> dict[str, tuple[str, str]]:
    commit = str(repo.repo.revparse_single(tag).peel(None).id)
    out: dict[str, tuple[str, str]] = {}
    for entry in repo.files(commit):
        if entry.link:
            out[entry.path] = (digest_bytes(b"").sha256, digest_bytes(b"").sha256)
            continue
        data = repo.read(entry.blob)
        if data is not None:
            d = digest_bytes(data, entry.path)
            out[entry.path] = (d.sha256, d.ws)
    return out


def compare(tar: dict[str, tuple[str, str]], tag: dict[str, tuple[str, str]]) -> dict[str, Any]:
    only_tar = sorted(set(tar) - set(tag))
    only_tag = sorted(set(tag) - set(tar))
    both = set(tar) & set(tag)
    differ = sorted(p for p in both if tar[p][0] != tag[p][0])
    ws_only = [p for p in differ if tar[p][1] == tag[p][1]]
    return {
        "tarball_files": len(tar),
        "tag_files": len(tag),
        "same": len(both) - len(differ),
        "only_in_tarball": len(only_tar),
        "only_in_tag": len(only_tag),
        "differ": len(differ),
        "differ_whitespace_or_keywords_only": len(ws_only),
        "examples": {
            "only_in_tarball": only_tar[:EXAMPLES],
            "only_in_tag": only_tag[:EXAMPLES],
            "differ": differ[:EXAMPLES],
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pair", nargs=3, action="append", metavar=("TARBALL", "REPO", "TAG"), required=True)
    ap.add_argument("--out", type=Path, default=Path("bench-out/tarball-vs-tag"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for tarball, repo, tag in a.pair:
        r = compare(from_tarball(Path(tarball)), from_tag(GitRepo(repo), tag))
        results[f"{Path(tarball).name} vs {tag}"] = r
        print(
            f"{Path(tarball).name} vs {tag}: {r['tarball_files']} / {r['tag_files']} files, {r['same']} same,"
        )
        print(f"  {r['only_in_tarball']} only in the tarball, {r['only_in_tag']} only in the tag,")
        print(
            f"  {r['differ']} differ ({r['differ_whitespace_or_keywords_only']} by whitespace/keywords only)"
        )
    (a.out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Git bundles (``git bundle create x.bundle --all``, or an incremental ``v1.36.0..master``) into a bare
repository that :class:`dropscan.git.repo.GitRepo` reads, without a git binary (Lambda has none).

A bundle is a header (``# v2 git bundle`` or ``# v3``, capabilities, prerequisites ``-<id>``, refs
``<id> <name>``, a blank line) and a pack. The pack is streamed into ``objects/pack/``, completed and
indexed by dulwich (libgit2's indexer is not in pygit2's API); the refs are written with pygit2.
Objects an incremental bundle leaves out (its prerequisites and what they reach) are found in the packs
of earlier bundles when those are put in first, else they count as missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pygit2
from dulwich.errors import ApplyDeltaError, ChecksumMismatch
from dulwich.object_store import DiskObjectStore

SIGNATURES = (b"# v2 git bundle\n", b"# v3 git bundle\n")


class BundleError(ValueError):
    """Not a git bundle, or a damaged one."""


@dataclass
class Unbundled:
    refs: dict[str, str] = field(default_factory=dict)  # ref name -> object id
    prerequisites: list[str] = field(default_factory=list)
    pack: Path | None = None  # the pack written (None: the bundle held no objects)
    index: Path | None = None


def init_repo(path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(path), bare=True)


def unbundle(src: BinaryIO, repo_dir: Path) -> Unbundled:
    """Read the bundle ``src`` into the bare repository at ``repo_dir`` (created if absent)."""
    repo = pygit2.Repository(str(repo_dir)) if (repo_dir / "HEAD").exists() else init_repo(repo_dir)
    first = src.readline()
    if first not in SIGNATURES:
        raise BundleError(f"not a git bundle (starts with {first[:32]!r})")
    out = Unbundled()
    while True:
        line = src.readline()
        if not line:
            raise BundleError("the bundle ends inside its header")
        if line == b"\n":
            break
        text = line.rstrip(b"\n").decode("utf-8", "replace")
        if text.startswith("@"):
            continue  # a v3 capability (object-format=sha1, filter=...): sha1 is all libgit2 reads here
        if text.startswith("-"):
            out.prerequisites.append(text[1:].split(" ", 1)[0])
            continue
        oid, _, name = text.partition(" ")
        if len(oid) != 40 or not name:
            raise BundleError(f"a damaged reference line in the bundle header: {text[:80]!r}")
        out.refs[name] = oid
    (repo_dir / "objects" / "pack").mkdir(parents=True, exist_ok=True)
    out.pack, out.index = _add_pack(src, repo_dir)
    for name, oid in out.refs.items():
        if not name.startswith("refs/"):
            continue  # HEAD: a symbolic name, nothing to keep
        try:
            repo.references.create(name, pygit2.Oid(hex=oid), force=True)
        except (pygit2.GitError, ValueError):
            continue  # a ref to an object the bundle lacks (a damaged bundle): its tag is skipped
    return out


def _add_pack(src: BinaryIO, repo_dir: Path) -> tuple[Path, Path]:
    """Copy the bundle's pack into the repository, completed and indexed (dulwich).

    An incremental bundle's pack is thin: its deltas may stand on objects it leaves out, which libgit2
    cannot read across packs. dulwich appends those bases, found in the repository's earlier packs
    (put in first), as ``git index-pack --fix-thin`` does."""
    store = DiskObjectStore(str(repo_dir / "objects"))
    try:
        pack = store.add_thin_pack(src.read, src.read)
    except (AssertionError, ValueError, KeyError, OSError, ChecksumMismatch, ApplyDeltaError) as e:
        raise BundleError(f"the bundle's pack cannot be read: {e}") from e
    base = Path(str(pack._basename))
    pack.close()
    return base.with_suffix(".pack"), base.with_suffix(".idx")

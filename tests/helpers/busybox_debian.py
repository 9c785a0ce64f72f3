"""Real data for review evidence (issue 36): Debian's busybox 1.37.0-6 patch series applied to the
1.37.0 release, against BusyBox's real history ingested with ``ingest-git --history``.

``make evidence-cases`` runs this module; it writes, into ``.cache/evidence`` (``DROPSCAN_EVIDENCE_DIR``):

- ``busybox.git``: the history. BusyBox's own git history where this machine has it (the GitHub mirrors
  ``mirror/busybox`` and ``rmyorston/busybox-w32``, whose ``busybox`` branch is upstream's master past
  1.36.1, with the tag ``1_37_0`` at upstream's "Bump version to 1.37.0" commit). Neither GitHub nor
  git.busybox.net is reachable from a clean machine here, so without the mirrors the history is made
  of Debian's own orig tarballs of BusyBox (1.35.0 of bookworm, 1.37.0 of trixie), one commit per
  release: real upstream states, a far coarser history (``history.json`` says which).
- ``data/``: an embedded stack holding that history's ingest, and ``ingest.json``: its report, with the
  digest of the ingest code that made it (:func:`code_stamp`): a test finds it stale when that code
  changed since, and asks for this to be run again.
- ``debian-busybox-1.37.0.tar.gz``: the drop, the 1.37.0 tarball with Debian's series applied in order
  (``patch -p1``) and ``debian/`` beside; ``truth.json``: the files each patch changes and, from git
  alone, the (file, commit) pairs where a commit a patch's header says it reverts removed lines the drop
  has and 1.37.0 lacks.

Debian's source package comes from apt (``make evidence-cases`` adds trixie's deb-src when absent).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest

PREFIX = "busybox-1.37.0"
CACHE_ENV = "DROPSCAN_EVIDENCE_DIR"
ROOT = Path(__file__).resolve().parents[2]
MIRROR = "/work/.mirror/mirror+busybox/repo"
W32 = "/work/.mirror/rmyorston+busybox-w32/repo"
#: Debian's orig tarballs a history is made of without the mirrors (make cases fetches 1.35.0)
RELEASES = ("1.35.0", "1.37.0")
#: the code whose output the cached ingest is: a change to any of it makes the cache stale
INGEST_CODE = (
    "shared/dropscan/git",
    "shared/dropscan/stages/ingest_git.py",
    "shared/dropscan/store/content.py",
    "shared/dropscan/store/evidence_shards.py",
    "shared/dropscan/audit/hunks.py",
    "shared/dropscan/archive/digest.py",
)


def default_cache() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else ROOT / ".cache" / "evidence"


def code_stamp() -> str:
    """A digest of the ingest code (:data:`INGEST_CODE`) of this checkout."""
    h = hashlib.sha256()
    for name in INGEST_CODE:
        p = ROOT / name
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(f.relative_to(ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def evidence_case() -> Path:
    """The built cache, fresh for this code; a test skips without it (or with it stale), unless
    ``DROPSCAN_REQUIRE_CASES`` is set: then it fails."""
    cache = default_cache()
    why = None
    if not (cache / "ingest.json").is_file() or not (cache / "truth.json").is_file():
        why = f"no evidence case in {cache}"
    elif json.loads((cache / "ingest.json").read_text()).get("code") != code_stamp():
        why = f"the evidence case in {cache} was ingested by other ingest code"
    if why is None:
        return cache
    if os.environ.get("DROPSCAN_REQUIRE_CASES"):
        pytest.fail(f"{why}: run `make evidence-cases`")
    pytest.skip(f"{why} (make evidence-cases)")


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    out = subprocess.run(["git", "--git-dir", str(repo), *args], input=input, capture_output=True, check=True)
    return out.stdout.decode("utf-8", "replace")


# ------------------------------------------------------------------ the history
def real_history(repo: Path, mirror: Path, w32: Path) -> dict[str, Any]:
    """BusyBox's git history from the two mirrors, tagged 1_37_0 where upstream tagged it."""
    if not (repo / "HEAD").is_file():
        tmp = repo.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--mirror", str(mirror), str(tmp)], check=True)
        git(tmp, "fetch", "-q", str(w32), "+refs/heads/busybox:refs/heads/master")
        tmp.rename(repo)
    found = git(repo, "log", "--format=%H", "--grep=^Bump version to 1.37.0$", "master").split()
    if len(found) != 1:
        raise SystemExit(f"no single 'Bump version to 1.37.0' commit on master: {found}")
    git(repo, "tag", "-f", "1_37_0", found[0])
    return {"kind": "git", "sources": [str(mirror), f"{w32} (busybox)"], "1_37_0": found[0]}


def release_history(repo: Path, tarballs: list[tuple[str, Path]]) -> dict[str, Any]:
    """A repository of release tarballs, one commit each (dated as the newest file it holds), tagged."""
    shutil.rmtree(repo, ignore_errors=True)
    work = Path(tempfile.mkdtemp(dir=repo.parent))
    try:
        env = {**os.environ, "GIT_DIR": str(repo), "GIT_WORK_TREE": str(work)}
        subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
        for version, tarball in tarballs:
            for child in work.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            with tarfile.open(tarball) as tar:
                top = tar.getmembers()[0].name.split("/")[0]
                tar.extractall(work, filter="tar")
                date = max(m.mtime for m in tar.getmembers())
            for child in (work / top).iterdir():
                child.rename(work / child.name)
            (work / top).rmdir()
            stamp = f"@{date} +0000"
            run_env = env | {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
            run_env |= {"GIT_AUTHOR_NAME": "release", "GIT_AUTHOR_EMAIL": "release@busybox.net"}
            run_env |= {"GIT_COMMITTER_NAME": "release", "GIT_COMMITTER_EMAIL": "release@busybox.net"}
            subprocess.run(["git", "add", "-A", "-f", "."], cwd=work, env=run_env, check=True)
            subprocess.run(
                ["git", "commit", "-q", "--no-verify", "-m", f"BusyBox {version} ({tarball.name})"],
                cwd=work,
                env=run_env,
                check=True,
            )
            subprocess.run(["git", "tag", version.replace(".", "_")], env=run_env, check=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"kind": "releases", "sources": [t.name for _, t in tarballs]}


def ingest(repo: Path, data: Path) -> dict[str, Any]:
    shutil.rmtree(data, ignore_errors=True)
    argv = [sys.executable, "-m", "dropscan.cli", "ingest-git", str(repo), "--package", "busybox"]
    argv += ["--history", "--quiet", "--data-dir", str(data)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared")}
    out = subprocess.run(argv, capture_output=True, check=True, env=env).stdout
    report: dict[str, Any] = json.loads(out)
    return {"seconds": report.get("seconds"), "commits": report.get("commits"), "tags": report.get("tags")}


# ------------------------------------------------------------------ the drop and what git says of it
def series(root: Path) -> list[str]:
    text = (root / "debian" / "patches" / "series").read_text()
    return [line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")]


def debian_tree(dsc: Path, into: Path) -> Path:
    """The source package's tree: its orig tarball, ``debian/`` from its debian tarball, and the
    series applied in order with ``patch -p1`` (what dpkg-source -x makes)."""
    orig = next(dsc.parent.glob("busybox_1.37.0.orig.tar.*"))
    deb = next(dsc.parent.glob(dsc.name.removesuffix(".dsc") + ".debian.tar.*"))
    with tarfile.open(orig) as tar:
        tar.extractall(into, filter="tar")
    root = into / PREFIX
    with tarfile.open(deb) as tar:
        tar.extractall(root, filter="tar")
    for name in series(root):
        patch = (root / "debian" / "patches" / name).resolve()
        subprocess.run(["patch", "-p1", "-s", "-i", str(patch)], cwd=root, check=True)
    return root


def debian_truth(repo: Path, root: Path, real: bool) -> dict[str, Any]:
    """The files each patch changes; with the real history, (file, commit) where a commit a patch's
    header says it reverts removed lines the drop has and 1.37.0 lacks (git's word, not dropscan's)."""
    patched: dict[str, list[str]] = {}
    reverts: list[tuple[str, str]] = []
    for name in series(root):
        text = (root / "debian" / "patches" / name).read_text(errors="replace")
        files = sorted({m.split("/", 1)[1] for m in re.findall(r"^\+\+\+ (\S+)", text, re.M) if "/" in m})
        for f in files:
            patched.setdefault(f, []).append(name)
        head = text.split("\n--- ", 1)[0]
        if not real or not re.search("revert", head, re.I):
            continue
        own = re.match(r"From ([0-9a-f]{40}) ", head)  # format-patch's own commit line
        for commit in dict.fromkeys(re.findall(r"\b[0-9a-f]{40}\b", head)):
            if own and commit == own.group(1):
                continue
            for f in git(repo, "show", "--format=", "--name-only", commit).split():
                if f not in files:
                    continue
                shown = git(repo, "show", "--format=", "-U0", commit, "--", f).splitlines()
                gone = {x[1:].strip() for x in shown if x.startswith("-") and not x.startswith("---")}
                base = {x.strip() for x in git(repo, "show", f"1_37_0:{f}").splitlines()}
                drop = {x.strip() for x in (root / f).read_text(errors="replace").splitlines()}
                if {x for x in gone if x} & drop - base:
                    reverts.append((f, commit))
    return {"patched": patched, "reverts": reverts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=str(default_cache()))
    ap.add_argument("--sources", required=True, help="where apt put Debian's busybox source packages")
    ap.add_argument("--mirror", default=MIRROR)
    ap.add_argument("--w32", default=W32)
    a = ap.parse_args(argv)
    cache, sources = Path(a.cache), Path(a.sources)
    cache.mkdir(parents=True, exist_ok=True)
    dsc = next(iter(sorted(sources.glob("busybox_1.37.0-*.dsc"))), None)
    if dsc is None:
        raise SystemExit(f"no busybox_1.37.0-*.dsc in {sources} (apt-get source busybox=1:1.37.0-6)")
    repo = cache / "busybox.git"
    mirror, w32 = Path(a.mirror), Path(a.w32)
    if (mirror / "HEAD").is_file() and (w32 / "HEAD").is_file():
        history = real_history(repo, mirror, w32)
    else:
        found = [(v, next(iter(sorted(sources.glob(f"busybox_{v}.orig.tar.*"))), None)) for v in RELEASES]
        history = release_history(repo, [(v, t) for v, t in found if t is not None])
    refs = git(repo, "show-ref")
    (cache / "history.json").write_text(json.dumps(history, indent=1))
    done = cache / "ingest.json"
    have = json.loads(done.read_text()) if done.is_file() else {}
    refs_digest = hashlib.sha256(refs.encode()).hexdigest()[:16]
    if have.get("code") != code_stamp() or have.get("refs") != refs_digest or not (cache / "data").is_dir():
        done.unlink(missing_ok=True)
        report = ingest(repo, cache / "data")
        done.write_text(json.dumps({"code": code_stamp(), "refs": refs_digest, "history": history} | report))
    with tempfile.TemporaryDirectory(dir=cache) as work:
        root = debian_tree(dsc, Path(work))
        truth = debian_truth(repo, root, history["kind"] == "git") | {"dsc": dsc.name, "history": history}
        drop = cache / "debian-busybox-1.37.0.tar.gz"
        with tarfile.open(drop.with_suffix(".tmp"), "w:gz") as tar:
            tar.add(root, arcname=PREFIX)
        drop.with_suffix(".tmp").replace(drop)
    (cache / "truth.json").write_text(json.dumps(truth, indent=1))
    print(f"{cache}: {history['kind']} history, {len(truth['patched'])} files patched, "
          f"{len(truth['reverts'])} reverts by git")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

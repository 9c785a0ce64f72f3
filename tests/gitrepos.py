"""Small git repositories for the tests, built with the git command line (real git, no network)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

LICENCE = b"GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991\n" * 20
FIX = b"int main(void) { return 1; /* the fix from master */ }\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git(repo: Path, *args: str, date: str = "2020-01-01T00:00:00Z") -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "A",
        "GIT_AUTHOR_EMAIL": "a@example.org",
        "GIT_COMMITTER_NAME": "A",
        "GIT_COMMITTER_EMAIL": "a@example.org",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
    }
    out = subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def commit(repo: Path, files: dict[str, bytes | None], subject: str, date: str) -> str:
    for name, data in files.items():
        path = repo / name
        if data is None:
            git(repo, "rm", "-q", name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        git(repo, "add", name)
    git(repo, "commit", "-q", "-m", subject, date=f"{date}T00:00:00Z")
    return git(repo, "rev-parse", "HEAD")


def build_upstream_repo(tmp_path: Path) -> Path:
    """1_0 and 1_1 (a rename, a symlink, the licence in both), a branch with an unreleased fix, a merge."""
    repo = tmp_path / "src"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    commit(
        repo,
        {"LICENSE": LICENCE, "main.c": b"int main(void) { return 0; }\n"},
        "Initial import",
        "2001-01-01",
    )
    git(repo, "tag", "1_0")
    commit(repo, {"util/old.c": b"int old;\n"}, "Add old", "2002-01-01")
    git(repo, "mv", "util/old.c", "util/new.c")
    os.symlink("main.c", repo / "link.c")
    git(repo, "add", "link.c")
    git(repo, "commit", "-q", "-m", "Rename old to new")
    git(repo, "tag", "-a", "v1.1", "-m", "release 1.1")  # annotated: peeled to its commit
    git(repo, "checkout", "-q", "-b", "fixes")
    fix = commit(repo, {"main.c": FIX}, "Fix the return code", "2003-03-03")
    git(repo, "checkout", "-q", "master")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge fixes", "fixes")
    git(repo, "checkout", "-q", "--detach")
    (repo / "fix-commit").write_text(fix)
    return repo


def long_history(tmp_path: Path, commits: int) -> Path:
    """A line of ``commits`` commits (git fast-import: a thousand in a second), each changing one line of
    one of three files, so that the same change recurs; tagged ``1_0`` half-way."""
    repo = tmp_path / "long"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    files = {f"f{k}.c": [f"int f{k}_{j} = 0;" for j in range(20)] for k in range(3)}
    stream: list[bytes] = []
    for i in range(commits):
        name = f"f{i % 3}.c"
        files[name][(i // 3) % 20] = f"int {name[:2]}_{(i // 3) % 20} = {1 + (i // 60) % 2};"  # 1, 2, 1..
        data = ("\n".join(files[name]) + "\n").encode()
        message = f"change {i}".encode()
        stream += [
            b"commit refs/heads/master",
            b"mark :%d" % (i + 1),
            f"committer A <a@example.org> {1_000_000_000 + i * 60} +0000".encode(),
            b"data %d" % len(message),
            message,
            f"M 100644 inline {name}".encode(),
            b"data %d" % len(data),
            data,
        ]
        if i == commits // 2:
            stream += [b"reset refs/tags/1_0", b"from :%d" % (i + 1), b""]
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet"], input=b"\n".join(stream) + b"\n", check=True
    )
    return repo

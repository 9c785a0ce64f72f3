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

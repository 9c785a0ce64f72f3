"""The walk of a history (``--history``): each blob's first commit and paths, from the diff worker's
tree diffs, and every blob met hashed once, by the walk or by the worker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dropscan.git.diff_worker import Diffs
from dropscan.git.repo import Entry, FirstSeen, GitRepo, add_path
from dropscan.git.run import Run


@dataclass
class Walked:
    """What a walk of the history found: each blob's first commit and paths, the commits walked (their
    ids, in order), the tips the next run hides, and whether the walk ended (False: at a checkpoint)."""

    first_commit: dict[str, FirstSeen]
    commits: list[str]
    tips: list[str]
    ended: bool


def walk(
    repo: GitRepo,
    run: Run,
    hulls: dict[str, list[str]],
    hide: list[str],
    tips: list[str],
    say: Callable[[str], None],
    stop: Callable[[], bool],
    changes: Diffs,
) -> Walked:
    """The commits reachable from ``tips`` and not from ``hide``, from the worker's tree diffs
    (:class:`dropscan.git.diff_worker.Trees`); every blob met is hashed (once), and what the diff worker
    has sent meanwhile is taken. ``hulls``: the blobs of this run's new tags.

    Commits come parents first, so the commits walked when ``stop`` says so hold all their own
    ancestors: hiding them (with ``hide``) is where the next run goes on."""
    first_commit: dict[str, FirstSeen] = {}
    commits = 0
    walked: list[str] = []
    pending: list[list[Entry]] = []  # each commit's blobs met first there and not hashed yet
    ended = True
    for commit, date, subject, files in changes.trees(repo):
        commits += 1
        walked.append(commit)
        new: list[Entry] = []
        for path, blob in files:
            prov = first_commit.get(blob)
            if prov is None:
                if hide and blob in run.blobs and blob not in hulls:
                    continue  # met by an earlier run's history: its provenance is written
                prov = first_commit[blob] = FirstSeen(commit, date, subject)
                if blob not in run.blobs:
                    new.append(Entry(path, blob, False))
            add_path(prov, path)
        pending.append(new)
        if commits % 500 == 0:
            changes.poll()
            if stop():
                say(f"stopping at a checkpoint after {commits} commits")
                ended = False
                break
        if commits % 2000 == 0:
            say(f"history: {commits} commits, {len(first_commit)} blobs")
    hash_pending(repo, run, pending, changes)
    if not ended:
        return Walked(first_commit, walked, hide + walked, False)
    return Walked(first_commit, walked, tips, True)


def hash_pending(repo: GitRepo, run: Run, pending: list[list[Entry]], changes: Diffs) -> None:
    """Every blob the walk met first, read and hashed: from the last commit back, by the walk, until it
    meets the diff worker coming forward (which hashes what its diffs read:
    :class:`dropscan.git.commit_diffs.BlobWork`); what the worker leaves (merges, root commits, a worker
    inline) the walk hashes too."""
    for n in range(len(pending) - 1, -1, -1):
        if changes.work is not None:
            changes.work.claimed.value = n  # the worker leaves this commit's blobs on
        if n % 16 == 0:
            changes.poll()
        for entry in pending[n]:
            if entry.blob in run.blobs or entry.blob in run.missing:
                continue
            if changes.hashed_by_worker(run, entry):
                continue
            run.digests(repo, entry)

"""Reading an upstream git repository with pygit2 (libgit2 in its wheel: Lambda has no git binary).

Releases are tags; their trees are path lists like a release archive's. The history is every commit
reachable from any ref, parents first; the ingest reads each commit's tree as a diff against its first
parent's. Objects a partial clone lacks are counted and named, never fatal. No database here: the ingest
stage (:mod:`dropscan.stages.ingest_git`) decides what to hash and write.

pygit2 was chosen by measurement (``bench/git_read.py``, docs/design.md): reading every object of the
BusyBox mirror once took 20.8 s with pygit2, 85.9 s with dulwich, 27.3 s with ``git cat-file --batch``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pygit2

from dropscan.models import PROVENANCE_PATHS, PROVENANCE_SUBJECT, version_key

LINK = pygit2.GIT_FILEMODE_LINK
GITLINK = pygit2.GIT_FILEMODE_COMMIT  # a submodule: another repository's commit, no content here
_DIGIT = re.compile(r"\d")


class GitReadError(RuntimeError):
    """The repository cannot be opened at all (not a git directory, unreadable)."""


def version_of(tag: str, pattern: re.Pattern[str] | None = None) -> str | None:
    """The release version a tag names: ``1_35_0`` -> ``1.35.0``, ``v6.1.176`` -> ``6.1.176``,
    ``busybox-1.2`` -> ``1.2``; with ``pattern``, its first group (or whole match). None: no version."""
    if pattern is not None:
        m = pattern.search(tag)
        if m is None:
            return None
        return (m.group(1) if m.groups() else m.group(0)) or None
    m = _DIGIT.search(tag)
    if m is None:
        return None
    return tag[m.start() :].replace("_", ".")


@dataclass(frozen=True, slots=True)
class Tag:
    name: str
    commit: str  # the commit the tag peels to (hex)
    version: str


@dataclass(frozen=True, slots=True)
class Entry:
    """A file of a tree: its path, blob id and whether it is a symbolic link (its target is the blob)."""

    path: str
    blob: str
    link: bool


@dataclass
class FirstSeen:
    """Where a blob first appears in the history: the commit, its date and subject, and its paths."""

    commit: str
    date: str
    subject: str
    paths: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {"c": self.commit, "t": self.date, "s": self.subject, "p": sorted(self.paths)}


#: libgit2 caches no tree over 4 KiB by default: a big project's root and busiest folders are read and
#: inflated again by every commit's diff (a quarter of the diffs' time on BusyBox's history)
TREE_CACHE_LIMIT = 1 << 20


def _tune_libgit2() -> None:
    pygit2.settings.cache_object_limit(pygit2.enums.ObjectType.TREE, TREE_CACHE_LIMIT)
    # libgit2 hashes every object it reads again (SHA-1 with collision detection, docs/design.md); git
    # itself does not, outside fsck, and a blob's content is hashed here with SHA-256 anyway
    pygit2.settings.enable_strict_hash_verification(False)


class GitRepo:
    """A repository on disk (bare or not)."""

    def __init__(self, path: str) -> None:
        _tune_libgit2()
        self.path = path
        try:
            self.repo = pygit2.Repository(path)
        except (pygit2.GitError, KeyError) as e:
            raise GitReadError(f"{path}: not a git repository ({e})") from e
        self.missing_trees: set[str] = set()

    def tags(self, glob: str = "*", pattern: re.Pattern[str] | None = None) -> list[Tag]:
        """The tags matching ``glob`` that point (through annotated tags) at a commit and name a version;
        two tags naming one version: the first by name wins."""
        out: dict[str, Tag] = {}
        for ref in sorted(self.repo.references):
            if not ref.startswith("refs/tags/"):
                continue
            name = ref[len("refs/tags/") :]
            if not fnmatch.fnmatchcase(name, glob):
                continue
            version = version_of(name, pattern)
            if version is None or version in out:
                continue
            try:
                commit = self.repo.revparse_single(ref).peel(pygit2.Commit)
            except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
                continue  # a tag of a tree or a blob, or of an object this copy lacks
            out[version] = Tag(name, str(commit.id), version)
        return list(out.values())

    def ref_tips(self) -> list[str]:
        """The commit every ref (branches, tags, remotes) points at, once each."""
        tips: set[str] = set()
        for ref in self.repo.references:
            try:
                tips.add(str(self.repo.revparse_single(ref).peel(pygit2.Commit).id))
            except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
                continue
        return sorted(tips)

    def files(self, commit: str) -> list[Entry]:
        """Every file of the commit's tree (submodules left out: their content is elsewhere)."""
        out: list[Entry] = []
        tree = self.repo[commit].peel(pygit2.Tree)
        self._walk(tree, "", out.append, None)
        return out

    def blobs_of(self, commits: list[str]) -> set[str]:
        """The blob ids in the trees of ``commits`` (each tree read once; a commit this copy lacks adds
        nothing)."""
        out: set[str] = set()
        seen: set[bytes] = set()
        for commit in commits:
            try:
                tree = self.repo[commit].peel(pygit2.Tree)
            except (KeyError, ValueError, pygit2.GitError):
                continue
            self._walk(tree, "", lambda e: out.add(e.blob), seen)
        return out

    def _walk(self, tree: pygit2.Tree, prefix: str, emit: object, seen: set[bytes] | None) -> None:
        stack = [(tree, prefix)]
        add = emit  # a bound append: called once per file
        while stack:
            current, base = stack.pop()
            for entry in current:
                kind = entry.type_str  # a str: pygit2 makes an enum of each filemode it is asked for
                if kind == "blob":
                    add(Entry(base + (entry.name or ""), str(entry.id), entry.filemode == LINK))  # type: ignore[operator]
                elif kind == "tree":
                    if seen is not None:
                        raw = entry.id.raw
                        if raw in seen:
                            continue
                        seen.add(raw)
                    try:
                        sub = self.repo[entry.id]
                    except KeyError:
                        self.missing_trees.add(str(entry.id))
                        continue
                    stack.append((sub, base + (entry.name or "") + "/"))  # type: ignore[arg-type]
                # else a submodule's commit (a gitlink): no content here

    def commits(self, hide: list[str], tips: list[str]) -> Iterator[pygit2.Commit]:
        """Each commit reachable from ``tips`` and not from ``hide``, parents first (the same order on
        every call: the ingest's tree walk and its forked diff worker meet the commits in step)."""
        if not tips:
            return
        walker = self.repo.walk(None, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        for tip in tips:
            walker.push(pygit2.Oid(hex=tip))
        for old in hide:
            try:
                walker.hide(pygit2.Oid(hex=old))
            except (KeyError, ValueError, pygit2.GitError):
                continue  # a tip of an earlier run this copy no longer has (a rewritten branch)
        yield from walker

    def first_releases(self, tags: list[Tag]) -> dict[str, str]:
        """commit -> the lowest version among ``tags`` whose history holds it.

        Tags in version order, each walked back through its parents until a commit an earlier tag's
        walk reached (all of whose ancestors it reached too): each commit is read once. libgit2's walk
        with every earlier tag hidden marked the hidden histories again for each tag."""
        out: dict[str, str] = {}
        for tag in sorted(tags, key=lambda t: version_key(t.version)):
            stack = [tag.commit]
            while stack:
                oid = stack.pop()
                if oid in out:
                    continue
                try:
                    commit = self.repo[oid].peel(pygit2.Commit)
                except (KeyError, ValueError, pygit2.GitError):
                    continue  # a commit this copy lacks ends this line of the walk there
                out[oid] = tag.version
                stack.extend(str(p) for p in commit.parent_ids if str(p) not in out)
        return out

    def read(self, blob: str) -> bytes | None:
        """The blob's bytes; None when this copy lacks it (a partial clone)."""
        try:
            _, data = self.repo.odb.read(blob)
        except (KeyError, ValueError, pygit2.GitError):
            return None
        return bytes(data)


def first_seen(commit: pygit2.Commit) -> FirstSeen:
    when = datetime.fromtimestamp(commit.commit_time, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    subject = (commit.message or "").strip().split("\n", 1)[0][:PROVENANCE_SUBJECT]
    return FirstSeen(str(commit.id), when, subject)


#: a path longer than this is cut in a provenance (an item's size stays bounded)
PATH_CHARS = 256


def add_path(seen: FirstSeen, path: str) -> None:
    """The path among the blob's paths if it is one of the first :data:`PROVENANCE_PATHS` by name: the
    ones the database keeps when it merges two runs' paths (``models.earlier_provenance``), so that a
    history ingested in parts says what one run says."""
    path = path[:PATH_CHARS]
    paths = seen.paths
    if path in paths:
        return
    if len(paths) < PROVENANCE_PATHS:
        paths.append(path)
        return
    last = max(paths)
    if path < last:
        paths[paths.index(last)] = path

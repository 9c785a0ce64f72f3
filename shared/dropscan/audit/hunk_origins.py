"""Review evidence of a modified file: its upstream base, the diff, and each hunk's origin: upstream's
own later change (a backport), a revert of an upstream change, or the vendor's.

Pure rules: contents in, evidence out (the stage :mod:`dropscan.stages.evidence` fetches the contents
and the hunk index). Diffs are libgit2's (pygit2), the same algorithm at ingest (each commit's diff)
and here (base against the drop's file), with no context lines, so that a change upstream published
yields the same hunk in both: its fingerprint (the file's path, the removed and the added lines,
normalised as the ``ws`` digest normalises a file) is what the hunk index is keyed by.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dropscan.audit.hunks import Hunk, Index, Published, fingerprint, normal_line
from dropscan.models import version_key

UPSTREAM, VENDOR, MIXED, NOISE, REVERT = "upstream", "vendor", "mixed", "noise", "revert"
#: the flag a file reverting an upstream commit raises (it stays in the review set)
REVERTS_FLAG = "reverts-upstream"
#: the base is the matched release's file unless the component matches no release this well (a
#: snapshot tree): then each file's nearest upstream state
SNAPSHOT_PCT = 50.0
#: lines each side of a short or common hunk that must be the commit's too for it to be cited
CONTEXT_CHECK = 3
#: a line recurring this often in the base file is common there: alone it cites nothing
REPEATED = 3
_COMMON = re.compile(
    rb"^\s*(?:[{}()\[\];,]*|#\s*(?:endif|else|include)\b.*|#\s*if\s+[01]\b.*"
    rb"|(?://config:)?\s*(?:depends on|select|default|help)\b.*|(?:break|continue|return(?: -?[01])?);)\s*$"
)
#: revisions of a path (besides the release's own) a base is chosen among, nearest in time first
MAX_CANDIDATES = 24


def held(pub: Published, base: Mapping[str, Any]) -> bool:
    """Whether the base (a release) already holds the commit: then it cannot have made a change from
    the base to the drop. A base that is a commit of the history is not told (no ancestry here)."""
    version = base.get("version")
    return bool(version and pub.release and version_key(pub.release) <= version_key(version))


class History(Protocol):
    """The upstream states of one path, for the checks a hunk's citation needs (the stage reads them)."""

    def states(self, pub: Published, side: str) -> list[bytes]:
        """The path's contents as ``pub`` left it (``side`` "after") or just before it changed it
        ("before"): the commit's own state when known, else the states nearest it in time."""

    def undone_by(self, pub: Published, present: Callable[[bytes], bool]) -> Published | None:
        """The first later commit after which ``present`` (true of ``pub``'s state) no longer holds."""

    def brought_back(self, present: Callable[[bytes], bool]) -> Published | None:
        """The commit that removed what ``present`` finds in an earlier state (None: none holds it)."""


@dataclass(frozen=True, slots=True)
class Origin:
    """A hunk's origin: ``commit`` is the upstream commit it reproduces (``upstream``) or undoes
    (``revert``); ``redoes``: the older commit whose change a revert brings back."""

    kind: str
    commit: Published | None = None
    redoes: Published | None = None


def normal_lines(data: bytes) -> list[bytes]:
    return [normal_line(x) for x in data.splitlines()]


def holds(state: Sequence[bytes], block: Sequence[bytes]) -> bool:
    """Whether the normalised lines ``block`` lie in ``state`` (normalised lines) together, in order."""
    if not block:
        return True
    return b"\n" + b"\n".join(block) + b"\n" in b"\n" + b"\n".join(state) + b"\n"


def common(line: bytes, counts: Mapping[bytes, int]) -> bool:
    """A line that alone says nothing of where a change came from: blank, a brace, ``#endif``,
    ``#if 0``, ``depends on X``, or one recurring in the file."""
    bare = normal_line(line).strip()
    return bool(_COMMON.match(bare)) or counts.get(bare, 0) >= REPEATED


def needs_context(h: Hunk, counts: Mapping[bytes, int]) -> bool:
    """A one-line hunk, or one of common lines only: cited only where the commit's context is the drop's."""
    return h.size == 1 or all(common(x, counts) for x in (*h.removed, *h.added))


def bare_lines(data: bytes) -> list[bytes]:
    """Lines as the context checks compare them: normalised, each run of blanks one space (upstream
    re-indents help texts and blocks more often than it rewrites them)."""
    return [_bare(x) for x in data.splitlines()]


def _bare(line: bytes) -> bytes:
    return b" ".join(normal_line(line).split())


def window(
    lines: Sequence[bytes], h: Hunk, before: int = CONTEXT_CHECK, after: int = CONTEXT_CHECK
) -> list[bytes]:
    """The hunk's added lines with lines of the drop's file (:func:`bare_lines`) each side."""
    start, end = _span(h)
    added = [_bare(x) for x in h.added]
    return [*lines[max(0, start - before) : start], *added, *lines[end : end + after]]


def _span(h: Hunk) -> tuple[int, int]:
    """The hunk's lines in the drop's file, 0-based, end excluded."""
    start = h.new_start - 1 if h.new_lines else h.new_start  # an insertion's new_start is the line before
    return start, start + h.new_lines


class _Checks:
    """What one file's hunks are checked against: the drop's lines, the base's line counts, the history."""

    def __init__(self, new: bytes | None, old: bytes | None, history: History | None) -> None:
        self.lines = bare_lines(new) if new is not None else None
        self.counts: Counter[bytes] = Counter(bare_lines(old or b""))
        self.history = history
        self._states: dict[tuple[str, str], list[list[bytes]]] = {}
        self._bare: dict[bytes, list[bytes]] = {}

    def bare(self, state: bytes) -> list[bytes]:
        """:func:`bare_lines` of a state, made once per state (a file's hunks look at the same ones)."""
        key = hashlib.blake2b(state, digest_size=16).digest()
        if key not in self._bare:
            self._bare[key] = bare_lines(state)
        return self._bare[key]

    def states(self, pub: Published, side: str) -> list[list[bytes]]:
        if (pub.commit, side) not in self._states:
            got = self.history.states(pub, side) if self.history is not None else []
            self._states[pub.commit, side] = [self.bare(x) for x in got]
        return self._states[pub.commit, side]

    def loose(self, h: Hunk) -> list[list[bytes]]:
        """The hunk's added lines with the drop's lines before them up to the first that is not common,
        and likewise after (within :data:`CONTEXT_CHECK` lines): what a revert's check needs, as the
        context of an old change has often moved on since; none without such a line."""
        if self.lines is None:
            return []
        start, end = _span(h)
        out: list[list[bytes]] = []
        for n in range(1, CONTEXT_CHECK + 1):
            if start - n >= 0 and not common(self.lines[start - n], self.counts):
                out.append(window(self.lines, h, n, 0))
                break
        for n in range(1, CONTEXT_CHECK + 1):
            if end + n - 1 < len(self.lines) and not common(self.lines[end + n - 1], self.counts):
                out.append(window(self.lines, h, 0, n))
                break
        return out

    def undoes(self, h: Hunk, pub: Published) -> bool:
        """Whether ``h`` undoes ``pub``'s opposite change: at once when its lines are not all common (the
        commit's lines brought back, wherever they land: Debian puts ``CONFIG_PLATFORM_LINUX=y`` back at
        another line of a defconfig), else only where the drop's context is as it was before the
        commit (a lone ``#if 0`` added is no revert of a 2000 commit that removed one elsewhere)."""
        return not all(common(x, self.counts) for x in (*h.removed, *h.added)) or self.fits(
            h, "before", pub, strict=False
        )

    def fits(self, h: Hunk, side: str, pub: Published, *, strict: bool = True) -> bool:
        """A short or common hunk: its lines with the drop's context are in the commit's ``side`` state
        (``strict``: with all :data:`CONTEXT_CHECK` lines each side, as a citation of upstream needs;
        else :meth:`loose`)."""
        if not needs_context(h, self.counts):
            return True
        if self.lines is None:
            return False
        windows = [window(self.lines, h)] if strict else self.loose(h)
        windows = [w for w in windows if len(w) > len(h.added)]  # some context, at least
        return any(holds(state, w) for state in self.states(pub, side) for w in windows)


def origins(
    hunks: Iterable[Hunk],
    index: Index,
    base: Mapping[str, Any],
    *,
    new: bytes | None = None,
    old: bytes | None = None,
    history: History | None = None,
    aliases: Sequence[str] = (),
) -> list[Origin]:
    """Each hunk's origin in a file diffed against ``base`` (``old``; the drop's file is ``new``):

    - ``upstream``: the earliest commit the base lacks that made this very change at this path;
    - ``revert``: a commit (of any era) made the opposite change, or the hunk brings back what a commit
      the base holds made and a later one undid (the one cited, found in ``history``);
    - ``vendor`` otherwise. A one-line or common-lines hunk is cited only where the commit's state
      holds it with the drop's context lines (``history``; without it, never).

    A change is looked for at the base's path and at ``aliases``, the paths its file was renamed from
    or to (a commit before a rename made its change at the old path).
    """
    checks = _Checks(new, old, history)
    paths = [base["path"], *aliases]
    out: list[Origin] = []
    for h in hunks:
        if h.noise:
            out.append(Origin(NOISE))
            continue
        pubs = [p for path in paths for p in index.get(h.fingerprint(path), ())]
        later = next((p for p in pubs if not held(p, base) and checks.fits(h, "after", p)), None)
        if later is not None:
            out.append(Origin(UPSTREAM, later))
            continue
        opposite = [p for path in paths for p in index.get(fingerprint(path, h.added, h.removed), ())]
        undone = next((p for p in opposite if checks.undoes(h, p)), None)
        if undone is not None:
            out.append(Origin(REVERT, undone))
            continue
        redone = next((p for p in pubs if held(p, base) and checks.fits(h, "after", p, strict=False)), None)
        if redone is not None:
            out.append(Origin(REVERT, _undoer(h, redone, checks), redoes=redone))
            continue
        back = _brought_back(h, checks) if h.added and not h.removed else None
        if back is not None:
            out.append(Origin(REVERT, back))
            continue
        out.append(Origin(VENDOR))
    return out


def _present(h: Hunk, checks: _Checks) -> Callable[[bytes], bool] | None:
    """What tells a state holding the change ``h`` makes: its added lines with their context (:meth:`
    _Checks.loose`; alone when not common), or without its removed lines; None: nothing to tell it by."""
    if not h.added:
        removed = [_bare(x) for x in h.removed]
        return lambda state: not holds(checks.bare(state), removed)
    windows = checks.loose(h) if needs_context(h, checks.counts) else [window([], h, 0, 0)]
    windows = [w for w in windows if w]
    if not windows:
        return None
    return lambda state: any(holds(checks.bare(state), w) for w in windows)


def _undoer(h: Hunk, redone: Published, checks: _Checks) -> Published | None:
    """The commit that undid ``redone``'s change ``h`` brings back: the first after it whose state no
    longer holds the hunk's added lines with their context (a removal: holds its removed lines again)."""
    present = _present(h, checks)
    if checks.history is None or present is None:
        return None
    return checks.history.undone_by(redone, present)


def _brought_back(h: Hunk, checks: _Checks) -> Published | None:
    """Lines only added, that an earlier state of the path held with the same context: the commit that
    removed them (by another change than the drop's opposite, else the index had told it)."""
    present = _present(h, checks)
    if checks.history is None or present is None:
        return None
    return checks.history.brought_back(present)


def _quick(hunks: Iterable[Hunk], index: Index, base: Mapping[str, Any]) -> list[str]:
    """Origins by the hunk index alone (no context checks): what a base is chosen by."""
    return [
        NOISE
        if h.noise
        else UPSTREAM
        if any(not held(p, base) for p in index.get(h.fingerprint(base["path"]), ()))
        else VENDOR
        for h in hunks
    ]


def file_origin(kinds: Iterable[str]) -> str:
    """``upstream`` when every hunk is upstream's or noise, ``mixed`` when some are, else ``vendor``
    (a revert is not upstream's: it keeps the file in review)."""
    seen = {VENDOR if k == REVERT else k for k in kinds}
    if VENDOR not in seen:
        return UPSTREAM
    return MIXED if UPSTREAM in seen else VENDOR


@dataclass
class Candidate:
    """One upstream state a drop's file may come from, and its diff to the drop's file."""

    base: dict[str, Any]  # package, version (None: a commit only), path, sha256, commit (history)
    hunks: list[Hunk]
    preferred: bool = False  # the component's matched release: wins ties

    def score(self, index: Index) -> tuple[int, int, int]:
        """Lines no upstream commit explains, then not the matched release, then lines changed."""
        kinds = _quick(self.hunks, index, self.base)
        vendor = sum(h.size for h, kind in zip(self.hunks, kinds, strict=True) if kind == VENDOR)
        return vendor, 0 if self.preferred else 1, self.distance

    @property
    def distance(self) -> int:
        """Lines changed from this state to the drop's file."""
        return sum(h.size for h in self.hunks)


def choose(candidates: Sequence[Candidate], index: Index) -> Candidate:
    """The state the file is nearest to (a snapshot's base): the fewest changed lines that upstream did
    not publish; on a tie the component's release, then the fewest changed lines."""
    return min(enumerate(candidates), key=lambda ic: (*ic[1].score(index), ic[0]))[1]


def base_of(
    candidates: Sequence[Candidate], index: Index, *, snapshot: bool
) -> tuple[Candidate, dict[str, Any] | None]:
    """The base the hunks are measured against, and the nearest other state when it is closer.

    A component matched to a release: that release's file at the same path, always (a closer commit
    would make the release's own changes "upstream hunks" of the vendor's file, and hide a vendor
    revert as the state before the commit it reverts). A snapshot (no release matched well, or the
    release lacks the file's content): the nearest state, as :func:`choose` finds it.
    """
    release = next((c for c in candidates if c.preferred), None)
    chosen = choose(candidates, index) if snapshot or release is None else release
    near = min(candidates, key=lambda c: c.distance)
    if near is chosen or near.distance >= chosen.distance:
        return chosen, None
    return chosen, {**near.base, "distance": near.distance, "base_distance": chosen.distance}


def _cited(pub: Published) -> dict[str, Any]:
    return {"commit": pub.commit, "release": pub.release, "subject": pub.subject, "date": pub.date}


def evidence_of(
    chosen: Candidate,
    index: Index,
    patch: tuple[str, bool] | None,
    *,
    new: bytes | None = None,
    old: bytes | None = None,
    history: History | None = None,
    nearest: Mapping[str, Any] | None = None,
    aliases: Sequence[str] = (),
) -> dict[str, Any]:
    """The manifest's ``evidence`` object for a file diffed against ``chosen`` (see :func:`origins`)."""
    hunks: list[dict[str, Any]] = []
    found = origins(chosen.hunks, index, chosen.base, new=new, old=old, history=history, aliases=aliases)
    reverts: list[dict[str, Any]] = []
    for h, o in zip(chosen.hunks, found, strict=True):
        entry: dict[str, Any] = {
            "old_start": h.old_start,
            "old_lines": h.old_lines,
            "new_start": h.new_start,
            "new_lines": h.new_lines,
            "origin": o.kind,
        }
        if o.kind == UPSTREAM and o.commit is not None:
            entry |= _cited(o.commit)
        if o.kind == REVERT:
            entry["reverts"] = _cited(o.commit) if o.commit else None
            if o.redoes is not None:
                entry["redoes"] = _cited(o.redoes)
            undone = entry["reverts"] or {"commit": None, "redoes": entry.get("redoes")}
            if undone not in reverts:
                reverts.append(undone)
        hunks.append(entry)
    out: dict[str, Any] = {
        "base": chosen.base,
        "lines_added": sum(len(h.added) for h in chosen.hunks),
        "lines_removed": sum(len(h.removed) for h in chosen.hunks),
        "hunks": hunks,
        "origin": file_origin(o.kind for o in found),
    }
    if nearest is not None:
        out["nearest"] = dict(nearest)
    if reverts:
        out["reverts"] = reverts
    if patch is not None:
        out["patch"] = patch[0]
        if patch[1]:
            out["patch_truncated"] = True
    return out


def without_diff(base: dict[str, Any] | None, reason: str) -> dict[str, Any]:
    """Evidence that names the base (when known) but could not diff: a vendor change until shown not."""
    return {"base": base, "lines_added": 0, "lines_removed": 0, "hunks": [], "origin": VENDOR} | {
        "error": reason
    }


def noise_only(base: dict[str, Any] | None, cls: str) -> dict[str, Any]:
    """Brief evidence of a ``vcs-keywords``/``whitespace`` file: its base; the digests proved the rest."""
    return {"base": base, "lines_added": 0, "lines_removed": 0, "hunks": [], "origin": UPSTREAM, "noise": cls}


# ------------------------------------------------------------------ counted into the manifest
def is_backport(f: Mapping[str, Any]) -> bool:
    """A modified file every change of which upstream published (or is noise): upstream code."""
    ev = f.get("evidence")
    return bool(f.get("class") == "modified" and ev and ev.get("origin") == UPSTREAM and not ev.get("error"))


@dataclass
class Baseline:
    release: str | None
    backported: int = 0
    commits: list[str] = field(default_factory=list)
    vendor_changed: int = 0
    added: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "backported": self.backported,
            "commits": self.commits,
            "vendor_changed": self.vendor_changed,
            "added": self.added,
        }


def settle(manifest: dict[str, Any]) -> None:
    """Each component's baseline line, the commits cited, and the summary's backport counts.

    Backports leave the review count (``decisions.settle`` subtracts them); this counts them.
    """
    baselines = {
        str(c.get("prefix", "")): Baseline(c.get("version"))
        for c in manifest.get("components") or []
        if c.get("identified")
    }
    commits: dict[str, dict[str, Any]] = {}
    backported = vendor = 0
    for f in manifest["files"]:
        b = baselines.get(str(f.get("component", "")))
        if f["class"] == "added" and b:
            b.added += 1
        if f["class"] != "modified" or "evidence" not in f:
            continue
        cited = _cite(f["evidence"], commits)
        if b:
            b.commits.extend(c for c in cited if c not in b.commits)
        if is_backport(f):
            backported += 1
            if b:
                b.backported += 1
        else:
            vendor += 1
            if b:
                b.vendor_changed += 1
    for c in manifest.get("components") or []:
        b = baselines.get(str(c.get("prefix", "")))
        if b is not None:
            b.commits.sort()
            c["baseline"] = b.to_json()
    manifest["summary"]["backported"] = backported
    manifest["summary"]["vendor_changed"] = vendor
    manifest["evidence"] = {"commits": commits}
    flags = [fl for fl in manifest.get("flags") or [] if fl.get("kind") != REVERTS_FLAG]
    reverted = revert_flags(manifest["files"])
    if reverted or "flags" in manifest:  # a manifest triage gave no flags to stays without
        manifest["flags"] = flags + reverted


def revert_flags(files: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A ``reverts-upstream`` flag (to review) for each upstream commit a file's hunks undo, with the
    commit's own subject: the change reverted may be a fix."""
    out: list[dict[str, Any]] = []
    for f in files:
        ev = f.get("evidence") or {}
        for r in ev.get("reverts") or ():
            mine = [h for h in ev.get("hunks", ()) if h.get("origin") == REVERT]
            hunk: Mapping[str, Any] = next(
                (h for h in mine if (h.get("reverts") or {}) == r), mine[0] if mine else {}
            )
            if r.get("commit"):
                detail = f"reverts upstream commit {r['commit'][:12]}"
                detail += f" (first released in {r['release']})" if r.get("release") else ""
                said = r.get("subject") or "(subject not recorded)"
                detail += f": {said}"
            else:  # the commit undone was not found: the change brought back is named
                redo = r.get("redoes") or {}
                detail = (
                    f"brings back what upstream commit {str(redo.get('commit'))[:12]} added, since removed"
                )
                said = redo.get("subject") or "(subject not recorded)"
                detail += f": {said}"
            out.append(
                {
                    "kind": REVERTS_FLAG,
                    "severity": "review",
                    "path": f["path"],
                    "line": hunk.get("new_start") or None,
                    "evidence": said,
                    "component": str(f.get("component", "")),
                    "detail": detail,
                    "commit": r.get("commit") or (r.get("redoes") or {}).get("commit"),
                }
            )
    return out


def _cite(ev: Mapping[str, Any], commits: dict[str, dict[str, Any]]) -> list[str]:
    """The commits ``ev``'s upstream hunks cite, each also entered once in ``commits``."""
    out: list[str] = []
    for h in ev.get("hunks", ()):
        if h.get("commit"):
            commits.setdefault(
                h["commit"], {"subject": h.get("subject"), "release": h.get("release"), "date": h.get("date")}
            )
            if h["commit"] not in out:
                out.append(h["commit"])
    return out

"""Decisions on a single vendor hunk of a modified file, and how a scan applies them.

A hunk's decision is a :class:`~dropscan.models.Decision` whose subject is ``hunk:<fingerprint>``: the
fingerprint of :func:`dropscan.audit.hunks.fingerprint` over the file's upstream path and the hunk's
removed and added lines. So the same change to the same file, in the supplier's next drop, is the same
subject whatever else changed in the file. A file whose every hunk to review (vendor and revert hunks;
upstream's and noise are not reviewed) is accepted counts as accepted. Pure rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from dropscan.audit.decision_rules import decision_mark, flag_id, in_review_class, licence_ids
from dropscan.audit.hunks import fingerprint
from dropscan.models import Decision

PREFIX = "hunk:"
#: the origins of hunks a reviewer decides on
REVIEWED = frozenset({"vendor", "revert"})
NOTE = "every vendor hunk accepted"
_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def subject(fp: str) -> str:
    return PREFIX + fp


def _lines(patch: str) -> tuple[dict[int, str], dict[int, str]]:
    """The removed lines of a unified diff by old number, the added ones by new number."""
    removed: dict[int, str] = {}
    added: dict[int, str] = {}
    old = new = 0
    started = False
    for raw in patch.split("\n"):
        m = _HEADER.match(raw)
        if m:
            started, old, new = True, int(m.group(1)), int(m.group(3))
        elif not started or not raw:
            continue
        elif raw[0] == "-":
            removed[old], old = raw[1:], old + 1
        elif raw[0] == "+":
            added[new], new = raw[1:], new + 1
        elif raw[0] == " ":
            old, new = old + 1, new + 1
    return removed, added


def fingerprints(f: Mapping[str, Any]) -> dict[int, str]:
    """Index in ``evidence.hunks`` -> fingerprint, for each hunk to review whose lines the file's patch
    holds whole (a hunk past a patch cut short has none, and cannot be decided on its own)."""
    ev = f.get("evidence")
    if not isinstance(ev, Mapping) or not ev.get("patch") or f.get("class") != "modified":
        return {}
    removed, added = _lines(str(ev["patch"]))
    path = str((ev.get("base") or {}).get("path") or f["path"])
    out: dict[int, str] = {}
    for i, h in enumerate(ev.get("hunks") or []):
        if h.get("origin") not in REVIEWED:
            continue
        olds = range(
            int(h.get("old_start") or 0), int(h.get("old_start") or 0) + int(h.get("old_lines") or 0)
        )
        news = range(
            int(h.get("new_start") or 0), int(h.get("new_start") or 0) + int(h.get("new_lines") or 0)
        )
        if not all(n in removed for n in olds) or not all(n in added for n in news):
            continue
        out[i] = fingerprint(path, [_raw(removed[n]) for n in olds], [_raw(added[n]) for n in news])
    return out


def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def reviewed(f: Mapping[str, Any]) -> list[int]:
    """The indexes of the file's hunks to review."""
    ev = f.get("evidence")
    hunks = ev.get("hunks") if isinstance(ev, Mapping) else None
    return [i for i, h in enumerate(hunks or []) if h.get("origin") in REVIEWED]


def choose(decisions: Iterable[Decision], supplier: str) -> dict[str, Decision]:
    """Fingerprint -> the hunk decision that applies to ``supplier``: its own over a global one."""
    chosen: dict[str, Decision] = {}
    for d in decisions:
        if not d.subject.startswith(PREFIX) or (d.scope == "supplier" and d.supplier != supplier):
            continue
        fp = d.subject.removeprefix(PREFIX)
        held = chosen.get(fp)
        if (
            held is None
            or (held.scope == "global" and d.scope == "supplier")
            or (held.scope == d.scope and d.at > held.at)
        ):
            chosen[fp] = d
    return chosen


def all_accepted(f: Mapping[str, Any], chosen: Mapping[str, Decision]) -> list[Decision] | None:
    """The accepted decisions of every hunk to review of ``f``, when each has one; else None."""
    keys = fingerprints(f)
    todo = reviewed(f)
    if not todo or set(todo) != set(keys):
        return None
    found = [chosen.get(keys[i]) for i in todo]
    if any(d is None or d.verdict != "accepted" for d in found):
        return None
    return [d for d in found if d is not None]


def subjects(files: Iterable[Mapping[str, Any]]) -> set[str]:
    """The hunk subjects a scan asks the decisions table about: those of its review files."""
    return {subject(fp) for f in files if in_review_class(f) for fp in fingerprints(f).values()}


def apply(manifest: dict[str, Any], decisions: Iterable[Decision]) -> int:
    """Mark each decided hunk of the review files with its decision (``evidence.hunks[].decision``);
    a file without a decision of its own whose every hunk to review is accepted gets an ``accepted``
    decision (``hunks: true``), with what it carries now. Returns how many files were so accepted."""
    chosen = choose(decisions, str(manifest["supplier"]))
    if not chosen:
        return 0
    flags_at: dict[str, set[str]] = {}
    for fl in manifest.get("flags") or []:
        flags_at.setdefault(str(fl.get("path")), set()).add(flag_id(fl))
    n = 0
    for f in manifest["files"]:
        if not in_review_class(f):
            continue
        for i, fp in fingerprints(f).items():
            d = chosen.get(fp)
            if d is not None:
                f["evidence"]["hunks"][i]["decision"] = decision_mark(d)
        accepted = None if f.get("decision") else all_accepted(f, chosen)
        if accepted:
            last = max(accepted, key=lambda d: d.at)
            f["decision"] = decision_mark(last) | {
                "verdict": "accepted",
                "note": NOTE,
                "flags": sorted(flags_at.get(str(f["path"]), set())),
                "licenses": sorted(licence_ids(f)),
                "hunks": True,
            }
            n += 1
    return n

"""Auditors' decisions applied to a manifest: which review files they clear, which they escalate, and
when a decision no longer covers what a file now carries (re-opened). Pure: no data access.

A decision is recorded on a file's content and scope (:class:`dropscan.models.Decision`). A scan
attaches the one in scope to each review file of that content (``attach``, at finalize), re-opens it
after triage when the file carries a red flag or a licence finding the decision did not see
(``reopen``), and counts the outcome into the summary and verdict (``settle``).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dropscan import __version__
from dropscan.audit.hunk_origins import is_backport
from dropscan.audit.manifest import verdict as verdict_of
from dropscan.models import REVIEW_CLASSES, SCOPES, VERDICTS, Decision, content_subject

FORMAT = "dropscan.decisions/1"
_REVIEW = frozenset(c.value for c in REVIEW_CLASSES)
_SEVERITIES = ("action-required", "review")


class DecisionError(ValueError):
    """A decision that cannot be recorded (bad verdict, scope, path) or a file that is no export."""


def in_review_class(f: Mapping[str, Any]) -> bool:
    return f["class"] in _REVIEW and not f.get("unreadable")


def is_cleared(f: Mapping[str, Any]) -> bool:
    """An ``accepted`` decision still covers the file: it has left the review set."""
    d = f.get("decision")
    return bool(d and d["verdict"] == "accepted" and not d.get("reopened"))


def flag_id(flag: Mapping[str, Any]) -> str:
    """What a decision remembers of a red flag: its kind and detail (the content, so the line, is fixed)."""
    return f"{flag['kind']}: {flag['detail']}" if flag.get("detail") else str(flag["kind"])


def licence_ids(f: Mapping[str, Any]) -> set[str]:
    return {str(lic["expression"]) for lic in f.get("licenses") or [] if lic.get("expression")}


# ------------------------------------------------------------------ a scan applies them
def choose(decisions: Iterable[Decision], supplier: str) -> dict[str, Decision]:
    """SHA-256 -> the decision that applies to ``supplier``'s files of that content: the supplier's own
    over a global one (the nearer auditor knows the supplier's context); other suppliers' never."""
    chosen: dict[str, Decision] = {}
    for d in decisions:
        if not d.subject.startswith("sha256:"):
            continue  # hunk decisions: applied once vendor hunks are in the manifest
        if d.scope == "supplier" and d.supplier != supplier:
            continue
        digest = d.subject.removeprefix("sha256:")
        held = chosen.get(digest)
        if held is None or (held.scope == "global" and d.scope == "supplier"):
            chosen[digest] = d
    return chosen


def decision_mark(d: Decision) -> dict[str, Any]:
    """What a manifest records of a decision on the file or hunk it applies to."""
    return {
        "verdict": d.verdict,
        "by": d.by,
        "at": d.at,
        "note": d.note,
        "scope": d.scope,
        "scan_id": d.scan_id,
    }


def review_digests(files: Iterable[Mapping[str, Any]]) -> set[str]:
    """The contents a scan asks the decisions table about: those of its review set."""
    return {f["sha256"] for f in files if in_review_class(f)}


def attach(files: Iterable[dict[str, Any]], chosen: Mapping[str, Decision]) -> int:
    """Write each review file's decision into it; returns how many files got one."""
    n = 0
    for f in files:
        if not in_review_class(f):
            continue
        d = chosen.get(f["sha256"])
        if d is None:
            continue
        f["decision"] = decision_mark(d) | {"flags": list(d.flags), "licenses": list(d.licenses)}
        n += 1
    return n


def reopen(manifest: dict[str, Any]) -> int:
    """After triage: re-open each decision whose file now carries a red flag or a licence finding that
    was not there when it was decided (kept, marked, back in the review set). Returns how many.

    A triage that did not finish re-opens every decision: what the file carries now is unknown.
    """
    broken = (manifest.get("triage") or {}).get("error")
    flags_at: dict[str, set[str]] = defaultdict(set)
    for fl in manifest.get("flags") or []:
        flags_at[str(fl.get("path"))].add(flag_id(fl))
    n = 0
    for f in manifest["files"]:
        d = f.get("decision")
        if not d or d.get("reopened"):
            continue
        if broken:
            why = "triage did not finish: the file's red flags and licences are unknown"
        else:
            new_flags = sorted(flags_at.get(f["path"], set()) - set(d.get("flags") or ()))
            new_licences = sorted(licence_ids(f) - set(d.get("licenses") or ()))
            parts = [f"new red flag: {x}" for x in new_flags] + [f"new licence: {x}" for x in new_licences]
            if not parts:
                continue
            why = "; ".join(parts)
        d["reopened"] = True
        d["reopen_reason"] = why
        n += 1
    return n


def settle(manifest: dict[str, Any]) -> None:
    """Count the decisions into the summary, the components and the verdict.

    ``summary.review`` leaves out the cleared files and ``summary.cleared`` counts them; red flags of
    cleared files are kept, marked ``cleared``, and not counted; ``needs-action`` and ``rejected``
    make the verdict ``action-required``. Idempotent: finalize calls it, and triage again.
    """
    s = manifest["summary"]
    files = manifest["files"]
    cleared_paths = {f["path"] for f in files if is_cleared(f)}
    # upstream published every change of a backport: set aside like a cleared file, counted apart
    backports = {f["path"] for f in files if is_backport(f)} - cleared_paths
    by_verdict: Counter[str] = Counter()
    reopened = 0
    per_component: Counter[str] = Counter()
    for f in files:
        d = f.get("decision")
        if not d:
            continue
        if d.get("reopened"):
            reopened += 1
        if d["verdict"] != "accepted" or not d.get("reopened"):
            by_verdict[d["verdict"]] += 1
        if f["path"] in cleared_paths:
            per_component[str(f.get("component", ""))] += 1
    classes = s["classes"]
    s["review"] = sum(int(classes.get(c, 0)) for c in _REVIEW) - len(cleared_paths) - len(backports)
    s["review_pct"] = round(100.0 * s["review"] / s["files"], 2) if s["files"] else 0.0
    s["cleared"] = len(cleared_paths)
    s["decisions"] = {v: by_verdict.get(v, 0) for v in VERDICTS} | {"reopened": reopened}
    for c in manifest.get("components") or []:
        c["cleared"] = per_component.get(str(c.get("prefix", "")), 0)
    if "flags" in manifest:
        counts = dict.fromkeys(_SEVERITIES, 0)
        for fl in manifest["flags"]:
            if fl.get("path") in cleared_paths:
                fl["cleared"] = True
            elif fl.get("path") in backports:
                fl["backport"] = True
            else:
                fl.pop("cleared", None)
                counts[fl["severity"]] += 1
        s["flags"] = counts
    verdict = verdict_of(manifest["status"], s)
    if (manifest.get("triage") or {}).get("error") and verdict == "clean":
        verdict = "review"  # nothing was flagged because nothing was read
    manifest["verdict"] = verdict


# ------------------------------------------------------------------ an auditor records them
def record(
    manifest: Mapping[str, Any],
    *,
    paths: Sequence[str] = (),
    all_review: bool = False,
    verdict: str,
    by: str,
    at: str,
    note: str = "",
    scope: str = "supplier",
) -> list[Decision]:
    """The decisions an auditor makes on files of ``manifest``: the named paths, or its whole review
    set; one per distinct content, with what the file carried (flags, licences) to re-open on more."""
    if verdict not in VERDICTS:
        raise DecisionError(f"verdict {verdict!r}: expected one of {', '.join(VERDICTS)}")
    if scope not in SCOPES:
        raise DecisionError(f"scope {scope!r}: expected one of {', '.join(SCOPES)}")
    if not by.strip():
        raise DecisionError("a decision says who made it: --by NAME")
    by_path = {f["path"]: f for f in manifest["files"]}
    if all_review:
        chosen = [f for f in manifest["files"] if in_review_class(f) and not is_cleared(f)]
    else:
        unknown = [p for p in paths if p not in by_path]
        if unknown:
            raise DecisionError(f"not in the manifest: {', '.join(unknown[:5])}")
        outside = [p for p in paths if not in_review_class(by_path[p])]
        if outside:
            raise DecisionError(f"not in the review set (modified or added): {', '.join(outside[:5])}")
        chosen = [by_path[p] for p in paths]
    flags_at: dict[str, set[str]] = defaultdict(set)
    for fl in manifest.get("flags") or []:
        flags_at[str(fl.get("path"))].add(flag_id(fl))
    out: dict[str, Decision] = {}
    for f in sorted(chosen, key=lambda x: x["path"]):
        d = out.get(f["sha256"])
        flags = set(d.flags if d else ()) | flags_at.get(f["path"], set())
        licences = set(d.licenses if d else ()) | licence_ids(f)
        out[f["sha256"]] = Decision(
            subject=content_subject(f["sha256"]),
            scope=scope,
            supplier=str(manifest["supplier"]),
            verdict=verdict,
            by=by,
            at=at,
            note=note,
            scan_id=str(manifest["scan_id"]),
            path=d.path if d else f["path"],
            flags=tuple(sorted(flags)),
            licenses=tuple(sorted(licences)),
        )
    return list(out.values())


@dataclass
class Merged:
    """What merging decisions into a table changes: the decisions to write and the counts."""

    write: list[Decision]
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    superseded: int = 0  # older than what the table holds: not written

    def counts(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("added", "updated", "unchanged", "superseded")}


def merge(existing: Mapping[tuple[str, str], Decision], incoming: Iterable[Decision]) -> Merged:
    """Merge ``incoming`` over ``existing`` (by subject and scope key): a new key is added, a later
    decision (``at``) replaces an earlier one, the same decision is left alone, an older one dropped.
    Importing a file twice therefore changes nothing and never duplicates."""
    out = Merged(write=[])
    latest: dict[tuple[str, str], Decision] = {}
    for d in incoming:
        key = (d.subject, d.scope_key)
        if key not in latest or d.at > latest[key].at:
            latest[key] = d
    for key, d in sorted(latest.items()):
        held = existing.get(key)
        if held is None:
            out.added += 1
        elif held == d:
            out.unchanged += 1
            continue
        elif d.at > held.at or (d.at == held.at and d.to_json() != held.to_json()):
            out.updated += 1
        else:
            out.superseded += 1
            continue
        out.write.append(d)
    return out


# ------------------------------------------------------------------ the exchange file
def export_text(decisions: Iterable[Decision], *, exported_at: str) -> str:
    """``dropscan.decisions/1``: JSON, a header then one decision a line, sorted, so that a team keeps
    it in git and reviews changes to it as diffs."""
    rows = sorted(decisions, key=lambda d: (d.scope_key, d.subject))
    encode = json.JSONEncoder(separators=(", ", ": "), sort_keys=True).encode
    head = {"format": FORMAT, "generator": f"dropscan {__version__}", "exported_at": exported_at}
    lines = [f'{{"format": {json.dumps(FORMAT)}, "generator": {json.dumps(head["generator"])}, '
             f'"exported_at": {json.dumps(exported_at)}, "count": {len(rows)}, "decisions": [']  # fmt: skip
    lines += [("  " + encode(d.to_json()) + ("," if i < len(rows) - 1 else "")) for i, d in enumerate(rows)]
    lines.append("]}")
    return "\n".join(lines) + "\n"


def parse_export(text: str) -> list[Decision]:
    """The decisions of an export; :class:`DecisionError` for anything else."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DecisionError(f"not a decisions file: {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else None
        raise DecisionError(f"not a decisions file (format {got!r}, want {FORMAT})")
    out = []
    for i, row in enumerate(data.get("decisions") or []):
        try:
            d = Decision.from_json(row)
        except (KeyError, TypeError) as e:
            raise DecisionError(f"decision {i + 1}: missing {e}") from e
        if (
            d.verdict not in VERDICTS
            or d.scope not in SCOPES
            or not d.subject.startswith(("sha256:", "hunk:"))
        ):
            raise DecisionError(f"decision {i + 1}: bad verdict, scope or subject ({d.subject!r})")
        if d.scope == "supplier" and not d.supplier:
            raise DecisionError(f"decision {i + 1}: a supplier decision names its supplier")
        out.append(d)
    return out

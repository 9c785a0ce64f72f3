"""The result manifest (schema ``dropscan.manifest/1``): building, summarising and validating it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any

from dropscan import __version__
from dropscan.models import CLASS_ORDER, REVIEW_CLASSES, FileClass, PackageInfo

SCHEMA = "dropscan.manifest/1"


def summarize(files: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    counts = Counter(f["class"] for f in files)
    total = sum(counts.values())
    review = sum(counts.get(c.value, 0) for c in REVIEW_CLASSES)
    return {
        "files": total,
        "classes": {c.value: counts.get(c.value, 0) for c in CLASS_ORDER},
        "review": review,
        "review_pct": round(100.0 * review / total, 2) if total else 0.0,
        "low_trust": counts.get(FileClass.LOW_TRUST.value, 0),
        "unreadable": 0,
    }


def verdict(status: str, summary: Mapping[str, Any]) -> str:
    """``action-required`` on a red flag of that severity, a declared component not delivered or an
    auditor's ``needs-action`` or ``rejected`` decision on a file; ``review`` while files need review,
    flags ask for it or members are unreadable; else ``clean``."""
    if status != "complete":
        return status
    flags = summary.get("flags") or {}
    decided = summary.get("decisions") or {}
    if summary.get("mismatches") or flags.get("action-required"):
        return "action-required"
    if decided.get("needs-action") or decided.get("rejected"):
        return "action-required"
    # an unreadable member (encrypted, corrupt) hides what it holds: never call that drop clean
    return "review" if summary["review"] or flags.get("review") or summary.get("unreadable") else "clean"


def build_manifest(
    *,
    scan_id: str,
    supplier: str,
    source: Mapping[str, Any],
    status: str,
    reason: str | None,
    files: list[dict[str, Any]],
    components: list[dict[str, Any]],
    mismatches: list[dict[str, Any]] | None = None,
    stats: Mapping[str, Any],
    created_at: str,
    finished_at: str,
    database: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    files = sorted(files, key=lambda f: f["path"])
    summary = summarize(files)
    summary["unreadable"] = sum(1 for f in files if f.get("unreadable"))
    summary["components"] = len(components)
    summary["mismatches"] = len(mismatches or [])
    return {
        "schema": SCHEMA,
        "generator": f"dropscan {__version__}",
        "scan_id": scan_id,
        "supplier": supplier,
        "source": dict(source),
        "status": status,
        "reason": reason,
        "verdict": verdict(status, summary),
        "created_at": created_at,
        "finished_at": finished_at,
        "summary": summary,
        "components": components,
        "mismatches": list(mismatches or []),
        "files": files,
        "stats": dict(stats),
        **({"database": dict(database)} if database is not None else {}),
    }


#: packages named in a manifest's ``database.held`` (the counts are of them all)
DATABASE_NAMES = 50


def database_entry(
    kind: str, location: str, table: str, packages: Mapping[str, PackageInfo]
) -> dict[str, Any]:
    """The manifest's ``database``: the upstream database the drop was answered from, where it is and
    what it held (counts of every package and release, the first DATABASE_NAMES packages by name)."""
    return {
        "kind": kind,
        "location": location,
        "table": table,
        "packages": len(packages),
        "releases": sum(len(p.versions) for p in packages.values()),
        "held": {name: list(p.versions) for name, p in sorted(packages.items())[:DATABASE_NAMES]},
    }


@cache
def schema() -> dict[str, Any]:
    text = resources.files("dropscan").joinpath("schema/manifest.schema.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def validate(manifest: Mapping[str, Any]) -> None:
    """Raise jsonschema.ValidationError when ``manifest`` breaks the documented schema."""
    import jsonschema

    jsonschema.validate(manifest, schema())


def to_json(manifest: Mapping[str, Any]) -> str:
    """The manifest as JSON text: a line per top-level key, and a line per element of its lists.

    Readable and greppable (a file a line), and written by json's C encoder: ``indent`` makes json fall
    back to its pure-Python encoder, 1.9 s for a kernel manifest (80,000 files) on the critical path.
    """
    compact = json.JSONEncoder(separators=(",", ":")).encode
    lines = []
    for key, value in manifest.items():
        if isinstance(value, list) and value:
            items = ",\n  ".join(compact(v) for v in value)
            lines.append(f"{compact(key)}:[\n  {items}\n ]")
        else:
            lines.append(f"{compact(key)}:{compact(value)}")
    return "{\n " + ",\n ".join(lines) + "\n}\n"

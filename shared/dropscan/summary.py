"""The audit summary as people read it: e-mail subject and plain-text body, also printed by the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SUBJECT_LIMIT = 99  # SNS rejects subjects of 100 characters or more

_LABELS = (
    ("vcs-keywords", "VCS-only"),
    ("whitespace", "whitespace-only"),
    ("low-trust", "low-trust"),
    ("modified", "modified"),
    ("added", "added"),
)


def drop_name(manifest: Mapping[str, Any]) -> str:
    return str(manifest["source"]["key"]).rsplit("/", 1)[-1]


def subject(manifest: Mapping[str, Any]) -> str:
    s = manifest["summary"]
    head = f"dropscan: {manifest['supplier']}/{drop_name(manifest)} — {manifest['verdict']}"
    if manifest["status"] == "complete":
        text = f"{head}: {s['review']:,} of {s['files']:,} files ({s['review_pct']:.1f}%) need review"
    else:
        text = f"{head}: {manifest['reason'] or manifest['status']}"
    return text if len(text) <= SUBJECT_LIMIT else text[: SUBJECT_LIMIT - 1] + "…"


def component_line(c: Mapping[str, Any]) -> str:
    """``u-boot 2023.01 — 19,278 files, 99.2 % identical, 14 VCS-only, ... 3 upstream files missing``."""
    classes = c["classes"]
    nonempty = max(1, c["files"] - classes.get("empty", 0))
    name = (
        f"{c['package']} {c['version']}"
        if c["identified"]
        else f"{c['prefix'] or '(top level)'} unidentified"
    )
    parts = [f"{c['files']:,} files", f"{100.0 * classes.get('identical', 0) / nonempty:.1f} % identical"]
    parts += [f"{classes[k]:,} {label}" for k, label in _LABELS if classes.get(k)]
    if c["missing"]:
        parts.append(f"{len(c['missing']):,} upstream files missing")
    where = f" [{c['prefix']}]" if c["identified"] and c["prefix"] else ""
    return f"{name}{where} — " + ", ".join(parts)


def body(manifest: Mapping[str, Any], *, review_limit: int = 50) -> str:
    s = manifest["summary"]
    src = manifest["source"]
    lines = [
        f"Supplier:  {manifest['supplier']}",
        f"Drop:      {src['key']} ({src['size']:,} bytes, sha256 {src.get('sha256') or '-'})",
        f"Scan:      {manifest['scan_id']}",
        f"Status:    {manifest['status']}" + (f" — {manifest['reason']}" if manifest["reason"] else ""),
        f"Verdict:   {manifest['verdict']}",
        "",
        f"{s['files']:,} files; {s['review']:,} ({s['review_pct']:.1f}%) need review.",
        "  " + ", ".join(f"{n:,} {c}" for c, n in s["classes"].items() if n),
        "",
    ]
    if manifest["components"]:
        lines.append("Components:")
        lines += [f"  {component_line(c)}" for c in manifest["components"]]
        lines.append("")
    mismatches = manifest.get("mismatches") or []
    if mismatches:
        lines.append("Declared components do not match what was delivered:")
        for m in mismatches:
            where = f" ({m['component'] or '(top level)'})" if m["component"] is not None else ""
            if m["kind"] == "not-found":
                lines.append(f"  declared {m['declared']}: not found in the drop")
            elif m["kind"] == "other-release":
                lines.append(f"  declared {m['declared']}, delivered {m['found']}{where}")
            else:
                lines.append(f"  undeclared {m['found']}{where}")
        lines.append("")
    review = [f for f in manifest["files"] if f["class"] in ("modified", "added")]
    if review:
        lines.append("Review set:")
        lines += [f"  {f['class']:<9} {f['path']}" for f in review[:review_limit]]
        if len(review) > review_limit:
            lines.append(f"  … and {len(review) - review_limit:,} more (see the manifest)")
        lines.append("")
    unreadable = [f for f in manifest["files"] if f.get("unreadable")]
    if unreadable:
        lines.append("Unreadable nested archives:")
        lines += [f"  {f['path']}: {f['unreadable']}" for f in unreadable[:review_limit]]
        lines.append("")
    return "\n".join(lines)


def message_attributes(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """SNS attributes that subscription filter policies can select on."""
    return {
        "supplier": {"DataType": "String", "StringValue": manifest["supplier"]},
        "scan_id": {"DataType": "String", "StringValue": manifest["scan_id"]},
        "status": {"DataType": "String", "StringValue": manifest["status"]},
        "verdict": {"DataType": "String", "StringValue": manifest["verdict"]},
        "review": {"DataType": "Number", "StringValue": str(manifest["summary"]["review"])},
    }

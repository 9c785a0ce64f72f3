"""File classes: what the upstream database says of each file's three digests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dropscan.models import DigestInfo, FileClass, FileRecord, Trust

# form of the drop file's digest -> the class it earns when a high-trust upstream holds it
_STEPS: tuple[tuple[str, FileClass], ...] = (
    ("raw", FileClass.IDENTICAL),
    ("kw", FileClass.VCS_KEYWORDS),
    ("ws", FileClass.WHITESPACE),
)


def _digest_of(rec: FileRecord, form: str) -> str:
    return {"raw": rec.sha256, "kw": rec.kw, "ws": rec.ws}[form]


def upstream_refs(info: DigestInfo, packages: set[str] | None = None) -> list[dict[str, Any]]:
    """The packages holding the digest: releases as [lowest, highest] (empty: in its git history only),
    and the commit it came from when the package was ingested with its history."""
    out: list[dict[str, Any]] = []
    for p in sorted(info.names):
        if packages is not None and p not in packages:
            continue
        rng = info.packages.get(p)
        ref: dict[str, Any] = {"package": p, "versions": rng.as_list() if rng else []}
        prov = info.history.get(p)
        if prov and prov.get("c"):
            ref["commit"] = {
                "id": prov["c"],
                "date": prov.get("t"),
                "subject": prov.get("s"),
                "paths": list(prov.get("p", ())),
                "release": prov.get("r"),
            }
        out.append(ref)
    return out


def classify(
    rec: FileRecord, known: Mapping[str, DigestInfo], trust: Mapping[str, Trust]
) -> tuple[FileClass | None, list[dict[str, Any]]]:
    """The class the digests decide, with the upstreams that matched; None when only paths can tell.

    None means "no match": finalize makes it ``modified`` or ``added`` from the matched release's paths.
    """
    if rec.size == 0:
        return FileClass.EMPTY, []
    low_match: list[dict[str, Any]] | None = None
    for form, cls in _STEPS:
        info = known.get(_digest_of(rec, form))
        if info is None or form not in info.forms:
            continue
        high = {p for p in info.names if trust.get(p, Trust.HIGH) is Trust.HIGH}
        if high:
            return cls, upstream_refs(info, high)
        if low_match is None:
            low_match = upstream_refs(info)
    if low_match is not None:
        return FileClass.LOW_TRUST, low_match
    return None, []


def file_entry(
    rec: FileRecord, known: Mapping[str, DigestInfo], trust: Mapping[str, Trust]
) -> dict[str, Any]:
    """A file of the manifest: what the walker saw and the class its digests earn."""
    cls, refs = classify(rec, known, trust)
    entry: dict[str, Any] = {
        "path": rec.path,
        "size": rec.size,
        "sha256": rec.sha256,
        "kind": rec.kind,
        "class": cls.value if cls else None,
    }
    if refs:
        entry["upstream"] = refs
    if rec.unreadable:
        entry["unreadable"] = rec.unreadable
    if rec.link is not None:  # links and odd names: recorded by the walker, shown as they are
        entry["link"] = rec.link
    if rec.note:
        entry["note"] = rec.note
    return entry

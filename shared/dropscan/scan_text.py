"""A scan as one line of text: how far it has got (the CLI's status line, ``dropscan up``'s log) and,
once its manifest is written, what it found (pure: it reads a ``Scan`` or a manifest, nothing else)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dropscan.models import Scan

#: the classes of files whose content is upstream's (the rest: empty, low-trust, modified, added)
UPSTREAM_CLASSES = ("identical", "vcs-keywords", "whitespace")


def scan_progress(scan: Scan | None) -> str:
    """``unpacked 1 of 1 part: 2,835 files, 14.2 MB; looked up 1 of 1 chunk; triage 0 of 1 part``; while
    parts walk, how far they have got (``unpacking: 12,345 files, 512.0 MB``)."""
    if scan is None:
        return "waiting for the unpack"
    opened = len(scan.parts_open) if scan.parts_open is not None else 1
    closed = len(scan.parts_closed) if scan.parts_open is not None else int(scan.chunks_total is not None)
    members, unpacked = scan.unpacked_so_far()
    counts = f"{plural(members, 'file')}, {size_text(unpacked)}"
    if closed < opened:
        done = f" ({closed:,} of {opened:,} parts done)" if opened > 1 else ""
        said = [f"unpacking{done}: {counts}" if members else f"unpacking ({plural(opened, 'part')})"]
    else:
        said = [f"unpacked {closed:,} of {plural(opened, 'part')}: {counts}"]
    if scan.chunks_total:
        said.append(f"looked up {scan.chunks_done:,} of {plural(scan.chunks_total, 'chunk')}")
    if scan.finalized_at:
        parts = max(1, scan.triage_parts)
        said.append(f"triage {len(scan.triage_done):,} of {plural(parts, 'part')}")
    return "; ".join(said)


def scan_outcome(manifest: Mapping[str, Any]) -> str:
    """``complete, review: 2,835 files: 2,790 upstream, 30 modified, 15 added, 3 missing; 12 s``, or
    ``rejected: archive holds no files; less than a second``: a finished scan in one line."""
    status = manifest["status"]
    head = f"{status}, {manifest['verdict']}" if status == "complete" else status
    if manifest.get("reason"):
        head += f" ({manifest['reason']})"
    classes = (manifest.get("summary") or {}).get("classes") or {}
    files = int((manifest.get("summary") or {}).get("files") or 0)
    counts = [f"{sum(int(classes.get(c) or 0) for c in UPSTREAM_CLASSES):,} upstream"]
    counts += [f"{int(classes.get(c) or 0):,} {c}" for c in ("modified", "added")]
    if classes.get("low-trust"):
        counts.append(f"{int(classes['low-trust']):,} low-trust")
    missing = sum(len(c.get("missing") or ()) for c in manifest.get("components") or ())
    counts.append(f"{missing:,} missing")
    took = _seconds_between(manifest.get("created_at"), manifest.get("finished_at"))
    return f"{head}: {plural(files, 'file')}: {', '.join(counts)}" + (f"; {took}" if took else "")


def drop_name(key: str) -> str:
    """``acme/linux-6.1.tar.xz`` of ``drops/acme/linux-6.1.tar.xz``."""
    return key.removeprefix("drops/")


def duration_text(seconds: float) -> str:
    """``less than a second``, ``12 s``, ``3 min 5 s``."""
    if seconds < 1:
        return "less than a second"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def _seconds_between(start: str | None, end: str | None) -> str | None:
    if not start or not end:
        return None
    try:
        seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None
    return duration_text(max(0.0, seconds))


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def size_text(size: int) -> str:
    """``2.5 MB``, ``812 bytes``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size:,} bytes"

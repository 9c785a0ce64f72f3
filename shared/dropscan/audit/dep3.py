"""What a distribution's patch series says of itself: the DEP-3 headers (``Origin:``,
``Applied-Upstream:``, ``Forwarded:``), ``git format-patch`` headers (``From <commit>``, ``Subject:``)
and the commits a patch says it reverts, with the files each patch changes.

Pure: a series file and its patches' bytes in, statements out. Review evidence reports them beside its
own content check, never instead of it: a header is what a packager wrote, the hunks are what is there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: headers worth carrying into the evidence (lower-cased field names)
FIELDS = ("origin", "applied-upstream", "forwarded", "bug", "bug-debian", "author", "from")
_FIELD = re.compile(rb"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")
_FORMAT_PATCH = re.compile(rb"^From ([0-9a-f]{40}) Mon Sep 17 00:00:00 2001$")
#: "This reverts commit X", "Revert X", "effectively reverts ... commit X": commit ids named in the
#: description of a patch that says it reverts something
_REVERTS = re.compile(rb"\brevert", re.I)
_COMMIT_ID = re.compile(rb"\b([0-9a-f]{7,40})\b")
_TARGET = re.compile(rb"^\+\+\+ (?:b/|[^/\s]+/)?(\S+)", re.M)
#: the header ends where the diff begins
_DIFF_START = re.compile(rb"^(?:---(?: |$)|diff |Index: |\+\+\+ )", re.M)


@dataclass
class PatchInfo:
    """One patch of a series: its name, what its header states, the files it changes."""

    name: str
    subject: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    commit: str | None = None  # git format-patch's own commit line
    reverts: list[str] = field(default_factory=list)  # commit ids it says it reverts
    files: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"patch": self.name, "subject": self.subject}
        out |= {k.replace("-", "_"): v for k, v in self.fields.items()}
        if self.commit:
            out["format_patch_commit"] = self.commit
        if self.reverts:
            out["states_reverts"] = self.reverts
        return out


def series_names(series: bytes) -> list[str]:
    """The patches a quilt ``series`` file lists, in order (comments and options left out)."""
    out: list[str] = []
    for raw in series.splitlines():
        line = raw.split(b"#", 1)[0].strip()
        if line:
            out.append(line.split()[0].decode("utf-8", "replace"))
    return out


def parse(name: str, data: bytes) -> PatchInfo:
    """A patch's header statements and the files it changes (paths without ``a/``/``b/``)."""
    cut = _DIFF_START.search(data)
    header = data[: cut.start()] if cut else data
    info = PatchInfo(name)
    last: str | None = None
    description: list[bytes] = []
    for raw in header.splitlines():
        fp = _FORMAT_PATCH.match(raw)
        if fp:
            info.commit = fp.group(1).decode()
            continue
        m = _FIELD.match(raw)
        if m and not raw.startswith((b" ", b"\t")):
            key, value = m.group(1).decode().lower(), m.group(2).decode("utf-8", "replace").strip()
            last = key
            if key in ("subject", "description"):
                info.subject = value.removeprefix("[PATCH] ").strip() or info.subject
            elif key in FIELDS:
                info.fields[key] = value
            continue
        if raw[:1] in (b" ", b"\t") and raw.strip() and last is not None:  # a folded header
            more = raw.decode("utf-8", "replace").strip()
            if last == "subject" and info.subject is not None:
                info.subject = f"{info.subject} {more}"
                continue
            if last in info.fields:
                info.fields[last] = f"{info.fields[last]} {more}".strip()
                continue
        last = None
        description.append(raw)
    text = b"\n".join([(info.subject or "").encode(), *description])
    if _REVERTS.search(text):
        found = [m.decode() for m in _COMMIT_ID.findall(text) if re.search(rb"[a-f]", m)]
        info.reverts = [c for i, c in enumerate(found) if c not in found[:i]]
    info.files = [m.decode("utf-8", "replace") for m in _TARGET.findall(data[cut.start() :] if cut else b"")]
    return info


def statements(series: bytes, patches: Mapping[str, bytes]) -> dict[str, list[dict[str, Any]]]:
    """Source path (as the patches name it) -> what each patch of the series changing it states, in
    series order; ``patches``: the patches' bytes by name (a missing one is left out)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in series_names(series):
        data = patches.get(name)
        if data is None:
            continue
        info = parse(name, data)
        for path in dict.fromkeys(info.files):
            out.setdefault(path, []).append(info.to_json())
    return out

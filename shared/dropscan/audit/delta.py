"""What changed since the supplier's previous drop of the same product. Pure: no data access.

A drop's *product* is its upload's ``product`` metadata, or its file name with the version-like parts
removed (``acme-busybox-1.35.1-gpl.tar.gz`` -> ``acme-busybox-gpl``). Files are compared by their path
inside their component, the top folder ignored as components are: an identified component's files by
its upstream package (``busybox-1.35.0-acme/x.c`` and ``busybox-1.35.1-acme/x.c`` are one file), an
unidentified folder's by its name without version-like parts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dropscan.keys import archive_stem

INDEX_FORMAT = "dropscan.file-index/1"
_SEPARATORS = re.compile(r"[-_ ]+")
_VERSIONISH = re.compile(r"^v?\d[\w.+~]*$|^(?:rc|beta|alpha|pre)\d*$", re.IGNORECASE)

#: path in its component -> (sha256, path in the drop)
Index = dict[str, tuple[str, str]]
#: the same read back from its JSON, or as built: each entry (sha256, path in the drop)
Stored = Mapping[str, Sequence[str]]


def split_name(name: str) -> tuple[str, str | None]:
    """(product, version) of a drop's or folder's name: version-like words out, the rest kept."""
    words = [w for w in _SEPARATORS.split(archive_stem(name)) if w]
    rest = [w for w in words if not _VERSIONISH.match(w)]
    version = [w for w in words if _VERSIONISH.match(w)]
    return ("-".join(rest) or archive_stem(name)).lower(), "-".join(version) or None


def product_of(key: str, metadata: Mapping[str, Any] | None = None) -> str:
    """The product a drop is a release of: declared (``x-amz-meta-product``) or from its name."""
    declared = str((metadata or {}).get("product") or "").strip()
    return declared or split_name(key)[0]


def version_of(key: str, metadata: Mapping[str, Any] | None = None) -> str | None:
    """The drop's version, as its name or ``x-amz-meta-version`` says, for "6 new since 3.2.0"."""
    declared = str((metadata or {}).get("version") or "").strip()
    return declared or split_name(key)[1]


def index_of(files: Iterable[Mapping[str, Any]], components: Iterable[Mapping[str, Any]]) -> Index:
    """Each file's place in its component (the top folder ignored) -> its content and drop path."""
    names = {
        str(c["prefix"]): str(c["package"])
        if c.get("identified") and c.get("package")
        else split_name(str(c["prefix"]).rstrip("/"))[0]
        for c in components
    }
    heads: dict[str, str] = {}  # component prefix -> its files' key prefix, worked out once
    out: Index = {}
    for f in files:
        if f.get("unreadable"):
            continue
        prefix = str(f.get("component", ""))
        path = str(f["path"])
        head = heads.get(prefix)
        if head is None:
            head = heads[prefix] = f"{names.get(prefix, prefix)}/"
        inner = path[len(prefix) :] if prefix and path.startswith(prefix) else path
        out[head + inner] = (str(f["sha256"]), path)
    return out


def index_to_json(index: Index) -> dict[str, Any]:
    # json writes the (sha256, path) tuples as arrays: no copy of a kernel's 80,000 entries
    return {"format": INDEX_FORMAT, "files": index}


def index_from_json(data: Mapping[str, Any]) -> Stored:
    """A stored file index, as parsed: each entry the ``[sha256, path]`` list ``index_to_json`` wrote."""
    if data.get("format") != INDEX_FORMAT:
        raise ValueError(f"not a file index (format {data.get('format')!r}, want {INDEX_FORMAT})")
    files: Stored = data["files"]
    return files


def compare(previous: Stored, current: Stored, ref: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's ``delta``: paths new in this drop, changed in content, and removed (the previous
    drop's paths), each sorted; ``ref`` names the previous scan."""
    now, before = current.keys(), previous.keys()
    new = sorted(current[k][1] for k in now - before)
    removed = sorted(previous[k][1] for k in before - now)
    changed = []
    for k, (sha, path) in current.items():
        was = previous.get(k)
        if was is not None and was[0] != sha:
            changed.append(path)
    changed.sort()
    return {"previous": dict(ref), "new": new, "changed": changed, "removed": removed}


def counts(delta: Mapping[str, Any] | None) -> dict[str, int] | None:
    """What the summary says of a delta: how many paths are new, changed and removed."""
    if not delta:
        return None
    return {k: len(delta[k]) for k in ("new", "changed", "removed")}


def outcome(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What the scans table keeps of a finished scan for ``dropscan history``: verdict and counts."""
    s = manifest.get("summary") or {}
    d = counts(manifest.get("delta")) or {}
    meta = (manifest.get("source") or {}).get("metadata") or {}
    row: dict[str, Any] = {
        "verdict": manifest.get("verdict"),
        "files": int(s.get("files") or 0),
        "review": int(s.get("review") or 0),
        "cleared": int(s.get("cleared") or 0),
    }
    version = version_of(str((manifest.get("source") or {}).get("key") or ""), meta)
    if version:
        row["version"] = version
    if manifest.get("delta"):
        row |= d | {"previous": manifest["delta"]["previous"]["scan_id"]}
    return row

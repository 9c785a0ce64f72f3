"""A scan's desk index: what the review desk reads of a manifest, written beside it so that no request
parses the whole manifest (a 120,000-file drop's is 78 MB). Pure: a manifest in, bytes out; bytes in,
the desk's values out.

Two objects beside the manifest, ``results/<supplier>/<scan id>/`` (:func:`dropscan.keys.desk_index_keys`):

- ``desk.index.json``: the manifest's ETag it was made from, the page's head (supplier, verdict, summary,
  delta counts, components, flag kinds, report keys), the review rows as columns (one list a field)
  and every file's path, class and place in ``desk.files.jsonl``;
- ``desk.files.jsonl``: one line a file, in the manifest's order: the file's record, its red flags, how many
  files share its content and the upstream commits its evidence cites. A file's page reads its line
  with one ranged GET.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from dropscan.audit.decision_rules import flag_id, licence_ids
from dropscan.audit.delta import counts
from dropscan.reports import view
from dropscan.web import review

SCHEMA = "dropscan.desk-index/1"
#: the head keys of a manifest a scan page shows
HEAD_KEYS = ("scan_id", "supplier", "status", "verdict", "created_at", "finished_at", "source", "summary")
#: the review row's fields kept as columns (the rest are derived from them)
COLUMNS = ("path", "sha256", "cls", "component", "flags", "severity", "licences", "state", "by", "at")


@dataclass(frozen=True)
class Built:
    index: bytes
    files: bytes


def build(manifest: Mapping[str, Any], manifest_etag: str) -> Built:
    """The two objects of ``manifest``'s index; ``manifest_etag`` is the ETag it was stored under."""
    files: Sequence[Mapping[str, Any]] = manifest["files"]
    flags_at: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for fl in view.flags(manifest):
        flags_at[str(fl.get("path") or "")].append(fl)
    copies = Counter(str(f["sha256"]) for f in files)
    commits = view.cited_commits(manifest)
    lines: list[bytes] = []
    places: list[list[int]] = []
    at = 0
    for f in files:
        cited = {
            str(h["commit"]): commits.get(str(h["commit"])) or {}
            for h in (view.evidence(f) or {}).get("hunks") or []
            if h.get("commit")
        }
        line = orjson.dumps(
            {
                "f": f,
                "flags": flags_at.get(str(f["path"]), []),
                "copies": copies[str(f["sha256"])],
                "commits": cited,
            }
        )
        lines.append(line + b"\n")
        places.append([at, len(line)])
        at += len(line) + 1
    rows = review.rows(manifest)
    decided = {r.path: r for r in rows}
    by_path = {str(f["path"]): f for f in files if str(f["path"]) in decided}
    columns: dict[str, list[Any]] = {c: [getattr(r, c) for r in rows] for c in COLUMNS}
    # what a decision keeps of each review file (dropscan.audit.decision_rules.record)
    columns["flag_ids"] = [sorted({flag_id(fl) for fl in flags_at.get(r.path, [])}) for r in rows]
    columns["licence_ids"] = [sorted(licence_ids(by_path[r.path])) for r in rows]
    delta = manifest.get("delta")
    head = {k: manifest.get(k) for k in HEAD_KEYS}
    head |= {
        "reports": dict(manifest.get("reports") or {}),
        "components": review.components(manifest),
        "flag_kinds": sorted({str(fl.get("kind")) for fl in manifest.get("flags") or []}),
        "delta": ((counts(delta) or {}) | {"previous": delta.get("previous")}) if delta else None,
    }
    index = {
        "schema": SCHEMA,
        "manifest_etag": manifest_etag,
        "head": head,
        "rows": columns,
        "files": {
            "path": [str(f["path"]) for f in files],
            "class": [str(f["class"]) for f in files],
            "place": places,
        },
    }
    return Built(index=orjson.dumps(index), files=b"".join(lines))


class Index:
    """A parsed index: the head, the review rows (built once, kept with their orders) and where each
    file's line is."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a desk index: {data.get('schema')!r}")
        self.manifest_etag = str(data["manifest_etag"])
        self.head: dict[str, Any] = dict(data["head"])
        self._rows: Mapping[str, list[Any]] = data["rows"]
        self._files: Mapping[str, list[Any]] = data["files"]

    @classmethod
    def parse(cls, body: bytes) -> Index:
        return cls(orjson.loads(body))

    @cached_property
    def rows(self) -> list[review.Row]:
        c = self._rows
        out = []
        for path, sha, cls, component, flags, severity, licences, state, by, at in zip(
            *(c[k] for k in COLUMNS), strict=True
        ):
            kinds = tuple(flags)
            out.append(
                review.Row(
                    path=path,
                    sha256=sha,
                    cls=cls,
                    component=component,
                    folder=view.folder(path),
                    flags=kinds,
                    severity=severity,
                    licences=tuple(licences),
                    state=state,
                    by=by,
                    at=at,
                    component_key=component or "(top level)",
                    flag_key=kinds[0] if kinds else "(no flag)",
                )
            )
        return out

    @cached_property
    def orders(self) -> review.Orders:
        return review.Orders(self.rows)

    @cached_property
    def _at(self) -> dict[str, int]:
        return {p: i for i, p in enumerate(self._files["path"])}

    def place(self, path: str) -> tuple[int, int] | None:
        """(offset, length) of the file's line in ``desk.files.jsonl``; None for a path not in the drop."""
        i = self._at.get(path)
        if i is None:
            return None
        offset, length = self._files["place"][i]
        return int(offset), int(length)

    def decision_manifest(self) -> dict[str, Any]:
        """As much of the manifest as :func:`dropscan.audit.decision_rules.record` reads: every review
        file with its licences and flags; the other files by path, marked outside the review set."""
        c = self._rows
        review_paths = set(c["path"])
        files: list[dict[str, Any]] = [
            {"path": p, "sha256": s, "class": cls, "licenses": [{"expression": x} for x in lic]}
            for p, s, cls, lic in zip(c["path"], c["sha256"], c["cls"], c["licence_ids"], strict=True)
        ]
        files += [
            {"path": p, "sha256": "", "class": cls, "unreadable": True}
            for p, cls in zip(self._files["path"], self._files["class"], strict=True)
            if p not in review_paths
        ]
        flags = [
            {"path": p, "kind": kind, "detail": detail}
            for p, ids in zip(c["path"], c["flag_ids"], strict=True)
            for kind, _, detail in (i.partition(": ") for i in ids)
        ]
        return {
            "supplier": self.head["supplier"],
            "scan_id": self.head["scan_id"],
            "files": files,
            "flags": flags,
        }


def parse_line(body: bytes) -> dict[str, Any]:
    """One file's line of ``desk.files.jsonl``: ``f``, ``flags``, ``copies``, ``commits``."""
    data: dict[str, Any] = orjson.loads(body)
    return data

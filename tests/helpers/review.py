"""A review set built in memory: a complete manifest of all-added files, and a detector that counts."""

from __future__ import annotations

import hashlib
from typing import Any

from dropscan.audit.licenses import LicenseFinding, TagDetector
from dropscan.audit.manifest import build_manifest

LICENSED = b"/* SPDX-License-Identifier: Apache-2.0 */\nint helper(void);\n"
RESTRICTED = b"/* For non-commercial use only. */\nint helper(void);\n"


class CountingDetector(TagDetector):
    """The tags detector, counting the texts it is given (to show each content is detected once)."""

    name = "spdx-tags"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def detect(self, text: str, *, thorough: bool = False) -> list[LicenseFinding]:
        self.texts.append(text)
        return super().detect(text, thorough=thorough)


def record(path: str, data: bytes, cls: str = "added") -> dict[str, Any]:
    return {
        "path": path,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "kind": "text",
        "class": cls,
    }


def manifest_of(contents: dict[str, bytes], *, copying: bytes | None = None) -> dict[str, Any]:
    """A complete manifest of ``contents`` (path -> bytes) under the component ``bsp/``, all added."""
    files = [record(p, d) for p, d in contents.items()]
    if copying is not None:
        files.append(record("bsp/COPYING", copying, "identical"))
    for f in files:
        f["component"] = "bsp/"
    classes = {c: 0 for c in ("empty", "identical", "vcs-keywords", "whitespace", "low-trust", "modified")}
    component: dict[str, Any] = {
        "prefix": "bsp/",
        "package": None,
        "version": None,
        "identified": False,
        "match_pct": 0.0,
        "files": len(files),
        "classes": classes | {"added": len(contents), "identical": 1 if copying else 0},
        "missing": [],
    }
    return build_manifest(
        scan_id="s-" + "0" * 24,
        supplier="acme",
        source={"bucket": "b", "key": "drops/acme/bsp.tar.gz", "size": 1, "sha256": "0" * 64},
        status="complete",
        reason=None,
        files=files,
        components=[component],
        mismatches=[],
        stats={"seconds": {}},
        created_at="2026-12-05T00:00:00+00:00",
        finished_at="2026-12-05T00:01:00+00:00",
    )

"""Reports rendered from a manifest: plain text, static HTML, SPDX 2.3 and CycloneDX 1.6 JSON."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any


class ManifestError(ValueError):
    """A file that is not a readable dropscan manifest; the message is one line for the user."""


@dataclass(frozen=True)
class Format:
    name: str
    module: str  # imported on first use: spdx-tools and cyclonedx take a second to import
    suffix: str
    media_type: str

    def renderer(self) -> Callable[[Mapping[str, Any]], str]:
        render: Callable[[Mapping[str, Any]], str] = import_module(self.module).render
        return render


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("text", "dropscan.reports.text", ".txt", "text/plain; charset=utf-8"),
        Format("html", "dropscan.reports.html", ".html", "text/html; charset=utf-8"),
        Format("spdx", "dropscan.reports.spdx", ".spdx.json", "application/spdx+json"),
        Format("cyclonedx", "dropscan.reports.cyclonedx", ".cdx.json", "application/vnd.cyclonedx+json"),
    )
}


def render(manifest: Mapping[str, Any], fmt: str) -> str:
    """The report ``fmt`` (a key of FORMATS) of ``manifest``."""
    return FORMATS[fmt].renderer()(manifest)


def render_all(manifest: Mapping[str, Any], formats: Iterable[str], *, workers: int = 1) -> dict[str, str]:
    """Every report of ``formats``. With ``workers`` > 1 the File elements of SPDX, the slowest (5 s of a
    kernel drop's 7), are made in that many forked children while this process renders the others."""
    wanted = list(formats)
    if workers < 2 or "spdx" not in wanted:
        return {fmt: render(manifest, fmt) for fmt in wanted}
    from dropscan.reports.spdx import Rendering

    with Rendering(manifest, parts=workers) as spdx:
        out = {fmt: render(manifest, fmt) for fmt in wanted if fmt != "spdx"}
        out["spdx"] = spdx.text()
    return {fmt: out[fmt] for fmt in wanted}


def load_manifest(path: Path) -> dict[str, Any]:
    """The manifest at ``path`` (JSON, or gzip-compressed JSON), checked against the manifest schema."""
    import jsonschema

    from dropscan.audit.manifest import validate

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(f"no such manifest: {path}") from None
    except OSError as e:
        raise ManifestError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, EOFError, ValueError) as e:
        raise ManifestError(f"{path}: not a JSON manifest: {_first_line(str(e))}") from None
    try:
        validate(data)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "top level"
        raise ManifestError(f"{path}: not a dropscan manifest ({where}): {_first_line(e.message)}") from None
    if not isinstance(data, dict):  # the schema says object; this keeps the type checker informed
        raise ManifestError(f"{path}: not a dropscan manifest")
    return data


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return line if len(line) <= limit else line[: limit - 1] + "…"

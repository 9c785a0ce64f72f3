"""Reports rendered from a manifest: plain text, static HTML, SPDX 2.3 and CycloneDX 1.6 JSON."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any


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

"""The plain-text report: the e-mail's subject and body, as `dropscan scan` prints them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dropscan.reports.summary import body, subject


def render(manifest: Mapping[str, Any]) -> str:
    return f"{subject(manifest)}\n\n{body(manifest)}"

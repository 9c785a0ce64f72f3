"""Licence detection in one file's text: SPDX-License-Identifier tags and, where installed, ScanCode."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any, Protocol

from license_expression import ExpressionError, Licensing, get_spdx_licensing

from dropscan import heap

#: ScanCode licence categories that grant no right to redistribute as part of a GPL product
RESTRICTED_CATEGORIES = frozenset({"Commercial", "Proprietary Free", "Source-available", "Free Restricted"})

_TAG = re.compile(r"SPDX-License-Identifier:\s*(?P<expr>[^\n*]*?)\s*(?:\*/|-->|$)", re.MULTILINE)
# ScanCode's licence index is slow and big to load (docs/design.md): per file, cap what it reads.
SCANCODE_DEADLINE = 10.0  # seconds per file; ScanCode's own CLI default is 120 s for a whole file scan
#: a finding keeps this much of the text it was found in
EVIDENCE_CHARS = 500


@dataclass(frozen=True, slots=True)
class LicenseFinding:
    expression: str  # SPDX expression (LicenseRef-scancode-* for licences SPDX has no id for)
    source: str  # "spdx-tag" | "scancode"
    line: int
    end_line: int
    text: str  # the tag, or the text ScanCode matched
    confidence: float  # 0..100
    category: str | None = None  # ScanCode's category (Copyleft, Permissive, Commercial, ...)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if out["category"] is None:
            del out["category"]
        return out


class Detector(Protocol):
    name: str

    def detect(self, text: str, *, thorough: bool = False) -> list[LicenseFinding]: ...


@cache
def spdx_licensing() -> Licensing:
    return get_spdx_licensing()


def normalise_expression(expression: str) -> tuple[str, bool]:
    """(SPDX-normalised expression, valid?) — invalid tags are kept verbatim and reported as such."""
    licensing = spdx_licensing()
    try:
        info = licensing.validate(expression, strict=False)
    except ExpressionError:
        return expression, False
    if info.errors or info.invalid_symbols:
        return expression, False
    return str(info.normalized_expression or expression), True


def spdx_tags(text: str) -> list[LicenseFinding]:
    """Every ``SPDX-License-Identifier:`` tag with its line; an unknown id lowers the confidence."""
    found = []
    for m in _TAG.finditer(text):
        raw = m.group("expr").strip()
        if not raw:
            continue
        expression, valid = normalise_expression(raw)
        line = text.count("\n", 0, m.start()) + 1
        found.append(
            LicenseFinding(
                expression=expression,
                source="spdx-tag",
                line=line,
                end_line=line,
                text=f"SPDX-License-Identifier: {raw}",
                confidence=100.0 if valid else 50.0,
            )
        )
    return found


class TagDetector:
    """SPDX tags only: what runs where ScanCode is not installed."""

    name = "spdx-tags"

    def detect(self, text: str, *, thorough: bool = False) -> list[LicenseFinding]:
        return spdx_tags(text)


class ScancodeDetector:
    """ScanCode Toolkit's licence detection, in process (its index is loaded once per process)."""

    def __init__(self) -> None:
        from licensedcode.cache import get_index, get_licenses_db

        with heap.building(keep=True):
            self._index = get_index()
            self._db = get_licenses_db()
        self.name = f"scancode-toolkit {_scancode_version()}"

    def detect(self, text: str, *, thorough: bool = False) -> list[LicenseFinding]:
        """Exact matching (whole-text hash, rule automaton, SPDX ids) unless ``thorough``.

        On BusyBox's 207-file review set exact matching takes 5.9 s and finds a licence in the same
        133 files as a full ScanCode run; the approximate matcher costs 1.5-5 s per file. Licence
        files (COPYING, LICENSE) are read ``thorough``: their text may be a lightly edited licence.
        """
        found = spdx_tags(text)
        tagged = {(f.line, f.expression) for f in found}
        deadline = time.time() + SCANCODE_DEADLINE
        for offset, region in self._regions(text, thorough, deadline):
            found += self._findings(region, offset, thorough, deadline, tagged)
        return found

    def _regions(self, text: str, thorough: bool, deadline: float) -> Iterator[tuple[int, str]]:
        """(lines before it, text) of each stretch of ``text`` where exact matching finds licences.

        ScanCode's detection step (false-positive and extra-words analysis) tokenises the whole text
        again for the matched text of each detection: four fifths of exact matching's time on the
        kernel drop's review set, where a typical file has a header and a MODULE_LICENSE line. Detecting
        again within the lines of each group of matches costs a fraction; licence files (``thorough``)
        are read whole, as the approximate matcher would run twice.
        """
        from licensedcode.detection import group_matches

        if thorough:
            yield 0, text
            return
        matches = self._index.match(query_string=text, deadline=deadline, approximate=False)
        if not matches:
            return
        spans: list[list[int]] = []
        for first, last in sorted(
            (min(m.start_line for m in g), max(m.end_line for m in g)) for g in group_matches(matches)
        ):
            if spans and first <= spans[-1][1]:  # groups sharing a line are detected together, once
                spans[-1][1] = max(spans[-1][1], last)
            else:
                spans.append([first, last])
        lines = text.splitlines(keepends=True)  # numbered as ScanCode numbers them
        for first, last in spans:
            yield first - 1, "".join(lines[first - 1 : last])

    def _findings(
        self, text: str, offset: int, thorough: bool, deadline: float, tagged: set[tuple[int, str]]
    ) -> list[LicenseFinding]:
        from licensedcode.detection import detect_licenses

        found = []
        lines: list[str] | None = None
        detections = detect_licenses(
            index=self._index, query_string=text, deadline=deadline, approximate=thorough
        )
        for detection in detections:
            for match in detection.matches:
                start, end = match.lines()
                spdx = self._spdx(match.rule.license_expression)
                if (start + offset, spdx) in tagged:
                    continue  # ScanCode reads the same tag: keep the tag's finding
                if lines is None:
                    lines = text.splitlines()
                found.append(
                    LicenseFinding(
                        expression=spdx,
                        source="scancode",
                        line=start + offset,
                        end_line=end + offset,
                        text=_evidence(lines, start, end),
                        confidence=round(float(match.score()), 1),
                        category=self._category(match.rule.license_expression),
                    )
                )
        return found

    def _keys(self, expression: str) -> list[str]:
        return list(spdx_licensing().license_keys(expression))

    def _spdx(self, scancode_expression: str) -> str:
        from licensedcode.cache import build_spdx_license_expression

        return str(build_spdx_license_expression(scancode_expression))

    def _category(self, scancode_expression: str) -> str | None:
        cats = [self._db[k].category for k in self._keys(scancode_expression) if k in self._db]
        restricted = [c for c in cats if c in RESTRICTED_CATEGORIES]
        first: str | None = (restricted or cats or [None])[0]
        return first


def _evidence(lines: list[str], start: int, end: int) -> str:
    """The lines a match spans, blanks collapsed, at most EVIDENCE_CHARS.

    Whole lines rather than ``match.matched_text()``'s tokens: a restriction's kind is told from this
    text, and "Commercial use" alone hides the "non-commercial use only" of its line.
    """
    span = " ".join(lines[start - 1 : end])
    return " ".join(span.split())[:EVIDENCE_CHARS]


def _scancode_version() -> str:
    from importlib.metadata import version

    return version("scancode-toolkit")


def scancode_available() -> bool:
    try:
        import licensedcode.detection  # noqa: F401
    except Exception:  # ImportError, or plugincode failing to start under a newer pluggy
        return False
    return True


@cache
def detector(choice: str = "auto") -> Detector:
    """``scancode`` (fail if missing), ``tags``, or ``auto`` (ScanCode when it can run)."""
    if choice not in ("auto", "scancode", "tags"):
        raise ValueError(f"unknown licence detector {choice!r}: auto, scancode or tags")
    if choice == "tags" or (choice == "auto" and not scancode_available()):
        return TagDetector()
    return ScancodeDetector()


def expressions(findings: Iterable[LicenseFinding]) -> list[str]:
    return sorted({f.expression for f in findings})

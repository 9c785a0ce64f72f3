"""Licence expressions of an SPDX document: spdx-tools objects, with every id off the SPDX License List
declared as a LicenseRef (SPDX 2.3 clause 10)."""

from __future__ import annotations

import re
from functools import cache
from typing import TypeAlias

from license_expression import ExpressionError, LicenseExpression
from spdx_tools.common.spdx_licensing import spdx_licensing
from spdx_tools.spdx.model.extracted_licensing_info import ExtractedLicensingInfo
from spdx_tools.spdx.model.spdx_no_assertion import SpdxNoAssertion
from spdx_tools.spdx.model.spdx_none import SpdxNone

LicenceValue: TypeAlias = LicenseExpression | SpdxNoAssertion | SpdxNone


class Licences:
    """Licence expressions as spdx-tools objects; ids off the SPDX list become declared LicenseRefs."""

    def __init__(self) -> None:
        self.extracted: dict[str, ExtractedLicensingInfo] = {}

    def expression(self, text: str, *, evidence: str | None = None, where: str = "") -> LicenceValue:
        text = text.strip()
        if text.upper() == "NOASSERTION":
            return SpdxNoAssertion()
        if text.upper() == "NONE":
            return SpdxNone()
        rewritten, refs = _rewrite(text)
        for ref, original in refs:
            if ref not in self.extracted:
                self.extracted[ref] = ExtractedLicensingInfo(
                    license_id=ref,
                    extracted_text=evidence or original,
                    license_name=original,
                    comment=f"Not on the SPDX License List; first found {where}".rstrip() + ".",
                )
        return _parse(rewritten)


@cache
def _parse(text: str) -> LicenseExpression:
    parsed: LicenseExpression = spdx_licensing.parse(text)
    return parsed


@cache
def _rewrite(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``text`` with every id off the SPDX list as a LicenseRef, and each LicenseRef with what it stands for.

    SPDX 2.3 clause 10 wants every LicenseRef of a document described in it, so the caller declares them.
    An expression that does not parse becomes one LicenseRef standing for the whole text.
    """
    try:
        parsed = spdx_licensing.parse(text)
    except ExpressionError:
        parsed = None
    if parsed is None:
        ref = _ref_name(text)
        return ref, ((ref, text),)
    out, names = text, {}
    for key in spdx_licensing.unknown_license_keys(parsed):
        if not key.startswith("LicenseRef-"):
            ref = _ref_name(key)
            out = re.sub(rf"(?<![\w.+:-]){re.escape(key)}(?![\w.+:-])", ref, out)
            names[ref] = key
    refs = [k for k in spdx_licensing.license_keys(_parse(out)) if k.startswith("LicenseRef-")]
    return out, tuple((ref, names.get(ref, ref)) for ref in dict.fromkeys(refs))


def _ref_name(text: str) -> str:
    return "LicenseRef-" + (re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "unknown")

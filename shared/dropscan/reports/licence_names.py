"""What a licence id means to a reader: ``GPL-2.0-only`` is "GNU General Public License v2.0 only";
ScanCode's own ids (``LicenseRef-scancode-…``) also say what ScanCode means by them.

The ids dropscan's reports show most are named here, so that the notify function (no ScanCode in its
package) names them too; any other id is looked up in ScanCode's licence data where it is installed
(the triage image, a development environment), else shown as it is.
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path

SCANCODE_PREFIX = "LicenseRef-scancode-"

NAMES = {
    "0BSD": "BSD Zero Clause License",
    "AGPL-3.0-only": "GNU Affero General Public License v3.0 only",
    "AGPL-3.0-or-later": "GNU Affero General Public License v3.0 or later",
    "Apache-2.0": "Apache License 2.0",
    "Artistic-2.0": "Artistic License 2.0",
    "BSD-2-Clause": 'BSD 2-Clause "Simplified" License',
    "BSD-3-Clause": 'BSD 3-Clause "New" or "Revised" License',
    "BSD-4-Clause": 'BSD 4-Clause "Original" or "Old" License',
    "BSL-1.0": "Boost Software License 1.0",
    "CC0-1.0": "Creative Commons Zero v1.0 Universal (public domain dedication)",
    "CC-BY-4.0": "Creative Commons Attribution 4.0 International",
    "EPL-2.0": "Eclipse Public License 2.0",
    "GPL-1.0-or-later": "GNU General Public License v1.0 or later",
    "GPL-2.0-only": "GNU General Public License v2.0 only",
    "GPL-2.0-or-later": "GNU General Public License v2.0 or later",
    "GPL-3.0-only": "GNU General Public License v3.0 only",
    "GPL-3.0-or-later": "GNU General Public License v3.0 or later",
    "GCC-exception-2.0": "GCC Runtime Library exception 2.0",
    "ISC": "ISC License",
    "LGPL-2.0-only": "GNU Library General Public License v2 only",
    "LGPL-2.0-or-later": "GNU Library General Public License v2 or later",
    "LGPL-2.1-only": "GNU Lesser General Public License v2.1 only",
    "LGPL-2.1-or-later": "GNU Lesser General Public License v2.1 or later",
    "LGPL-3.0-only": "GNU Lesser General Public License v3.0 only",
    "LGPL-3.0-or-later": "GNU Lesser General Public License v3.0 or later",
    "Linux-syscall-note": "Linux Syscall Note (user space may use the kernel's system calls freely)",
    "MIT": "MIT License",
    "MPL-2.0": "Mozilla Public License 2.0",
    "OpenSSL": "OpenSSL License",
    "Python-2.0": "Python License 2.0",
    "PSF-2.0": "Python Software Foundation License 2.0",
    "Unlicense": "The Unlicense",
    "X11": "X11 License",
    "Zlib": "zlib License",
    "curl": "curl License",
    "bzip2-1.0.6": "bzip2 and libbzip2 License v1.0.6",
    "eCos-exception-2.0": "eCos exception 2.0",
}

#: ScanCode's own ids: what it found, in a reader's words
SCANCODE_MEANINGS = {
    "unknown-license-reference": 'a reference to a licence ("see LICENSE", "licensed under…") that'
    " ScanCode could not resolve to a named licence",
    "unknown": "text that looks like a licence but matches none ScanCode knows",
    "unknown-spdx": "an SPDX-License-Identifier tag naming no licence on the SPDX list",
    "free-unknown": "a free licence ScanCode could not name precisely",
    "proprietary-license": "a proprietary notice: rights reserved, no open licence granted",
    "commercial-license": "commercial terms: use needs a paid or negotiated licence",
    "other-permissive": "a permissive licence not in ScanCode's list of named ones",
    "other-copyleft": "a copyleft licence not in ScanCode's list of named ones",
    "public-domain": "a dedication to the public domain",
    "public-domain-disclaimer": "a public-domain dedication with a warranty disclaimer",
    "warranty-disclaimer": "a warranty disclaimer alone, granting no licence",
    "generic-cla": "a contributor licence agreement",
    "generic-exception": "a licence exception ScanCode could not name precisely",
    "generic-export-compliance": "an export-control notice",
    "gpl-generic-additional-terms": "additional terms attached to a GPL",
    "gary-s-brown": "Gary S. Brown's CRC-32 notice (use it freely)",
}


def licence_name(licence_id: str) -> str | None:
    """The human name of one licence id (an SPDX id or ``LicenseRef-scancode-<key>``), or None."""
    if licence_id in NAMES:
        return NAMES[licence_id]
    if licence_id.startswith(SCANCODE_PREFIX):
        key = licence_id[len(SCANCODE_PREFIX) :]
        meaning = SCANCODE_MEANINGS.get(key)
        named = _scancode_name(key)
        if meaning:
            return f"ScanCode: {meaning}"
        return f"ScanCode's licence {named!r}" if named else "a licence of ScanCode's own database"
    return _scancode_name(licence_id)


def described(expression: str) -> str:
    """``GPL-2.0-only (GNU General Public License v2.0 only)``: the expression, then :func:`names_of`."""
    names = names_of(expression)
    return f"{expression} ({names})" if names else expression


def names_of(expression: str) -> str | None:
    """The name of a one-id expression; each id's for more: ``MIT: MIT License; Apache-2.0: …``."""
    ids = list(dict.fromkeys(re.findall(r"[A-Za-z0-9][A-Za-z0-9.+-]*", expression)))
    ids = [i for i in ids if i.upper() not in ("AND", "OR", "WITH")]
    names = {i: licence_name(i) for i in ids}
    if len(ids) == 1:
        return names[ids[0]]
    said = [f"{i}: {n}" for i, n in names.items() if n]
    return "; ".join(said) or None


@cache
def _licences_dir() -> Path | None:
    spec = importlib.util.find_spec("licensedcode")  # found, not imported: that takes seconds
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data" / "licenses"
    return folder if folder.is_dir() else None


@cache
def _scancode_name(key: str) -> str | None:
    """``name:`` of ScanCode's licence file for ``key`` (its keys are lower case), if installed."""
    folder = _licences_dir()
    if folder is None:
        return None
    path = folder / f"{key.lower()}.LICENSE"
    if not path.is_file():
        return None
    head = path.read_text(encoding="utf-8", errors="replace").split("\n---", 2)[0]  # the front matter
    found = re.search(r"^name: *(.+)$", head, re.MULTILINE)
    return found.group(1).strip() if found else None

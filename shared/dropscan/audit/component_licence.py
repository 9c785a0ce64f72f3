"""A component's licence, found where the component keeps it, and where its upstream release keeps it.

The component's root is its top folder, inside a nested archive too (``a.tar.bz2!/busybox-1.35.0/``).
At that root, in this order: licence files (COPYING, LICENSE*, LICENCE*), U-Boot's ``Licenses/README``,
REUSE's ``.reuse/dep5`` (its ``Files: *`` stanza) or a single ``LICENSES/<id>.txt``, and a Debian
source tree's machine-readable ``debian/copyright``. A component identified as an upstream release takes
the licence recorded for that release when it was ingested (:func:`release_record`): a supplier cannot
change it by editing the drop's COPYING, and such an edit is itself a flag (``license-file-changed``).
Pure rules: the stages read the bytes and the release records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dropscan.audit.licenses import RESTRICTED_CATEGORIES, Detector, LicenseFinding, normalise_expression

NESTED = "!/"
#: single top folders stripped to find a component's root (``pkg.tar.gz!/pkg-1.0/``, ``vendor/pkg-1.0/``)
MAX_ROOT_DEPTH = 3
#: a detection below this confidence does not tell a component's licence
MIN_CONFIDENCE = 80

# where a component's licence is stated, most direct first
LICENCE_FILE = "licence-file"
LICENSES_README = "licenses-readme"
REUSE_DEP5 = "reuse-dep5"
REUSE_LICENSES = "reuse-licenses"
DEBIAN_COPYRIGHT = "debian-copyright"
_ORDER = (LICENCE_FILE, LICENSES_README, REUSE_DEP5, REUSE_LICENSES, DEBIAN_COPYRIGHT)
#: the kinds whose text is read (a REUSE licence's id is its file name)
_READ = frozenset({LICENCE_FILE, LICENSES_README, REUSE_DEP5, DEBIAN_COPYRIGHT})

#: the usual names first: when a project has COPYING and COPYING.LIB, COPYING is the project's
_CANONICAL = (
    "copying",
    "license",
    "licence",
    "copying.txt",
    "license.txt",
    "licence.txt",
    "license.md",
    "license.rst",
)
_LICENCE_NAME = re.compile(r"(?:copying|licen[cs]e)(?:[.\-_][\w.\-]*)?", re.I)
_REUSE_TEXT = re.compile(r"licenses/([A-Za-z0-9.+\-]+)\.txt", re.I)

# Debian's short names (copyright-format 1.0, "License specification") -> SPDX
_DEBIAN_NAMES = {
    "gpl-1": "GPL-1.0-only",
    "gpl-1+": "GPL-1.0-or-later",
    "gpl-2": "GPL-2.0-only",
    "gpl-2+": "GPL-2.0-or-later",
    "gpl-3": "GPL-3.0-only",
    "gpl-3+": "GPL-3.0-or-later",
    "lgpl-2": "LGPL-2.0-only",
    "lgpl-2+": "LGPL-2.0-or-later",
    "lgpl-2.1": "LGPL-2.1-only",
    "lgpl-2.1+": "LGPL-2.1-or-later",
    "lgpl-3": "LGPL-3.0-only",
    "lgpl-3+": "LGPL-3.0-or-later",
    "agpl-3": "AGPL-3.0-only",
    "agpl-3+": "AGPL-3.0-or-later",
    "bsd-2-clause": "BSD-2-Clause",
    "bsd-3-clause": "BSD-3-Clause",
    "bsd-4-clause": "BSD-4-Clause",
    "expat": "MIT",
    "mit": "MIT",
    "isc": "ISC",
    "zlib": "Zlib",
    "apache-2.0": "Apache-2.0",
    "mpl-2.0": "MPL-2.0",
    "artistic": "Artistic-1.0-Perl",
    "artistic-2.0": "Artistic-2.0",
}
_OPERATORS = {"or": "OR", "and": "AND", "with": "WITH", "(": "(", ")": ")"}


@dataclass(frozen=True, slots=True)
class Source:
    """A file that may state a component's licence: its manifest entry, its path below the root, how."""

    entry: Mapping[str, Any]
    rel: str
    how: str


@dataclass
class ComponentLicence:
    """What the manifest's component entry gets (``license``, ``license_file``...), and its flags."""

    license: str | None
    reason: str
    file: str | None = None
    source: str | None = None  # "upstream-release" | "drop"
    changed: list[dict[str, Any]] = field(default_factory=list)  # licence files edited from upstream's

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"license": self.license, "license_reason": self.reason}
        if self.file:
            out["license_file"] = self.file
        if self.source:
            out["license_source"] = self.source
        return out


# ------------------------------------------------------------------ where
def component_root(prefix: str, paths: Iterable[str]) -> str:
    """The component's prefix and the single top folders every one of its files sits in (not below
    a level that holds a licence statement: ``pkg/debian/copyright`` is ``pkg/``'s)."""
    rels = [p[len(prefix) :] for p in paths]
    root = ""
    for _ in range(MAX_ROOT_DEPTH):
        tops = {r.split("/", 1)[0] for r in rels}
        if len(tops) != 1 or not all("/" in r for r in rels) or NESTED in next(iter(tops)) + "/":
            break
        if any(NESTED not in r and _how(r) for r in rels):
            break
        top = tops.pop() + "/"
        root += top
        rels = [r[len(top) :] for r in rels]
    return prefix + root


def _how(rel: str) -> str | None:
    low = rel.lower()
    if "/" not in rel:
        return LICENCE_FILE if _LICENCE_NAME.fullmatch(rel) else None
    if low == "licenses/readme":
        return LICENSES_README
    if low == ".reuse/dep5":
        return REUSE_DEP5
    if low == "debian/copyright":
        return DEBIAN_COPYRIGHT
    m = _REUSE_TEXT.fullmatch(rel)
    if m and rel.startswith("LICENSES/") and normalise_expression(m.group(1))[1]:
        return REUSE_LICENSES  # REUSE names the folder LICENSES/ and each text by its SPDX id
    return None


def _rank(source: Source) -> tuple[int, int, str]:
    name = source.rel.lower()
    canonical = _CANONICAL.index(name) if name in _CANONICAL else len(_CANONICAL)
    return _ORDER.index(source.how), canonical, source.rel


def sources(prefix: str, files: Iterable[Mapping[str, Any]]) -> tuple[str, list[Source]]:
    """(root, the files at the component's root that may state its licence, most direct first)."""
    files = list(files)
    root = component_root(prefix, (f["path"] for f in files))
    found = []
    for f in files:
        if not f["path"].startswith(root) or not f.get("size"):
            continue
        rel = f["path"][len(root) :]
        how = _how(rel) if NESTED not in rel else None
        if how:
            found.append(Source(f, rel, how))
    return root, sorted(found, key=_rank)


def by_component(files: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for f in files:
        out.setdefault(f.get("component", ""), []).append(f)
    return out


def wanted(files: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """SHA-256 -> size of every file whose text may state its component's licence."""
    out: dict[str, int] = {}
    for prefix, members in by_component(files).items():
        if not prefix:
            continue  # loose files at the top of a drop are no component with a licence of its own
        for s in sources(prefix, members)[1]:
            if s.how in _READ:
                out[s.entry["sha256"]] = int(s.entry["size"])
    return out


# ------------------------------------------------------------------ what
def best_finding(findings: Iterable[LicenseFinding]) -> str | None:
    """The licence a licence file states: the longest confident match (the full text)."""
    best = max(
        (f for f in findings if f.confidence >= MIN_CONFIDENCE and f.category not in RESTRICTED_CATEGORIES),
        key=lambda f: (f.end_line - f.line, f.confidence),
        default=None,
    )
    return best.expression if best else None


def dep5_stanzas(text: str) -> list[dict[str, str]]:
    """The paragraphs of a DEP-5 file (debian/copyright, .reuse/dep5): field -> first line of its value."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current = {}
        elif line[0] in " \t" or line.startswith("#"):
            continue  # a continuation line (a licence's text) or a comment
        elif ":" in line:
            key, _, value = line.partition(":")
            current[key.strip().lower()] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def debian_expression(value: str) -> tuple[str | None, str]:
    """(SPDX expression, '') of a DEP-5 ``License:`` value, or (None, why not)."""
    tokens = value.replace("(", " ( ").replace(")", " ) ").replace(",", " ").split()
    words = []
    for t in tokens:
        low = t.lower()
        words.append(_OPERATORS.get(low) or _DEBIAN_NAMES.get(low) or t)
    expression, valid = normalise_expression(" ".join(words))
    if not valid or not words:
        return None, f"License: {value!r} is neither a Debian short name nor an SPDX expression"
    return expression, ""


def _dep5_licence(text: str) -> tuple[str | None, str]:
    stanzas = dep5_stanzas(text)
    if not stanzas or "format" not in stanzas[0]:
        return None, "not in the machine-readable format (no Format: field)"
    for s in stanzas:
        if "*" in s.get("files", "").split() and s.get("license"):
            return debian_expression(s["license"])
    return None, "no 'Files: *' stanza with a License"


def tell(source: Source, data: bytes | None, detector: Detector) -> tuple[str | None, str]:
    """(the licence ``source`` states, '') or (None, why it tells none)."""
    if source.how == REUSE_LICENSES:
        return normalise_expression(source.rel.split("/", 1)[1][: -len(".txt")])[0], ""
    if data is None:
        return None, "not found again in the drop"
    text = data.decode("utf-8", "replace")
    if source.how in (REUSE_DEP5, DEBIAN_COPYRIGHT):
        return _dep5_licence(text)
    expression = best_finding(detector.detect(text, thorough=True))
    if expression is None:
        return None, f"no licence the {detector.name} detector can tell"
    return expression, ""


def _stated_by(source: Source) -> str:
    return {
        REUSE_DEP5: f"{source.rel}, its 'Files: *' stanza (REUSE)",
        REUSE_LICENSES: f"{source.rel}, the only licence text in LICENSES/ (REUSE)",
        DEBIAN_COPYRIGHT: f"{source.rel}, its 'Files: *' stanza (DEP-5)",
    }.get(source.how, source.rel)


def _own(
    root: str, found: list[Source], content: Mapping[str, bytes], detector: Detector, *, every: bool = False
) -> tuple[ComponentLicence, dict[str, str | None]]:
    """The licence the component's own files state, and what those read state (rel -> expression).

    Reading stops at the first file that tells a licence unless ``every`` (at ingest, once per
    release): a licence file is read with ScanCode's approximate matcher, 1-5 s each.
    """
    if not found:
        where = root or "the top of the drop"
        reason = f"no COPYING, LICENSE, Licenses/README, REUSE LICENSES/ or debian/copyright at {where}"
        return ComponentLicence(None, reason), {}
    told: dict[str, str | None] = {}
    why: list[str] = []
    chosen: Source | None = None
    # a REUSE LICENSES/ folder tells a licence only when it holds a single text
    reuse = [s for s in found if s.how == REUSE_LICENSES]
    for s in found:
        if chosen is not None and not every:
            break
        if s.how == REUSE_LICENSES and len(reuse) > 1:
            told[s.rel] = None
            continue
        expression, no = tell(s, content.get(s.entry["sha256"]), detector)
        told[s.rel] = expression
        if expression and chosen is None:
            chosen = s
        elif not expression:
            why.append(f"{s.rel}: {no}")
    if chosen is None:
        if len(reuse) > 1:
            why.append(f"LICENSES/ holds {len(reuse)} licence texts and no .reuse/dep5 says which covers '*'")
        return ComponentLicence(None, "; ".join(why)), told
    licence = ComponentLicence(
        told[chosen.rel], f"stated by {_stated_by(chosen)}", chosen.entry["path"], "drop"
    )
    return licence, told


# ------------------------------------------------------------------ a release, once at ingest
def release_record(
    paths: Mapping[str, str], content: Mapping[str, bytes], detector: Detector, sizes: Mapping[str, int]
) -> dict[str, Any]:
    """The licence of an upstream release (path -> sha256), stored with it: what every scan reuses."""
    files = [{"path": p, "sha256": d, "size": sizes.get(p, 1)} for p, d in paths.items() if NESTED not in p]
    root, found = sources("", files)
    licence, told = _own(root, found, content, detector, every=True)
    return {
        "license": licence.license,
        "license_file": licence.file[len(root) :] if licence.file else None,
        "license_reason": licence.reason,
        "detector": detector.name,
        "files": {s.rel: {"sha256": s.entry["sha256"], "license": told.get(s.rel)} for s in found},
    }


def release_wanted(paths: Mapping[str, str], sizes: Mapping[str, int]) -> dict[str, int]:
    """SHA-256 -> size of the release files :func:`release_record` reads."""
    files = [{"path": p, "sha256": d, "size": sizes.get(p, 0)} for p, d in paths.items() if NESTED not in p]
    return {s.entry["sha256"]: int(s.entry["size"]) for s in sources("", files)[1] if s.how in _READ}


# ------------------------------------------------------------------ a component of a drop
def resolve(
    component: Mapping[str, Any],
    files: list[Mapping[str, Any]],
    content: Mapping[str, bytes],
    detector: Detector,
    release: Mapping[str, Any] | None,
) -> ComponentLicence:
    """The component's licence: its release's, recorded at ingest, else what its own files state.

    ``release`` is the record :func:`release_record` made when the component's release was ingested
    (None: not identified, or ingested before licences were recorded).
    """
    prefix = component["prefix"]
    if not prefix:
        return ComponentLicence(None, "loose files at the top of the drop belong to no component")
    root, found = sources(prefix, files)
    name = f"{component.get('package')} {component.get('version')}"
    told: dict[str, str | None] = {}
    if release is None or not release.get("license"):
        licence, told = _own(root, found, content, detector)
        if component.get("identified"):
            licence.reason += (
                f" ({name} has no licence recorded at ingest)"
                if release is not None
                else f" ({name} was ingested before licences were recorded: ingest it again)"
            )
    else:  # the drop's own licence files are read only if they differ from the release's
        up_file = release.get("license_file") or ""
        licence = ComponentLicence(
            str(release["license"]),
            f"stated by {up_file} of {name}, recorded when the release was ingested",
            root + up_file if any(s.rel == up_file for s in found) else None,
            "upstream-release",
        )
    by_rel = {s.rel: s for s in found}
    for rel, up in sorted(((release or {}).get("files") or {}).items()):
        s = by_rel.get(rel)
        if s is None or s.entry["sha256"] == up["sha256"]:
            continue  # a licence file deleted from the drop is among the component's missing files
        if rel not in told:
            told[rel] = tell(s, content.get(s.entry["sha256"]), detector)[0]
        licence.changed.append(
            {
                "path": s.entry["path"],
                "drop": told[rel],
                "upstream": up.get("license"),
                "release": name,
                "licence": licence.license if licence.source == "upstream-release" else None,
            }
        )
    return licence


def resolve_all(
    manifest: Mapping[str, Any],
    content: Mapping[str, bytes],
    detector: Detector,
    releases: Mapping[str, Mapping[str, Any] | None],
) -> dict[str, ComponentLicence]:
    """Component prefix -> its licence, for every component of the manifest."""
    members = by_component(manifest["files"])
    return {
        c["prefix"]: resolve(c, members.get(c["prefix"], []), content, detector, releases.get(c["prefix"]))
        for c in manifest["components"]
    }


# ------------------------------------------------------------------ flags
def flags(licences: Mapping[str, ComponentLicence]) -> list[Any]:
    """``license-file-changed`` for licence files edited from their release's; ``license-unknown`` for
    components whose licence could not be told (the loose files at the top excepted)."""
    from dropscan.audit.flags import ACTION, REVIEW, Flag

    out: list[Flag] = []
    for prefix, lic in licences.items():
        for c in lic.changed:
            same = c["drop"] == c["upstream"]
            untold = "no licence that can be told"
            evidence = f"the drop's file states {c['drop'] or untold}"
            detail = f"differs from {c['release']}'s, which states {c['upstream'] or untold}"
            if c["licence"]:
                detail += f"; the component stays {c['licence']}, as {c['release']} is licensed"
            severity = REVIEW if same else ACTION
            out.append(Flag("license-file-changed", severity, c["path"], None, evidence, prefix, detail))
        if prefix and lic.license is None:
            detail = "licence unknown: the licences of this component's files cannot be checked against it"
            out.append(Flag("license-unknown", REVIEW, lic.file or prefix, None, lic.reason, prefix, detail))
    return out

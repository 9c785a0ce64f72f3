"""The SPDX 2.3 document of a scan as spdx-tools' model: the drop's and each component's Package, the
upstream states they derive from, File elements with their licences and flag annotations
(``build_document``), and the layout :class:`dropscan.reports.spdx.Rendering` writes in parts."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

from license_expression import LicenseExpression
from spdx_tools.spdx.model.actor import Actor, ActorType
from spdx_tools.spdx.model.annotation import Annotation, AnnotationType
from spdx_tools.spdx.model.checksum import Checksum, ChecksumAlgorithm
from spdx_tools.spdx.model.document import CreationInfo, Document
from spdx_tools.spdx.model.file import File, FileType
from spdx_tools.spdx.model.package import (
    ExternalPackageRef,
    ExternalPackageRefCategory,
    Package,
    PackagePurpose,
    PackageVerificationCode,
)
from spdx_tools.spdx.model.relationship import Relationship, RelationshipType
from spdx_tools.spdx.model.spdx_no_assertion import SpdxNoAssertion
from spdx_tools.spdx.model.spdx_none import SpdxNone

from dropscan import __version__
from dropscan.reports import spdx_firmware, view
from dropscan.reports.spdx_licences import Licences, LicenceValue

NAMESPACE = "https://dropscan.invalid/spdx"
DOCUMENT_ID = "SPDXRef-DOCUMENT"
DROP_ID = "SPDXRef-Drop"

FILE_TYPES: dict[str, FileType] = {
    "elf": FileType.BINARY,
    "static-library": FileType.BINARY,
    "pe": FileType.BINARY,
    "mach-o": FileType.BINARY,
    "java-class": FileType.BINARY,
    "binary": FileType.OTHER,
    "archive": FileType.ARCHIVE,
}
# fmt: off
SOURCE_SUFFIXES = frozenset({
    ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".S", ".s", ".asm", ".py", ".sh", ".pl", ".rs", ".go", ".java",
    ".js", ".ts", ".lua", ".rb", ".mk", ".dts", ".dtsi",
})
# fmt: on

T = TypeVar("T")


def spdx_id(kind: str, n: int, name: str = "") -> str:
    tail = re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-")[:60]
    return f"SPDXRef-{kind}-{n}" + (f"-{tail}" if tail else "")


def created(manifest: Mapping[str, Any]) -> datetime:
    """The scan's finish time (a report of the same manifest is the same document), else now."""
    for key in ("finished_at", "created_at"):
        try:
            when = datetime.fromisoformat(str(manifest[key]))
        except (KeyError, ValueError):
            continue
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).replace(microsecond=0)
    return datetime.now(UTC).replace(microsecond=0)


def file_types(f: Mapping[str, Any]) -> list[FileType]:
    kind = str(f.get("kind") or "")
    if kind in FILE_TYPES:
        return [FILE_TYPES[kind]]
    name = str(f["path"]).rsplit("/", 1)[-1]
    suffix = name[name.rfind(".") :] if "." in name else ""
    return (
        [FileType.SOURCE] if suffix in SOURCE_SUFFIXES or name in ("Makefile", "Kconfig") else [FileType.TEXT]
    )


def verification_code(sha1s: Iterable[str]) -> PackageVerificationCode:
    """SPDX 2.3 clause 7.9: SHA-1 of the sorted, concatenated SHA-1 digests of the package's files."""
    return PackageVerificationCode(hashlib.sha1("".join(sorted(sha1s)).encode()).hexdigest())


@dataclass(frozen=True, slots=True)
class Entry:
    """What one File element is made of: the manifest's file, its SPDX id, its licences, its package."""

    file: Mapping[str, Any]
    spdx_id: str
    licences: list[LicenceValue]
    package: str


@dataclass
class Layout:
    """The document but its File elements and their relationships, and what those are made of."""

    document: Document  # no files; relationships: DESCRIBES and the drop's CONTAINS of each package
    entries: list[Entry]  # every File element, in document order
    packages: list[str]  # the component packages' ids, in document order
    # what descends from upstream: DESCENDANT_OF, FILE_MODIFIED (issue 24); the firmware's DESCRIBES,
    # CONTAINS and GENERATED_FROM (issue 35)
    derived: list[Relationship]


def layout_of(manifest: Mapping[str, Any]) -> Layout:
    supplier = str(manifest.get("supplier") or "unknown")
    scan_id = str(manifest.get("scan_id") or "unknown")
    info = CreationInfo(
        spdx_version="SPDX-2.3",
        spdx_id=DOCUMENT_ID,
        name=f"dropscan {supplier}/{view.drop_name(manifest)}",
        document_namespace=f"{NAMESPACE}/{quote(supplier, safe='')}/{quote(scan_id, safe='')}",
        creators=[Actor(ActorType.TOOL, f"dropscan-{__version__}")],
        created=created(manifest),
        creator_comment=(
            f"Rendered from manifest.json of scan {scan_id} ({manifest.get('schema')}), which stays the "
            "source of truth. Method: trust-upstream (files identical to a trusted upstream release are set "
            "aside; modified and added files are the review set)."
        ),
        data_license="CC0-1.0",
        document_comment=f"verdict: {manifest.get('verdict')}; status: {manifest.get('status')}",
    )
    licences = Licences()
    packages = [_drop_package(manifest)]
    relationships = [Relationship(DOCUMENT_ID, RelationshipType.DESCRIBES, DROP_ID)]
    entries: list[Entry] = []
    package_ids: list[str] = []
    by_component = _files_by_component(manifest)
    triaged = view.has_triage(manifest)
    for n, c in enumerate(manifest.get("components") or [], 1):
        pkg_id = spdx_id("Package", n, view.component_name(c))
        members = by_component.get(str(c.get("prefix") or ""), [])
        analysed = bool(members) and all(f.get("sha1") for f in members)
        mine = (
            [
                Entry(f, spdx_id("File", len(entries) + i), _file_licences(f, licences, triaged), pkg_id)
                for i, f in enumerate(members, 1)
            ]
            if analysed
            else []
        )
        packages.append(_component_package(c, pkg_id, mine, members, licences, supplier))
        relationships.append(Relationship(DROP_ID, RelationshipType.CONTAINS, pkg_id))
        package_ids.append(pkg_id)
        entries += mine
    file_ids = {str(e.file["path"]): e.spdx_id for e in entries}
    annotations = _flag_annotations(manifest, file_ids, packages, info.created)
    upstream = _Upstream()
    derived = upstream.relationships(manifest, package_ids, entries)
    prefixes = [str(c.get("prefix") or "").rstrip("/") for c in manifest.get("components") or []]
    firmware = spdx_firmware.elements(
        manifest, DOCUMENT_ID, dict(zip(prefixes, package_ids, strict=True)), licences, info.created, spdx_id
    )
    document = Document(
        info,
        packages=packages + upstream.packages + firmware.packages,
        files=[],
        annotations=annotations + firmware.annotations,
        relationships=relationships,
        extracted_licensing_info=list(licences.extracted.values()),
    )
    return Layout(document, entries, package_ids, derived + firmware.relationships)


class _Upstream:
    """Package elements for the upstream states the drop's components and modified files derive from."""

    def __init__(self) -> None:
        self.packages: list[Package] = []
        self._ids: dict[tuple[str, str, str], str] = {}

    def package(self, name: str, version: str | None, commit: str | None) -> str:
        """The id of the element for a release (``version``) or a state of the history (``commit``)."""
        key = (name, version or "", "" if version else commit or "")
        found = self._ids.get(key)
        if found is not None:
            return found
        label = f"{name} {version}" if version else f"{name} {str(commit or '')[:12]}".rstrip()
        pkg_id = self._ids[key] = spdx_id("Upstream", len(self._ids) + 1, label)
        state = f"release {version}" if version else f"the state of its history at commit {commit}"
        purl = view.purl({"identified": True, "package": name, "version": version}) if version else None
        self.packages.append(
            Package(
                spdx_id=pkg_id,
                name=name,
                version=version,
                download_location=SpdxNoAssertion(),
                files_analyzed=False,
                external_references=(
                    [ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", purl)]
                    if purl
                    else []
                ),
                primary_package_purpose=PackagePurpose.SOURCE,
                comment=f"Upstream {name}, {state}: what the drop's modified files were diffed against.",
            )
        )
        return pkg_id

    def relationships(
        self, manifest: Mapping[str, Any], package_ids: Sequence[str], entries: Sequence[Entry]
    ) -> list[Relationship]:
        """Each identified component DESCENDANT_OF its baseline release; each written modified file with
        a base FILE_MODIFIED from the upstream state holding it (the base path, hunks' origins and the
        commits cited in the comment: SPDX 2.3 has no element for a commit, and the base file itself
        cannot be a File element without the SHA-1 SPDX requires)."""
        out: list[Relationship] = []
        for c, pkg_id in zip(manifest.get("components") or [], package_ids, strict=True):
            b = view.baseline(c)
            release = (b or {}).get("release")
            if b is None or not (c.get("identified") and c.get("package") and release):
                continue
            upstream = self.package(str(c["package"]), str(release), None)
            comment = f"Baseline: {view.baseline_name(c)}."
            out.append(Relationship(pkg_id, RelationshipType.DESCENDANT_OF, upstream, comment))
        for e in entries:
            ev = view.evidence(e.file)
            base = (ev or {}).get("base")
            if e.file["class"] != "modified" or ev is None or not isinstance(base, Mapping):
                continue
            version = str(base["version"]) if base.get("version") else None
            upstream = self.package(str(base.get("package")), version, base.get("commit"))
            out.append(Relationship(e.spdx_id, RelationshipType.FILE_MODIFIED, upstream, _modified(ev)))
        return out


def _modified(ev: Mapping[str, Any]) -> str:
    """``modified from networking/wget.c (sha256 …) of busybox 1.37.0: +12 -3 lines; backport of …``."""
    base = ev.get("base") or {}
    text = (
        f"Modified from {base.get('path')} (SHA-256 {base.get('sha256')}) of {view.base_label(base)}: "
        f"+{int(ev.get('lines_added') or 0)} -{int(ev.get('lines_removed') or 0)} lines"
    )
    commits = list(dict.fromkeys(str(h["commit"]) for h in ev.get("hunks") or [] if h.get("commit")))
    origin = ev.get("origin")
    if origin == "upstream":
        text += "; a backport: every change is upstream's own"
    elif origin == "mixed":
        text += "; upstream's changes and vendor changes"
    elif origin == "vendor":
        text += "; vendor changes"
    if commits:
        text += " (upstream commits " + ", ".join(commits) + ")"
    return text + "."


def with_files(layout: Layout, head: Sequence[T], contains: Mapping[str, Sequence[T]]) -> list[T]:
    """The relationships in document order: ``head`` (DESCRIBES, then the drop's CONTAINS of each
    package), each package's CONTAINS of its files (``contains``, by package id) right after its own."""
    out = [head[0]]
    for rel, package in zip(head[1:], layout.packages, strict=True):
        out.append(rel)
        out += contains.get(package, ())
    return out


def build_document(manifest: Mapping[str, Any]) -> Document:
    """The SPDX 2.3 model of ``manifest``: the drop, the components it contains, their files."""
    layout = layout_of(manifest)
    contains: dict[str, list[Relationship]] = {}
    for e in layout.entries:
        contains.setdefault(e.package, []).append(
            Relationship(e.package, RelationshipType.CONTAINS, e.spdx_id)
        )
    doc = layout.document
    doc.files = [_file(e) for e in layout.entries]
    doc.relationships = with_files(layout, doc.relationships, contains) + layout.derived
    return doc


def _flag_annotations(
    manifest: Mapping[str, Any], file_ids: Mapping[str, str], packages: Sequence[Package], when: datetime
) -> list[Annotation]:
    """Each red flag as a REVIEW annotation on its file (on its package when the file is not written);
    ``file_ids``: the SPDX id of each path written as a File."""
    package_ids = {
        str(c.get("prefix") or ""): p.spdx_id
        for c, p in zip(manifest.get("components") or [], packages[1:], strict=True)
    }
    tool = Actor(ActorType.TOOL, f"dropscan-{__version__}")
    out = []
    for fl in view.flags(manifest):
        path = str(fl.get("path") or "")
        target = file_ids.get(path) or package_ids.get(str(fl.get("component") or ""), DROP_ID)
        where = (
            f" at {view.flag_location(fl)}"
            if path not in file_ids
            else (f" at line {fl['line']}" if fl.get("line") else "")
        )
        text = f"red flag {fl.get('kind')} ({fl.get('severity')}){where}: {fl.get('detail') or ''}".rstrip(
            ": "
        )
        if fl.get("evidence"):
            text += f" Evidence: {fl['evidence']}"
        if view.unshipped(fl):
            text += " Not in the firmware: no binary of it holds this file."
        out.append(Annotation(target, AnnotationType.REVIEW, tool, when, text))
    return out


def _files_by_component(manifest: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    prefixes = [str(c.get("prefix") or "") for c in manifest.get("components") or []]
    known = set(prefixes)
    out: dict[str, list[Mapping[str, Any]]] = {p: [] for p in prefixes}
    for f in manifest.get("files") or []:
        declared = f.get("component")
        key = declared if isinstance(declared, str) and declared in known else view.owner(prefixes, f["path"])
        if key is not None:
            out[key].append(f)
    return out


def _drop_package(manifest: Mapping[str, Any]) -> Package:
    src = manifest.get("source") or {}
    sha256 = src.get("sha256")
    return Package(
        spdx_id=DROP_ID,
        name=view.drop_name(manifest),
        download_location=SpdxNoAssertion(),
        file_name=view.drop_name(manifest),
        supplier=Actor(ActorType.ORGANIZATION, str(manifest.get("supplier") or "unknown")),
        files_analyzed=False,
        checksums=[Checksum(ChecksumAlgorithm.SHA256, str(sha256))] if sha256 else [],
        primary_package_purpose=PackagePurpose.SOURCE,
        comment=f"The source drop as uploaded ({src.get('key')}, {int(src.get('size') or 0):,} bytes).",
    )


def _component_package(
    c: Mapping[str, Any],
    pkg_id: str,
    files: Sequence[Entry],
    members: Sequence[Mapping[str, Any]],
    licences: Licences,
    supplier: str,
) -> Package:
    name = str(c.get("package") or view.component_name(c))
    declared: LicenceValue = SpdxNoAssertion()
    if c.get("license"):
        declared = licences.expression(str(c["license"]), where=f"as the licence of {view.component_name(c)}")
    refs = (
        [ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", p)]
        if (p := view.purl(c))
        else []
    )
    classes = c.get("classes") or {}
    counts = ", ".join(f"{n:,} {cls}" for cls, n in classes.items() if n)
    folder = c.get("prefix") or "(top level)"
    comment = [f"Folder {folder} of the drop; {int(c.get('files') or 0):,} files: {counts}."]
    if c.get("identified"):
        comment.append(
            f"Identified as upstream release {view.component_name(c)} "
            f"({float(c.get('match_pct') or 0):.1f} % of its non-empty files identical to it; "
            f"trust {c.get('trust') or 'not recorded'}); "
            f"{len(c.get('missing') or []):,} files of the release absent."
        )
    else:
        comment.append("Not identified as any trusted upstream release.")
    if view.baseline(c) is not None:
        comment.append(f"Baseline: {view.baseline_name(c)}.")
    if members and not files:
        comment.append(
            "filesAnalyzed is false because the manifest has no SHA-1 for its files, which SPDX 2.3 requires "
            "of every File; the per-file SHA-256 digests and licence findings are in manifest.json."
        )
    found: dict[str, LicenceValue] = {}
    for f in files:
        for lic in f.licences:
            if isinstance(lic, LicenseExpression):
                found.setdefault(str(lic), lic)
    return Package(
        spdx_id=pkg_id,
        name=name,
        download_location=SpdxNoAssertion(),
        version=str(c["version"]) if c.get("identified") and c.get("version") else None,
        supplier=Actor(ActorType.ORGANIZATION, supplier),
        files_analyzed=bool(files),
        verification_code=verification_code(str(m["sha1"]) for m in members) if files else None,
        license_concluded=SpdxNoAssertion(),
        license_declared=declared,
        license_info_from_files=list(found.values()),
        license_comment=(
            "licenseDeclared is the licence of the identified upstream release. dropscan concludes no "
            "licence: licenseInfoFromFiles lists what the files of the review set state."
        ),
        external_references=refs,
        primary_package_purpose=PackagePurpose.SOURCE,
        comment=" ".join(comment),
    )


def _file_licences(f: Mapping[str, Any], licences: Licences, triaged: bool) -> list[LicenceValue]:
    """The licences a file states, in the order found (registering those off the SPDX list)."""
    path = str(f["path"])
    in_file: list[LicenceValue] = []
    seen: set[str] = set()
    for lic in view.licence_findings(f):
        value = licences.expression(
            str(lic["expression"]),
            evidence=lic.get("text"),
            where=f"in {path}, line {lic.get('line') or '?'}",
        )
        if str(value) not in seen:
            seen.add(str(value))
            in_file.append(value)
    if not in_file and triaged and f["class"] in view.REVIEW:
        in_file = [SpdxNone()]  # examined, and no licence statement in it
    return in_file


def file_comment(f: Mapping[str, Any]) -> str:
    comment = f"class {f['class']}"
    ups = f.get("upstream") or []
    if ups:
        comment += "; upstream " + ", ".join(upstream_text(u) for u in ups)
    if f.get("unreadable"):
        comment += f"; unreadable: {f['unreadable']}"
    if view.in_binary_label(f):
        comment += f"; {view.in_binary_label(f)}"
    ev = view.evidence(f)
    if ev is not None and f["class"] == "modified":
        comment += f"; origin of its changes: {ev.get('origin')}, against {view.base_label(ev.get('base'))}"
        if ev.get("error"):
            comment += f" (no diff: {ev['error']})"
    elif ev is not None and ev.get("base"):  # vcs-keywords, whitespace: which upstream file, briefly
        comment += f"; against {view.base_label(ev['base'])}"
    similar = f.get("similar")
    if isinstance(similar, Mapping) and f["class"] == "added":
        comment += f"; {view.similar_label(similar)}"
    return comment


def _file(e: Entry) -> File:
    f = e.file
    checksums = [
        Checksum(ChecksumAlgorithm.SHA1, str(f["sha1"])),
        Checksum(ChecksumAlgorithm.SHA256, str(f["sha256"])),
    ]
    return File(
        name=f"./{f['path']}",
        spdx_id=e.spdx_id,
        checksums=checksums,
        file_types=file_types(f),
        license_info_in_file=e.licences,
        comment=file_comment(f),
    )


def upstream_text(ref: dict[str, Any]) -> str:
    """``busybox 1.23.0–1.36.1``, or for content only in the package's git history its commit."""
    if ref["versions"]:
        return f"{ref['package']} {'–'.join(ref['versions'])}"
    commit = (ref.get("commit") or {}).get("id", "")
    return f"{ref['package']} history, commit {commit[:12]}" if commit else str(ref["package"])

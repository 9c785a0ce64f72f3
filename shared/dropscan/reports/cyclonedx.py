"""The CycloneDX 1.6 JSON SBOM of a scan (cyclonedx-python-lib): components as purls, review files within.

Each component of the drop is a library component: an identified one carries the purl of its upstream
release (``pkg:generic/busybox@1.35.0``), its declared licence and identity evidence (hash comparison, with
the share of its files identical to the release as confidence); an unidentified one is named by its folder.
The files of its review set (modified, added) are file components nested in it, with their hashes, the
licences stated in them as evidence, and red flags as ``dropscan:flag`` properties. Files identical to
upstream are counted, not listed: they are the release itself.

cyclonedx-python-lib keeps every component's children in a sorted set and compares whole components (a
tuple of 30 fields) on each insert, then serialises element by element: 66.9 s and 1.28 GB for a review
set of 40,000 files (docs/design.md, "A review set nothing upstream explains"). So the library builds and
serialises the document without the file components (the drop, its components, metadata, dependencies:
a few dozen elements), and each file component is written as a dict in the library's own JSON form, in
the library's order (by name: the path), compact, one per line, into its component's ``components``.
The tests check that the result equals the library's rendering of the whole model and validates.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from cyclonedx.model import AttachedText, HashAlgorithm, HashType, IdentifiableAction, Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import (
    Commit,
    Component,
    ComponentType,
    Diff,
    Patch,
    PatchClassification,
    Pedigree,
)
from cyclonedx.model.component_evidence import (
    AnalysisTechnique,
    ComponentEvidence,
    Identity,
    IdentityField,
    Method,
    Occurrence,
)
from cyclonedx.model.contact import OrganizationalEntity
from cyclonedx.model.license import LicenseAcknowledgement, LicenseExpression
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from dropscan import __version__
from dropscan.reports import cyclonedx_firmware, view
from dropscan.reports.spdx_elements import NAMESPACE, created

P = "dropscan:"  # property namespace


def render(manifest: Mapping[str, Any]) -> str:
    """The SBOM as JSON: the library's document, with each component's file components spliced in."""
    views = view.components(manifest)
    skeleton = json.loads(JsonV1Dot6(build_bom(manifest, views, files=False)).output_as_string())
    nonce = uuid.uuid4().hex
    lists: dict[str, str] = {}
    by_ref = {_ref(v): v for v in views}
    for c in skeleton.get("components") or []:
        v = by_ref.get(c.get("bom-ref"))
        if v is None or not (v.review or v.backports):
            continue
        marker = f"{nonce}:{len(lists)}"
        c["components"] = [marker]
        flagged = _flags_by_path(v)
        rows = sorted(listed(v), key=lambda f: str(f["path"]))  # the library's order: by name
        lists[json.dumps(marker)] = ",\n".join(
            _dumps(file_json(f, flagged.get(str(f["path"]), []))) for f in rows
        )
    for i, section in enumerate(view.firmware_images(manifest), 1):  # each image's binaries, likewise
        if not section.get("binaries"):
            continue
        image = next(c for c in skeleton["components"] if c.get("bom-ref") == cyclonedx_firmware.image_ref(i))
        marker = f"{nonce}:{len(lists)}"
        image["components"] = [marker]
        lists[json.dumps(marker)] = ",\n".join(
            _dumps(row) for row in cyclonedx_firmware.binary_rows(manifest, i)
        )
    text = json.dumps(skeleton, indent=1, sort_keys=True)
    if not lists:
        return text
    # one pass over the skeleton: each marker (a string no manifest can produce) becomes its file list
    pattern = re.compile("|".join(re.escape(m) for m in lists))
    return pattern.sub(lambda m: lists[m.group(0)], text)


def listed(v: view.ComponentView) -> list[Mapping[str, Any]]:
    """The component's file components: its review set and its backports (modified files too)."""
    return [*v.review, *v.backports]


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _ref(v: view.ComponentView) -> str:
    return f"component:{v.prefix or '/'}"


def _flags_by_path(v: view.ComponentView) -> dict[str, list[Mapping[str, Any]]]:
    flagged: dict[str, list[Mapping[str, Any]]] = {}
    for fl in v.flags:
        flagged.setdefault(str(fl.get("path")), []).append(fl)
    return flagged


def props(pairs: Iterable[tuple[str, Any]]) -> list[Property]:
    return [Property(name=P + k, value=str(v)) for k, v in pairs if v is not None and v != ""]


def licence(expressions: Iterable[str]) -> LicenseExpression | None:
    """One expression for several statements: the schema allows a single expression per licence list."""
    found = list(dict.fromkeys(x.strip() for x in expressions if x and x.strip()))
    if not found:
        return None
    value = found[0] if len(found) == 1 else " AND ".join(f"({x})" if " " in x else x for x in found)
    return LicenseExpression(value, acknowledgement=LicenseAcknowledgement.DECLARED)


def build_bom(
    manifest: Mapping[str, Any], views: list[view.ComponentView] | None = None, *, files: bool = True
) -> Bom:
    """The library's model of the SBOM; without the file components unless ``files``."""
    supplier = OrganizationalEntity(name=str(manifest.get("supplier") or "unknown"))
    scan_id = str(manifest.get("scan_id") or "unknown")
    drop = _drop(manifest, supplier)
    meta = BomMetaData(
        component=drop,
        supplier=supplier,
        timestamp=created(manifest),
        properties=props([("scan-id", scan_id), ("schema", manifest.get("schema"))]),
    )
    meta.tools.components.add(Component(type=ComponentType.APPLICATION, name="dropscan", version=__version__))
    views = view.components(manifest) if views is None else views
    commits = view.cited_commits(manifest)
    components = [_component(v, supplier, commits, files=files) for v in views]
    firmware = cyclonedx_firmware.components(manifest, supplier, binaries=files)
    bom = Bom(
        # the same manifest gives the same serial number: a re-rendered SBOM is the same document
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"{NAMESPACE}/{manifest.get('supplier')}/{scan_id}"),
        metadata=meta,
        components=components + firmware,
    )
    bom.register_dependency(drop, components)
    return bom


def _drop(manifest: Mapping[str, Any], supplier: OrganizationalEntity) -> Component:
    src = manifest.get("source") or {}
    s = manifest.get("summary") or {}
    counts = view.flag_counts(manifest) if view.has_triage(manifest) else {}
    return Component(
        type=ComponentType.FILE,
        name=view.drop_name(manifest),
        bom_ref="drop",
        supplier=supplier,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=str(src["sha256"]))] if src.get("sha256") else [],
        description=f"Source drop {src.get('key')} as audited by dropscan (trust-upstream method).",
        properties=props(
            [
                ("status", manifest.get("status")),
                ("reason", manifest.get("reason")),
                ("verdict", manifest.get("verdict")),
                ("files", s.get("files")),
                ("review", s.get("review")),
                ("flags:action-required", counts.get("action-required")),
                ("flags:review", counts.get("review")),
                ("firmware:verdict", (view.firmware(manifest) or {}).get("verdict")),
            ]
        ),
    )


def _component(
    v: view.ComponentView,
    supplier: OrganizationalEntity,
    commits: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    files: bool = True,
) -> Component:
    c = v.data
    purl = view.purl(c)
    evidence = None
    if purl:
        confidence = Decimal(str(round(float(c.get("match_pct") or 0) / 100, 4)))
        evidence = ComponentEvidence(
            identity=[
                Identity(
                    field=IdentityField.PURL,
                    confidence=confidence,
                    concluded_value=purl,
                    methods=[
                        Method(
                            technique=AnalysisTechnique.HASH_COMPARISON,
                            confidence=confidence,
                            value="SHA-256 of every file against the files of the upstream release",
                        )
                    ],
                )
            ],
            occurrences=[Occurrence(location=v.prefix or "/")],
        )
    declared = licence([v.licence] if v.licence else [])
    flagged = _flags_by_path(v)
    return Component(
        type=ComponentType.LIBRARY,
        name=str(c["package"]) if purl else v.name,
        version=str(c["version"]) if purl and c.get("version") else None,
        purl=PackageURL.from_string(purl) if purl else None,
        bom_ref=_ref(v),
        supplier=supplier,
        licenses=[declared] if declared else [],
        evidence=evidence,
        pedigree=pedigree(v, commits or {}),
        properties=props(
            [
                ("prefix", v.prefix or "(top level)"),
                ("identified", str(bool(c.get("identified"))).lower()),
                ("trust", v.trust),
                ("match-pct", c.get("match_pct")),
                ("files", c.get("files")),
                *((f"class:{k}", n) for k, n in v.classes.items()),
                ("missing", len(c.get("missing") or [])),
            ]
        ),
        components=[_file(f, flagged.get(str(f["path"]), [])) for f in listed(v)] if files else [],
    )


def _changed(v: view.ComponentView) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """The modified files of the component with a diff against upstream, and their evidence."""
    out = []
    for f in listed(v):
        ev = view.evidence(f)
        if f["class"] == "modified" and ev is not None and ev.get("patch"):
            out.append((f, ev))
    return out


def _cited(hunks: Iterable[Mapping[str, Any]]) -> list[str]:
    return list(
        dict.fromkeys(str(h["commit"]) for h in hunks if h.get("origin") == "upstream" and h.get("commit"))
    )


def pedigree(v: view.ComponentView, commits: Mapping[str, Mapping[str, Any]]) -> Pedigree | None:
    """What the component descends from: its upstream release (``ancestors``), the upstream commits its
    backports carry (``commits``) and each changed file's diff (``patches``: ``backport`` when every
    change is upstream's, else ``unofficial``). None on a manifest without evidence."""
    c = v.data
    b = view.baseline(c)
    changed = _changed(v)
    if b is None and not changed:
        return None
    ancestors = []
    release = (b or {}).get("release") or c.get("version")
    if c.get("identified") and c.get("package") and release:
        ancestors.append(
            Component(
                type=ComponentType.LIBRARY,
                name=str(c["package"]),
                version=str(release),
                purl=PackageURL(type="generic", name=str(c["package"]), version=str(release)),
                bom_ref=f"upstream:{v.prefix or '/'}",
                description="The upstream release this component's modified files were diffed against.",
            )
        )
    cited = list(
        dict.fromkeys(
            [
                *((b or {}).get("commits") or []),
                *(x for _, ev in changed for x in _cited(ev.get("hunks") or [])),
            ]
        )
    )
    return Pedigree(
        ancestors=ancestors,
        commits=[_commit(sha, commits.get(sha) or {}) for sha in cited],
        patches=[_patch(f, ev, commits) for f, ev in changed],
    )


def _commit(sha: str, info: Mapping[str, Any]) -> Commit:
    when = None
    with contextlib.suppress(KeyError, ValueError):
        when = datetime.fromisoformat(str(info["date"]))
    return Commit(
        uid=sha,
        message=str(info["subject"]) if info.get("subject") else None,
        committer=IdentifiableAction(timestamp=when) if when else None,
    )


def _patch(f: Mapping[str, Any], ev: Mapping[str, Any], commits: Mapping[str, Mapping[str, Any]]) -> Patch:
    """The file's diff; what the patch is (which upstream commits, against which base) heads its text,
    before the ``---`` line, where git's own patches carry their message and patch tools read nothing."""
    backport = ev.get("origin") == "upstream"
    cited = _cited(ev.get("hunks") or [])
    head = [
        f"{'Backport of upstream changes' if backport else 'Vendor change'} to {f['path']} "
        f"(evidence origin {ev.get('origin')}), against {view.base_label(ev.get('base'))}."
    ]
    for sha in cited:
        info = commits.get(sha) or {}
        release = f" ({info['release']})" if info.get("release") else ""
        head.append(f"upstream commit {sha}{release}: {info.get('subject') or ''}".rstrip(": "))
    if ev.get("patch_truncated"):
        head.append("The diff was cut at 64 KiB when the manifest was written.")
    return Patch(
        type=PatchClassification.BACKPORT if backport else PatchClassification.UNOFFICIAL,
        diff=Diff(text=AttachedText(content="\n".join(head) + "\n\n" + str(ev["patch"]))),
    )


def _file_properties(f: Mapping[str, Any], flags: list[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    pairs: list[tuple[str, Any]] = [
        ("class", f["class"]),
        ("kind", f.get("kind")),
        ("unreadable", f.get("unreadable")),
    ]
    pairs += _evidence_properties(f)
    pairs += [("license", view.finding_label(lic)) for lic in view.licence_findings(f)]
    pairs += [
        (
            "flag",
            f"{fl.get('severity')} {fl.get('kind')}"
            + (f" line {fl['line']}" if fl.get("line") else "")
            + (f": {fl['detail']}" if fl.get("detail") else ""),
        )
        for fl in flags
    ]
    return [(k, v) for k, v in pairs if v is not None and v != ""]


def _evidence_properties(f: Mapping[str, Any]) -> list[tuple[str, Any]]:
    ev = view.evidence(f)
    if ev is not None and f["class"] == "modified":
        pairs: list[tuple[str, Any]] = [("origin", ev.get("origin")), ("evidence-error", ev.get("error"))]
        if ev.get("base"):
            pairs.append(("base", view.base_label(ev["base"])))
        pairs.append(("lines", f"+{int(ev.get('lines_added') or 0)} -{int(ev.get('lines_removed') or 0)}"))
        return pairs
    similar = f.get("similar")
    if isinstance(similar, Mapping) and f["class"] == "added":
        return [("similar", view.similar_label(similar))]
    return []


def file_json(f: Mapping[str, Any], flags: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The file component as the library writes it (``_file``): the same fields, sets in its order."""
    path = str(f["path"])
    hashes = [{"alg": "SHA-256", "content": str(f["sha256"])}]
    if f.get("sha1"):
        hashes.insert(0, {"alg": "SHA-1", "content": str(f["sha1"])})  # sorted by algorithm name
    findings = view.licence_findings(f)
    found = licence(str(lic["expression"]) for lic in findings)
    occurrence: dict[str, Any] = {"location": path}
    if findings and findings[0].get("line") is not None:
        occurrence["line"] = findings[0]["line"]
    evidence: dict[str, Any] = {"occurrences": [occurrence]}
    if found:
        evidence["licenses"] = [{"acknowledgement": "declared", "expression": found.value}]
    properties = sorted({(P + k, str(v)) for k, v in _file_properties(f, flags)})
    return {
        "bom-ref": f"file:{path}",
        "evidence": evidence,
        "hashes": hashes,
        "name": path,
        "properties": [{"name": k, "value": v} for k, v in properties],
        "type": "file",
    }


def _file(f: Mapping[str, Any], flags: list[Mapping[str, Any]]) -> Component:
    path = str(f["path"])
    hashes = [HashType(alg=HashAlgorithm.SHA_256, content=str(f["sha256"]))]
    if f.get("sha1"):
        hashes.append(HashType(alg=HashAlgorithm.SHA_1, content=str(f["sha1"])))
    findings = view.licence_findings(f)
    found = licence(str(lic["expression"]) for lic in findings)
    evidence = ComponentEvidence(
        licenses=[found] if found else [],
        occurrences=[Occurrence(location=path, line=findings[0].get("line") if findings else None)],
    )
    return Component(
        type=ComponentType.FILE,
        name=path,
        bom_ref=f"file:{path}",
        hashes=hashes,
        evidence=evidence,
        properties=props(_file_properties(f, flags)),
    )

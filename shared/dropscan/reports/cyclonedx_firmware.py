"""The firmware in the CycloneDX SBOM (issue 35): each image a component of type ``firmware`` holding
its binaries as sub-components (application, library, operating-system for the kernel and its modules,
firmware for a bootloader, file for bytes no format claimed), each with its status and the drop's
component as ``dropscan:`` properties, identity evidence (binary analysis, a confidence by how it was
named), the licence of the package it was identified as (concluded) and, when the drop's component is
its source (``corresponds``), that component as its pedigree's ancestor.

The library inserts each sub-component into a sorted set, comparing whole components, then serialises
element by element: 1.3 s for the router's 821 binaries. As for the drop's files (``cyclonedx``), the
library writes the image without them and each binary is written as a dict in the library's JSON form
and order (``binary_rows``): 0.04 s (docs/firmware.md, "Reports"); the tests check the result equals
the library's rendering."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from cyclonedx.model import HashAlgorithm, HashType
from cyclonedx.model.component import Component, ComponentType, Pedigree
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
from packageurl import PackageURL

from dropscan.reports import view

P = "dropscan:"
TYPES: dict[str, ComponentType] = {
    "application": ComponentType.APPLICATION,
    "library": ComponentType.LIBRARY,
    "operating-system": ComponentType.OPERATING_SYSTEM,
    "firmware": ComponentType.FIRMWARE,
    "file": ComponentType.FILE,
}
#: how sure a binary's identity is, by what named it (an ordinal scale, docs/firmware.md "Reports"): it
#: states package and version; it holds 10 or more of the drop's distinctive literals (and 10 % of its
#: strings); of an upstream release's; its SONAME or program name, or glibc's gconv folder
CONFIDENCE: dict[str, Decimal] = {
    "identifier": Decimal("0.95"),
    "literals": Decimal("0.8"),
    "upstream-literals": Decimal("0.7"),
    "soname": Decimal("0.6"),
    "gconv": Decimal("0.6"),
}


def image_ref(i: int) -> str:
    return f"firmware:{i}"


def components(
    manifest: Mapping[str, Any], supplier: OrganizationalEntity, *, binaries: bool = True
) -> list[Component]:
    """One ``firmware`` component per image of ``manifest["firmware"]``, its binaries within unless not
    ``binaries`` (then ``binary_rows`` writes them)."""
    out = []
    for i, section in enumerate(view.firmware_images(manifest), 1):
        ref = image_ref(i)
        out.append(
            Component(
                type=ComponentType.FIRMWARE,
                name=str(section.get("image")),
                bom_ref=ref,
                supplier=supplier,
                description=(
                    f"Firmware image checked against the source drop: verdict {section.get('verdict')} "
                    f"({view.FIRMWARE_VERDICTS.get(str(section.get('verdict')), '')})."
                ),
                properties=_props(_image_properties(section)),
                components=[_binary(manifest, b, ref) for b in view.binaries(section)] if binaries else [],
            )
        )
    return out


def _props(pairs: list[tuple[str, Any]]) -> list[Any]:
    from cyclonedx.model import Property

    return [Property(name=P + k, value=str(v)) for k, v in pairs if v is not None and v != ""]


def _image_properties(section: Mapping[str, Any]) -> list[tuple[str, Any]]:
    pairs: list[tuple[str, Any]] = [
        ("verdict", section.get("verdict")),
        ("arch", section.get("arch")),
        ("size", section.get("size")),
        ("stopped", section.get("stopped")),
        ("binaries", len(section.get("binaries") or [])),
        *((f"status:{s}", n) for s, n in view.status_counts(section).items()),
    ]
    kernel = section.get("kernel")
    if isinstance(kernel, Mapping):
        pairs += [
            ("kernel:version", kernel.get("version")),
            ("kernel:drop-version", kernel.get("drop_version")),
            ("kernel:version-mismatch", str(bool(kernel.get("version_mismatch"))).lower()),
            ("kernel:config-arch", kernel.get("config_arch")),
            ("kernel:config-arch-mismatch", str(bool(kernel.get("config_arch_mismatch"))).lower()),
            ("kernel:config-source", kernel.get("config_source")),
            ("kernel:option-differences", len(kernel.get("option_differences") or {})),
            ("kernel:modules-other-release", len(kernel.get("modules_other_release") or [])),
        ]
        pairs += [
            ("kernel:option", view.option_difference(k, v))
            for k, v in (kernel.get("option_differences") or {}).items()
        ]
    busybox = section.get("busybox")
    if isinstance(busybox, Mapping):
        pairs += [
            ("busybox:applets", busybox.get("applets")),
            ("busybox:not-configured", ", ".join(busybox.get("not_configured") or [])),
        ]
    return pairs


def _binary(manifest: Mapping[str, Any], b: Mapping[str, Any], image: str) -> Component:
    f = _Facts(manifest, b, image)
    identity = []
    if f.purl is not None and f.confidence is not None:
        method = Method(technique=AnalysisTechnique.BINARY_ANALYSIS, confidence=f.confidence, value=f.method)
        identity.append(
            Identity(
                field=IdentityField.PURL,
                confidence=f.confidence,
                concluded_value=f.purl.to_string(),
                methods=[method],
            )
        )
    ancestor = f.ancestor
    return Component(
        type=f.type,
        name=f.name,
        version=f.version,
        purl=f.purl,
        bom_ref=f.ref,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=f.sha256)] if f.sha256 else [],
        licenses=(
            [LicenseExpression(f.licence, acknowledgement=LicenseAcknowledgement.CONCLUDED)]
            if f.licence
            else []
        ),
        evidence=ComponentEvidence(identity=identity, occurrences=[Occurrence(location=f.path)]),
        pedigree=(
            Pedigree(
                ancestors=[
                    Component(
                        type=ComponentType.LIBRARY,
                        name=ancestor.name,
                        version=ancestor.version,
                        purl=ancestor.purl,
                        bom_ref=ancestor.ref,
                        description=ancestor.description,
                    )
                ]
            )
            if ancestor is not None
            else None
        ),
        properties=_props(f.properties),
    )


def binary_rows(manifest: Mapping[str, Any], i: int) -> list[dict[str, Any]]:
    """The binaries of the ``i``-th image (from 1) as ``_binary`` writes them through the library (JSON
    keys sorted), in the library's order: by type, name, version (None last), bom-ref."""
    section = view.firmware_images(manifest)[i - 1]
    facts = [_Facts(manifest, b, image_ref(i)) for b in section.get("binaries") or []]
    facts.sort(key=lambda f: (f.type.value, f.name, f.version is None, f.version or "", f.ref))
    return [f.json() for f in facts]


class _Ancestor:
    def __init__(self, name: str, version: str | None, ref: str, prefix: str) -> None:
        self.name, self.version, self.ref = name, version, ref
        self.purl = PackageURL(type="generic", name=name, version=version)
        self.description = f"The drop's {prefix}: the source this binary was built from."


class _Facts:
    """What a binary's component says, for the library's model and for its JSON alike."""

    def __init__(self, manifest: Mapping[str, Any], b: Mapping[str, Any], image: str) -> None:
        self.path = str(b["path"])
        package = str(b.get("package") or "")
        self.version = str(b["version"]) if b.get("version") else None
        self.name = package or view.file_name(self.path)
        self.purl = PackageURL(type="generic", name=package, version=self.version) if package else None
        self.ref = f"{image}:{self.path}"
        self.type = TYPES[view.binary_purpose(b)]
        self.sha256 = str(b["sha256"]) if b.get("sha256") else None
        self.licence = str(b["license"]) if b.get("license") else None
        by = str((b.get("evidence") or {}).get("by") or "none")
        self.confidence = CONFIDENCE.get(by)
        self.method = view.binary_evidence(b)
        status = str(b.get("status"))
        self.properties: list[tuple[str, Any]] = [
            ("status", status),
            ("component", b.get("component")),
            ("path", self.path),
            ("kind", b.get("kind")),
            ("arch", b.get("arch")),
            ("evidence", by),
            ("drop-has", view.drop_has(manifest, b) if status not in view.SATISFIED else None),
        ]
        self.ancestor = _ancestor(manifest, b, f"{self.ref}:source")

    def json(self) -> dict[str, Any]:
        evidence: dict[str, Any] = {"occurrences": [{"location": self.path}]}
        if self.purl is not None and self.confidence is not None:
            confidence = float(self.confidence)
            method = {"confidence": confidence, "technique": "binary-analysis", "value": self.method}
            evidence["identity"] = [
                {"concludedValue": self.purl.to_string(), "confidence": confidence, "field": "purl",
                 "methods": [method]}
            ]  # fmt: skip
        out: dict[str, Any] = {
            "bom-ref": self.ref,
            "evidence": evidence,
            "name": self.name,
            "type": self.type.value,
        }
        if self.sha256:
            out["hashes"] = [{"alg": "SHA-256", "content": self.sha256}]
        if self.licence:
            out["licenses"] = [{"acknowledgement": "concluded", "expression": self.licence}]
        if self.version is not None:
            out["version"] = self.version
        if self.purl is not None:
            out["purl"] = self.purl.to_string()
        a = self.ancestor
        if a is not None:
            ancestor = {"bom-ref": a.ref, "description": a.description, "name": a.name, "type": "library"}
            ancestor["purl"] = a.purl.to_string()
            if a.version is not None:
                ancestor["version"] = a.version
            out["pedigree"] = {"ancestors": [ancestor]}
        pairs = sorted({(P + k, str(v)) for k, v in self.properties if v is not None and v != ""})
        out["properties"] = [{"name": k, "value": v} for k, v in pairs]
        return dict(sorted(out.items()))


def _ancestor(manifest: Mapping[str, Any], b: Mapping[str, Any], ref: str) -> _Ancestor | None:
    """The drop's component as the binary's ancestor, when it is the binary's source (``corresponds``)."""
    c = view.drop_component(manifest, b.get("component"))
    if c is None or b.get("status") != "corresponds":
        return None
    package = str(c.get("package") or b.get("package") or "")
    version = str(c.get("version") or b.get("version") or "") or None
    return _Ancestor(package, version, ref, str(b.get("component"))) if package else None

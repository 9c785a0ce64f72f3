"""The firmware in the SPDX 2.3 document (issue 35): each image a Package of purpose FIRMWARE that the
document DESCRIBES beside the drop, each of its binaries a Package (APPLICATION, LIBRARY, OPERATING-SYSTEM
for the kernel and its modules, FIRMWARE for a bootloader, FILE for bytes no format claimed) the image
CONTAINS, with the licence of the package it was identified as concluded, its status in a comment and,
when the drop's source is not what it was built from, a REVIEW annotation.

A binary that corresponds to a component of the drop is GENERATED_FROM that component's Package. One that
states another version than the component holds (``wrong-version``) is not: it is related to it as OTHER,
the comment saying why, since GENERATED_FROM would assert the drop is its source."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from spdx_tools.spdx.model.actor import Actor, ActorType
from spdx_tools.spdx.model.annotation import Annotation, AnnotationType
from spdx_tools.spdx.model.checksum import Checksum, ChecksumAlgorithm
from spdx_tools.spdx.model.package import (
    ExternalPackageRef,
    ExternalPackageRefCategory,
    Package,
    PackagePurpose,
)
from spdx_tools.spdx.model.relationship import Relationship, RelationshipType
from spdx_tools.spdx.model.spdx_no_assertion import SpdxNoAssertion

from dropscan import __version__
from dropscan.reports import view
from dropscan.reports.spdx_licences import Licences, LicenceValue

PURPOSES: dict[str, PackagePurpose] = {
    "application": PackagePurpose.APPLICATION,
    "library": PackagePurpose.LIBRARY,
    "operating-system": PackagePurpose.OPERATING_SYSTEM,
    "firmware": PackagePurpose.FIRMWARE,
    "file": PackagePurpose.FILE,
}


@dataclass
class Elements:
    """What the firmware adds to the document."""

    packages: list[Package] = field(default_factory=list)
    relationships: list[Relationship] = field(default_factory=list)
    annotations: list[Annotation] = field(default_factory=list)


def elements(
    manifest: Mapping[str, Any],
    document_id: str,
    component_ids: Mapping[str, str],
    licences: Licences,
    when: datetime,
    make_id: Any,
) -> Elements:
    """The images and binaries of ``manifest["firmware"]``; ``component_ids``: each component's Package
    id by its prefix (without the trailing slash); ``make_id(kind, n, name)``: an SPDX id."""
    out = Elements()
    supplier = Actor(ActorType.ORGANIZATION, str(manifest.get("supplier") or "unknown"))
    tool = Actor(ActorType.TOOL, f"dropscan-{__version__}")
    n = 0
    for i, section in enumerate(view.firmware_images(manifest), 1):
        image_id = make_id("Firmware", i, str(section.get("image") or ""))
        out.packages.append(_image(section, image_id, supplier))
        out.relationships.append(Relationship(document_id, RelationshipType.DESCRIBES, image_id))
        for b in view.binaries(section):
            n += 1
            binary_id = make_id("Binary", n, view.file_name(str(b["path"])))
            out.packages.append(_binary(manifest, b, binary_id, licences))
            out.relationships.append(Relationship(image_id, RelationshipType.CONTAINS, binary_id))
            source = component_ids.get(str(b.get("component") or "").rstrip("/"))
            if source is not None and b.get("status") == "corresponds":
                why = f"Built from the drop's {b['component']} (evidence {view.binary_evidence(b)})."
                out.relationships.append(
                    Relationship(binary_id, RelationshipType.GENERATED_FROM, source, why)
                )
            elif source is not None:
                why = (
                    f"Not generated from it: the binary states {view.binary_name(b)}, the drop has "
                    f"{view.drop_has(manifest, b)} ({b.get('status')})."
                )
                out.relationships.append(Relationship(binary_id, RelationshipType.OTHER, source, why))
            if b.get("status") not in view.SATISFIED:
                out.annotations.append(
                    Annotation(binary_id, AnnotationType.REVIEW, tool, when, _status_text(manifest, b))
                )
    return out


def _image(section: Mapping[str, Any], image_id: str, supplier: Actor) -> Package:
    counts = ", ".join(f"{n:,} {s}" for s, n in view.status_counts(section).items()) or "none"
    verdict = str(section.get("verdict"))
    comment = [
        f"Firmware image {section.get('image')} ({int(section.get('size') or 0):,} bytes, "
        f"{section.get('arch') or 'architecture unknown'}) checked against the drop: verdict {verdict} "
        f"({view.FIRMWARE_VERDICTS.get(verdict, verdict)}). Binaries: {counts}."
    ]
    if section.get("stopped"):
        comment.append(f"Unpacking stopped: {section['stopped']}.")
    kernel = section.get("kernel")
    if isinstance(kernel, Mapping):
        comment.append("Kernel: " + " ".join(view.kernel_facts(kernel)))
        comment += [
            view.option_difference(k, v) + "." for k, v in (kernel.get("option_differences") or {}).items()
        ]
    busybox = section.get("busybox")
    if isinstance(busybox, Mapping) and busybox.get("not_configured"):
        comment.append(
            f"BusyBox applets not configured in the drop's .config: {', '.join(busybox['not_configured'])}."
        )
    return Package(
        spdx_id=image_id,
        name=str(section.get("image")),
        file_name=str(section.get("image")),
        download_location=SpdxNoAssertion(),
        supplier=supplier,
        files_analyzed=False,
        primary_package_purpose=PackagePurpose.FIRMWARE,
        comment=" ".join(comment),
    )


def _binary(manifest: Mapping[str, Any], b: Mapping[str, Any], binary_id: str, licences: Licences) -> Package:
    path = str(b["path"])
    concluded: LicenceValue = SpdxNoAssertion()
    if b.get("license"):
        concluded = licences.expression(str(b["license"]), where=f"as the licence of {path}")
    package = str(b.get("package") or "")
    purl = (
        view.purl({"identified": True, "package": package, "version": b.get("version")}) if package else None
    )
    evidence = (b.get("evidence") or {}).get("by")
    return Package(
        spdx_id=binary_id,
        name=package or view.file_name(path),
        version=str(b["version"]) if b.get("version") else None,
        file_name=path,
        download_location=SpdxNoAssertion(),
        files_analyzed=False,
        checksums=[Checksum(ChecksumAlgorithm.SHA256, str(b["sha256"]))] if b.get("sha256") else [],
        license_concluded=concluded,
        license_declared=SpdxNoAssertion(),
        license_comment=(
            f"licenseConcluded is the licence of {package}, which dropscan identified the binary as "
            f"(by {evidence})."
            if package and b.get("license")
            else None
        ),
        external_references=(
            [ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", purl)] if purl else []
        ),
        primary_package_purpose=PURPOSES[view.binary_purpose(b)],
        comment=f"{b.get('kind')} for {b.get('arch') or 'an architecture not read'}; "
        + _status_text(manifest, b)
        + f"; evidence {view.binary_evidence(b)}.",
    )


def _status_text(manifest: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """``firmware status wrong-version: busybox 1.35.0 (GPL-2.0-only); the drop has busybox 1.30.1 …``."""
    licence = f" ({b['license']})" if b.get("license") else ""
    return (
        f"firmware status {b.get('status')}: {view.binary_name(b)}{licence}; "
        f"the drop has {view.drop_has(manifest, b)}"
    )

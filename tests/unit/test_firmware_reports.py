"""The firmware part of every report (issue 35): the router image built from Debian's mipsel binaries
checked against a drop of BusyBox 1.35.0's real release filed as 1.30.1 (so the shipped busybox is
``wrong-version``), the kernel's Makefile, a .config that differs from the modules in one option, and a
vendor's non-commercial file of an applet the image's busybox was not built with. One section, built once
for the module (about 2 s), attached to a manifest of that drop the way the pipeline will attach it."""

from __future__ import annotations

import copy
import hashlib
import html
import io
import json
import re
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from spdx_tools.spdx.model.package import PackagePurpose
from spdx_tools.spdx.model.relationship import RelationshipType
from spdx_tools.spdx.parser.json import json_parser
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from dropscan.audit.flags import term_flags
from dropscan.audit.manifest import build_manifest, verdict
from dropscan.reports import FORMATS, firmware_html, render, view
from dropscan.reports import cyclonedx as cyclonedx_report
from dropscan.reports import html as html_report
from dropscan.reports.spdx_elements import build_document
from dropscan.reports.summary import body, message_attributes, subject
from dropscan.stages.firmware_check import attach, firmware_section

from helpers.browser import rgb, screenshot
from helpers.builders import busybox_orig
from helpers.firmware_drops import UNUSED_TEXT
from helpers.firmware_images import firmware_cache

Manifest = dict[str, Any]

BUSYBOX = "busybox-1.30.1"  # BusyBox 1.35.0's release under another version's name: the wrong source
LINUX = "linux-6.1.176"
KERNEL_MAKEFILE = "VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 176\nEXTRAVERSION =\nNAME = Curry Ramen\n"
BUSYBOX_CONFIG = "CONFIG_LS=y\nCONFIG_ASH=y\n# CONFIG_HTTPD is not set\n"
KBUILD = {
    f"{LINUX}/drivers/usb/storage/Makefile": "obj-$(CONFIG_USB_UAS)\t\t+= uas.o\n",
    f"{LINUX}/fs/squashfs/Makefile": "obj-$(CONFIG_SQUASHFS) += squashfs.o\n",
}
LS = f"{BUSYBOX}/coreutils/ls.c"
UNUSED = f"{BUSYBOX}/miscutils/vendor_ledctl.c"  # helpers.firmware_drops' vendor file, in this tree
BUSYBOX_PATH = "router.bin@0x4c0000:squashfs!/bin/busybox"
VALIDATOR = JsonStrictValidator(SchemaVersion.V1_6)


def _drop(target: Path, kernel_config: str) -> dict[str, bytes]:
    """The drop (tar.gz at ``target``); returns the files of it the manifest lists (path -> bytes)."""
    listed: dict[str, bytes] = {}
    with tarfile.open(busybox_orig()) as src, tarfile.open(target, "w:gz") as out:
        for member in src:
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            member.name = BUSYBOX + "/" + member.name.split("/", 1)[-1] if "/" in member.name else BUSYBOX
            out.addfile(member, io.BytesIO(data) if data is not None else None)
            if data is not None and member.name.startswith(f"{BUSYBOX}/coreutils/"):
                listed[member.name] = data  # a part of the tree, enough for every report to list files
        files = {
            f"{LINUX}/Makefile": KERNEL_MAKEFILE,
            f"{LINUX}/.config": kernel_config,
            f"{BUSYBOX}/.config": BUSYBOX_CONFIG,
            UNUSED: UNUSED_TEXT,
            **KBUILD,
        }
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            out.addfile(info, io.BytesIO(text.encode()))
            listed[name] = text.encode()
    return listed


def _entry(path: str, data: bytes) -> dict[str, Any]:
    added = path in (UNUSED, f"{LINUX}/.config", f"{BUSYBOX}/.config")
    return {
        "path": path,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "sha1": hashlib.sha1(data).hexdigest(),
        "kind": "text",
        "class": "added" if added else "modified" if path == LS else "identical",
        "component": BUSYBOX if path.startswith(BUSYBOX) else LINUX,
        "licenses": [],
    }


def _component(prefix: str, package: str, version: str, files: list[dict[str, Any]]) -> dict[str, Any]:
    mine = [f for f in files if f["component"] == prefix]
    classes = {c: sum(1 for f in mine if f["class"] == c) for c in ("identical", "modified", "added")}
    return {
        "prefix": prefix,
        "package": package,
        "version": version,
        "identified": True,
        "match_pct": round(100.0 * classes["identical"] / len(mine), 2),
        "files": len(mine),
        "classes": {"empty": 0, "vcs-keywords": 0, "whitespace": 0, "low-trust": 0, **classes},
        "missing": [],
        "license": "GPL-2.0-only",
        "trust": "high",
    }


def _manifest(listed: dict[str, bytes]) -> Manifest:
    files = [_entry(p, data) for p, data in listed.items()]
    components = [
        _component(BUSYBOX, "busybox", "1.30.1", files),
        _component(LINUX, "linux", "6.1.176", files),
    ]
    m = build_manifest(
        scan_id="fw-reports-1",
        supplier="acme-router",
        source={
            "bucket": "drops",
            "key": "drops/acme-router/router-gpl.tar.gz",
            "size": 1,
            "sha256": "0" * 64,
        },
        status="complete",
        reason=None,
        files=files,
        components=components,
        stats={},
        created_at="2026-12-07T10:00:00+00:00",
        finished_at="2026-12-07T10:00:05+00:00",
    )
    flagged = [f.to_json() for f in term_flags(UNUSED, BUSYBOX, UNUSED_TEXT, [])]
    used = {
        "kind": "license-different",
        "severity": "review",
        "path": LS,
        "line": 3,
        "component": BUSYBOX,
        "detail": "A vendor's licence statement in a GPL-2.0-only component.",
    }
    m["flags"] = [*flagged, used]
    m["summary"]["flags"] = {
        s: sum(1 for f in m["flags"] if f["severity"] == s) for s in ("action-required", "review")
    }
    m["verdict"] = verdict(m["status"], m["summary"])
    return m


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Manifest, Manifest]:
    """The manifest before and after its ``firmware`` part: router.bin against the drop (one section)."""
    cache = firmware_cache()
    (config,) = (cache / "work" / "kernel-package" / "boot").glob("config-*")
    # the image's modules imply CONFIG_USB_UAS=m; this .config builds it in
    kernel_config = config.read_text().replace("CONFIG_USB_UAS=m", "CONFIG_USB_UAS=y")
    drop = tmp_path_factory.mktemp("drop") / "router-gpl.tar.gz"
    before = _manifest(_drop(drop, kernel_config))
    section = firmware_section(cache / "images" / "router.bin", before, drop)
    return before, attach(copy.deepcopy(before), [section])


@pytest.fixture
def manifest(pair: tuple[Manifest, Manifest]) -> Manifest:
    return copy.deepcopy(pair[1])


@pytest.fixture
def plain(pair: tuple[Manifest, Manifest]) -> Manifest:
    """The same manifest without a firmware image."""
    return copy.deepcopy(pair[0])


def _section(m: Manifest) -> dict[str, Any]:
    (section,) = m["firmware"]["images"]
    return section  # type: ignore[no-any-return]


def _busybox(section: dict[str, Any]) -> dict[str, Any]:
    (busybox,) = [b for b in section["binaries"] if b["path"] == BUSYBOX_PATH]
    return busybox  # type: ignore[no-any-return]


def test_the_section_is_the_case_the_reports_are_checked_on(manifest: Manifest) -> None:
    section = _section(manifest)
    statuses = Counter(b["status"] for b in section["binaries"])
    assert {"corresponds", "wrong-version", "source-missing", "no-obligation"} <= set(statuses)
    assert _busybox(section)["status"] == "wrong-version" and manifest["firmware"]["verdict"] == "wrong"
    assert section["kernel"]["option_differences"] == {"CONFIG_USB_UAS": ["m", "y", "modules"]}
    assert section["busybox"]["not_configured"] == ["httpd"]
    in_binary = {f["path"]: f.get("in_binary") for f in manifest["files"]}
    assert (in_binary[UNUSED], in_binary[LS]) == (False, True)


# ------------------------------------------------------------------ summary and e-mail
def test_the_summary_lists_the_wrong_busybox_with_both_versions(manifest: Manifest) -> None:
    text = body(manifest)
    assert "Firmware:  wrong (router.bin)" in text
    (line,) = [x for x in text.splitlines() if x.strip().startswith(f"wrong-version  {BUSYBOX_PATH}")]
    assert "busybox 1.35.0, GPL-2.0-only; the drop has busybox 1.30.1 (busybox-1.30.1)" in line


def test_the_summary_counts_binaries_by_status_and_states_the_checks(manifest: Manifest) -> None:
    section = _section(manifest)
    text = body(manifest)
    (image,) = [x for x in text.splitlines() if x.startswith("  router.bin (13,")]
    for status, n in section["summary"]["statuses"].items():
        assert f"{n:,} {status}" in image
    assert f"{len(section['binaries']):,} binaries" in image
    unmet = [b for b in section["binaries"] if b["status"] not in ("corresponds", "no-obligation")]
    assert f"Binaries whose source the drop does not hold as built ({len(unmet):,}):" in text
    # more than the limit: by package first (glibc's 272 binaries in one line), then the first few
    (glibc,) = [x for x in text.splitlines() if x.strip().startswith("source-missing glibc 2.36")]
    assert f"{sum(1 for b in unmet if b['package'] == 'glibc'):,}  the drop has no source of it" in glibc
    assert "Linux 6.1.176 (mips); the drop's Makefile says 6.1.176: the same." in text
    assert "The drop's .config is for mips: the same architecture." in text
    assert "1 of the 2 options its modules and built-ins imply differs from the drop's .config." in text
    assert "CONFIG_USB_UAS: m in the image (modules), y in the drop" in text
    assert "Every module is built for this kernel release." in text
    assert "BusyBox: 269 applets; 1 not configured in the drop's .config: httpd" in text
    assert "busybox-1.30.1: 259 in, 150 not, 337 cannot be told" in text


def test_the_subject_ends_with_the_firmware_verdict(manifest: Manifest, plain: Manifest) -> None:
    said = subject(manifest)
    assert said.endswith("; firmware wrong") and len(said) <= 99
    assert said.removesuffix("; firmware wrong") in subject(plain) or "…" in said
    assert "firmware" not in subject(plain)
    manifest["supplier"] = "a-supplier-with-a-very-long-name-" * 3
    assert subject(manifest).endswith("need review; firmware wrong") and len(subject(manifest)) <= 99
    assert message_attributes(manifest)["firmware"] == {"DataType": "String", "StringValue": "wrong"}
    assert "firmware" not in message_attributes(plain)


def test_flags_in_files_not_in_the_firmware_come_last_and_say_so(manifest: Manifest, plain: Manifest) -> None:
    # without the image the non-commercial file's flag, the more severe, comes first
    assert [f["path"] for f in view.flags(plain)] == [UNUSED, LS]
    assert [f["path"] for f in view.flags(manifest)] == [LS, UNUSED]
    text = body(manifest)
    (flag,) = [x for x in text.splitlines() if "non-commercial" in x and UNUSED in x]
    assert flag.endswith("(not in the firmware)")
    assert "not in the firmware" not in body(plain)
    rows = re.findall(r'<tr class="flag [^"]*">.*?</tr>', render(manifest, "html"), re.S)
    # the red flags section, then the component's own list: each in that order
    assert [html_report.path(UNUSED) in r for r in rows] == [False, True, False, True]
    assert "not in the firmware" in rows[1] and "not in the firmware" not in rows[0]


def test_the_review_set_says_which_files_are_in_the_firmware(manifest: Manifest) -> None:
    lines = body(manifest).splitlines()
    assert any(
        x.strip().startswith("added") and x.endswith(f"{UNUSED}  (not in the firmware)") for x in lines
    )
    assert any(x.endswith(f"{LS}  (in the firmware)") for x in lines)
    page = render(manifest, "html")
    rows = re.findall(r"<tr><td class=\"path\">.*?</tr>", page, re.S)
    ls = [r for r in rows if html_report.path(LS) in r]
    assert ls and '<div class="ev muted in-binary">in the firmware</div>' in ls[0]


def test_without_firmware_the_text_says_nothing_of_it(plain: Manifest) -> None:
    text = render(plain, "text")
    assert "Firmware" not in text and "in the firmware" not in text
    page = render(plain, "html")
    assert 'id="firmware"' not in page and "in the firmware" not in page


# ------------------------------------------------------------------ HTML
def test_the_html_has_one_row_per_binary_with_its_status(manifest: Manifest) -> None:
    section = _section(manifest)
    page = render(manifest, "html")
    assert 'id="firmware"' in page
    rows = re.findall(r'<tr class="binary ([a-z-]+)">(.*?)</tr>', page, re.S)
    assert len(rows) == len(section["binaries"])
    assert Counter(status for status, _ in rows) == Counter(b["status"] for b in section["binaries"])
    first_status, first = rows[0]  # the binaries a reader acts on first
    assert first_status == "wrong-version" and html_report.path("/bin/busybox") in first
    colour = firmware_html.STATUS_COLOURS["wrong-version"]
    assert f'<span class="badge" style="background:{colour}">wrong-version</span>' in first
    assert "the drop has busybox 1.30.1 (busybox-1.30.1)" in first and "identifier: BusyBox v1.35.0" in first
    cells = re.findall(r"<td[^>]*>(.*?)</td>", first, re.S)
    assert cells[1:5] == ["mips", "busybox", "1.35.0", "GPL-2.0-only"]
    options = re.search(r'<table class="options">(.*?)</table>', page, re.S)
    assert options and "<code>CONFIG_USB_UAS</code></td><td>m</td><td>y</td>" in options.group(1)
    assert "Firmware</dt><dd>" in page and "httpd" in page


def test_a_hostile_binary_path_renders_escaped(tmp_path: Path, plain: Manifest) -> None:
    # a real image: a tar.gz root file system holding dropbear under a name that is markup
    hostile = '<img src=x onerror="alert(1)">&\''
    elf = (firmware_cache() / "work" / "rootfs" / "usr" / "sbin" / "dropbear").read_bytes()
    image = tmp_path / "vendor<fw>.tar.gz"
    with tarfile.open(image, "w:gz") as out:
        info = tarfile.TarInfo(f"usr/sbin/{hostile}")
        info.size, info.mode = len(elf), 0o755
        out.addfile(info, io.BytesIO(elf))
    with tarfile.open(drop := tmp_path / "empty.tar.gz", "w:gz"):
        pass
    section = firmware_section(image, plain, drop)
    (binary,) = section["binaries"]
    assert binary["path"].endswith(hostile) and binary["kind"] == "elf"
    m = attach(plain, [section])
    page = render(m, "html")
    assert hostile not in page and "<fw>" not in page and 'onerror="' not in page
    assert html.escape(hostile, quote=True) in page.replace("<wbr>", "")
    assert "vendor&lt;fw&gt;.tar.gz" in page
    # the SBOMs carry the name as it is, and stay valid
    spdx = tmp_path / "sbom.spdx.json"
    spdx.write_text(render(m, "spdx"))
    doc = json_parser.parse_from_file(str(spdx))
    assert [v.validation_message for v in validate_full_spdx_document(doc)] == []
    cdx = json.loads(text := render(m, "cyclonedx"))
    (image,) = [c for c in cdx["components"] if c["type"] == "firmware"]
    assert VALIDATOR.validate_str(text) is None
    (props,) = [{p["name"]: p["value"] for p in c["properties"]} for c in image["components"]]
    assert props["dropscan:path"] == binary["path"]


def test_the_html_in_chromium_shows_the_status_badges(manifest: Manifest, tmp_path: Path) -> None:
    im = screenshot(tmp_path, render(manifest, "html"), "firmware")
    colours = {c: n for n, c in im.getcolors(1 << 20)}
    # the verdicts, the legend, the first rows: busybox's wrong version, glibc's missing source
    assert colours.get(rgb(firmware_html.STATUS_COLOURS["wrong-version"]), 0) > 5_000
    assert colours.get(rgb(firmware_html.STATUS_COLOURS["source-missing"]), 0) > 8_000


# ------------------------------------------------------------------ SPDX
def test_the_spdx_document_validates_with_the_firmware_generated_from_the_drop(
    manifest: Manifest, tmp_path: Path
) -> None:
    section = _section(manifest)
    path = tmp_path / "sbom.spdx.json"
    path.write_text(render(manifest, "spdx"))
    doc = json_parser.parse_from_file(str(path))
    assert [v.validation_message for v in validate_full_spdx_document(doc)] == []
    packages = {p.spdx_id: p for p in doc.packages}
    (image,) = [
        p
        for p in doc.packages
        if p.primary_package_purpose == PackagePurpose.FIRMWARE and p.name == "router.bin"
    ]
    contained = [
        str(r.related_spdx_element_id)
        for r in doc.relationships
        if r.spdx_element_id == image.spdx_id and r.relationship_type == RelationshipType.CONTAINS
    ]
    assert len(contained) == len(section["binaries"])
    binaries = {packages[i].file_name: packages[i] for i in contained}
    busybox = binaries[BUSYBOX_PATH]
    assert (busybox.name, busybox.version, str(busybox.license_concluded)) == (
        "busybox",
        "1.35.0",
        "GPL-2.0-only",
    )
    assert busybox.primary_package_purpose == PackagePurpose.APPLICATION
    assert "firmware status wrong-version" in str(busybox.comment)
    assert any(
        a.spdx_id == busybox.spdx_id and "wrong-version" in a.annotation_comment for a in doc.annotations
    )
    names = {p.spdx_id: p.name for p in doc.packages}
    generated = [(r.spdx_element_id, names[str(r.related_spdx_element_id)]) for r in doc.relationships
                 if r.relationship_type == RelationshipType.GENERATED_FROM]  # fmt: skip
    mapped = [b for b in section["binaries"] if b["status"] == "corresponds" and b["component"] == LINUX]
    assert len(generated) == len(mapped) > 400 and {n for _, n in generated} == {"linux"}
    # the wrong busybox is not said to be generated from the drop's other release
    assert all(i != busybox.spdx_id for i, _ in generated)
    libc = binaries["router.bin@0x4c0000:squashfs!/lib/mipsel-linux-gnu/libc.so.6"]
    assert libc.primary_package_purpose == PackagePurpose.LIBRARY
    kernel = next(p for p in binaries.values() if p.name == "linux" and p.version == "6.1.176")
    assert kernel.primary_package_purpose == PackagePurpose.OPERATING_SYSTEM


def test_spdx_written_from_dicts_equals_what_spdx_tools_writes_of_the_model(manifest: Manifest) -> None:
    from spdx_tools.spdx.writer.json.json_writer import write_document_to_stream

    stream = io.StringIO()
    write_document_to_stream(build_document(manifest), stream, validate=False)
    assert json.loads(render(manifest, "spdx")) == json.loads(stream.getvalue())


# ------------------------------------------------------------------ CycloneDX
def test_the_cyclonedx_sbom_validates_with_the_firmware_and_its_binaries(manifest: Manifest) -> None:
    section = _section(manifest)
    text = render(manifest, "cyclonedx")
    assert VALIDATOR.validate_str(text) is None
    bom = json.loads(text)
    (image,) = [c for c in bom["components"] if c["type"] == "firmware"]
    assert image["name"] == "router.bin" and len(image["components"]) == len(section["binaries"])
    by_path = {c["evidence"]["occurrences"][0]["location"]: c for c in image["components"]}
    busybox = by_path[BUSYBOX_PATH]
    props = {p["name"]: p["value"] for p in busybox["properties"]}
    assert (props["dropscan:status"], props["dropscan:component"]) == ("wrong-version", BUSYBOX)
    assert (busybox["type"], busybox["purl"]) == ("application", "pkg:generic/busybox@1.35.0")
    assert busybox["licenses"] == [{"acknowledgement": "concluded", "expression": "GPL-2.0-only"}]
    (identity,) = busybox["evidence"]["identity"]
    assert identity["methods"][0]["technique"] == "binary-analysis" and identity["confidence"] > 0.9
    assert "pedigree" not in busybox  # the drop's 1.30.1 is not its source
    modules = [c for c in image["components"] if c["name"] == "linux" and "version" not in c]
    assert modules and all(c["type"] == "operating-system" for c in modules)
    assert {a["purl"] for c in modules for a in c["pedigree"]["ancestors"]} == {"pkg:generic/linux@6.1.176"}
    drop_props = {p["name"]: p["value"] for p in bom["metadata"]["component"]["properties"]}
    assert drop_props["dropscan:firmware:verdict"] == "wrong"


def test_cyclonedx_written_as_a_stream_equals_the_librarys_rendering(manifest: Manifest) -> None:
    whole = json.loads(JsonV1Dot6(cyclonedx_report.build_bom(manifest)).output_as_string())
    assert json.loads(render(manifest, "cyclonedx")) == whole


def test_every_report_is_the_same_for_the_same_manifest(manifest: Manifest) -> None:
    for fmt in FORMATS:
        assert render(manifest, fmt) == render(copy.deepcopy(manifest), fmt), fmt


def test_what_could_not_be_unpacked_is_said_in_the_summary_and_the_page(
    tmp_path: Path, plain: Manifest
) -> None:
    # the router's xz squashfs cut in half: its blob is unreadable, and the reader must be told
    whole = (firmware_cache() / "images" / "rootfs-xz.squashfs").read_bytes()
    cut = tmp_path / "cut.squashfs"
    cut.write_bytes(whole[: len(whole) // 2])
    with tarfile.open(drop := tmp_path / "empty.tar.gz", "w:gz"):
        pass
    section = firmware_section(cut, plain, drop)
    (blob,) = [b for b in section["blobs"] if b["status"] == "unreadable"]
    m = attach(plain, [section])
    (line,) = [x for x in body(m).splitlines() if x.strip().startswith("Unreadable:")]
    assert line.strip() == f"Unreadable: {blob['path']} (squashfs): {blob['reason']}"
    assert blob["reason"].startswith("unsquashfs failed")
    page = render(m, "html")
    assert "<b>1 unreadable</b>" in page and html.escape(blob["reason"]) in page

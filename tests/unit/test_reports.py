"""The reports of a manifest: text, HTML (also as Chromium renders it), SPDX 2.3, CycloneDX 1.6, the CLI."""

from __future__ import annotations

import copy
import gzip
import hashlib
import html
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from spdx_tools.spdx.model.document import Document
from spdx_tools.spdx.model.spdx_none import SpdxNone
from spdx_tools.spdx.parser.json import json_parser
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from dropscan.audit.manifest import build_manifest, to_json, validate, verdict
from dropscan.cli import main
from dropscan.reports import FORMATS, render, render_all
from dropscan.reports import cyclonedx as cyclonedx_report
from dropscan.reports import html as html_report
from dropscan.reports.spdx import Rendering
from dropscan.reports.spdx_elements import build_document
from dropscan.reports.summary import body
from dropscan.reports.view import components

from helpers.browser import rgb, screenshot

SAMPLE = Path(__file__).parents[1] / "data" / "busybox-acme.manifest.json.gz"
BUSYBOX = "busybox-1.35.0-acme/"
CRC = BUSYBOX + "lib/acme_crc.c"

Manifest = dict[str, Any]


@pytest.fixture
def sample() -> Manifest:
    """A real scan of the BusyBox acceptance drop with the triage fields of issue 5 (tests/data)."""
    data: Manifest = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    return data


def without_triage(m: Manifest) -> Manifest:
    """The same scan as a manifest written before triage: no licences, flags, trust, reports or SHA-1."""
    old = copy.deepcopy(m)
    for key in ("flags", "triage", "reports"):
        old.pop(key)
    old["summary"].pop("flags")
    for c in old["components"]:
        c.pop("license")
        c.pop("trust")
    for f in old["files"]:
        f.pop("licenses", None)
        f.pop("sha1", None)
    old["verdict"] = verdict(old["status"], old["summary"])
    return old


@pytest.fixture
def old(sample: Manifest) -> Manifest:
    return without_triage(sample)


def review_paths(m: Manifest) -> set[str]:
    return {f["path"] for f in m["files"] if f["class"] in ("modified", "added")}


def test_sample_manifests_follow_the_schema(sample: Manifest, old: Manifest) -> None:
    validate(sample)
    validate(old)
    assert sample["verdict"] == "action-required" and old["verdict"] == "review"


def test_files_without_a_component_key_go_to_the_longest_matching_prefix(sample: Manifest) -> None:
    nested = {**sample["components"][1], "prefix": BUSYBOX + "drivers/acme/"}
    sample["components"].append(nested)
    for f in sample["files"] + sample["flags"]:
        del f["component"]
    views = {v.prefix: v for v in components(sample)}
    assert {f["path"] for f in views[nested["prefix"]].review} == {
        p for p in review_paths(sample) if p.startswith(nested["prefix"])
    }
    assert not any(f["path"].startswith(nested["prefix"]) for f in views[BUSYBOX].review)
    assert {fl["path"] for fl in views[nested["prefix"]].flags} >= {BUSYBOX + "drivers/acme/blob_0.o"}


# ------------------------------------------------------------------ text
def test_text_lists_red_flags_most_severe_first_with_evidence(sample: Manifest) -> None:
    text = render(sample, "text")
    # over SNS's 99 characters the drop name gives way, never the verdict or the counts
    subject = text.splitlines()[0]
    assert subject.startswith("dropscan: acme-router/acme-busyb…") and len(subject) <= 99
    assert subject.endswith("— action-required: 212 of 2,841 files (7.5%) need review")
    flags = text[text.index("Red flags (6 action required, 5 to review):") :].split("\n\n", 1)[0]
    severities = [line.split()[0] for line in flags.splitlines()[1:] if re.match(r"  \S", line)]
    assert severities == ["ACTION"] * 6 + ["review"] * 5
    assert f"non-commercial       {CRC}:4" in flags
    assert "> Permission granted for non-commercial use only. Commercial use requires a licence." in flags


def test_text_sums_up_licences_of_the_review_set_and_names_the_reports(sample: Manifest) -> None:
    text = body(sample)
    assert f"  added     {BUSYBOX}drivers/acme/acme_001.c  [BSD-3-Clause]" in text
    assert (
        "busybox 1.35.0 [busybox-1.35.0-acme/] — high trust, upstream licence GPL-2.0-only (GNU General"
        " Public License v2.0 only), 2,836 files" in text
    )
    assert "4 upstream files missing" in text
    assert f"  html       results/acme-router/{sample['scan_id']}/report.html" in text


def test_text_names_every_licence_and_says_what_scancodes_own_ids_mean(sample: Manifest) -> None:
    text = body(sample)
    assert re.search(r"BSD-3-Clause +2 files +\(acme_001\.c, acme_005\.c\) — BSD 3-Clause \"New\"", text)
    [line] = [x for x in text.splitlines() if x.startswith("  LicenseRef-scancode-proprietary-license ")]
    assert line.endswith("— ScanCode: a proprietary notice: rights reserved, no open licence granted")


def test_html_names_every_licence_and_says_what_scancodes_own_ids_mean(sample: Manifest) -> None:
    page = html.unescape(re.sub(r"<[^>]+>", "", render(sample, "html")))
    assert 'BSD-3-Clause (spdx-tag, line 3) BSD 3-Clause "New" or "Revised" License' in page
    assert (
        "LicenseRef-scancode-proprietary-license (scancode, line 3) ScanCode: a proprietary notice: rights "
        "reserved, no open licence granted"
    ) in page
    licence = str(sample["components"][0]["license"])
    assert f"upstream licence {licence} (GNU General Public License" in page


def test_a_local_run_lists_its_own_files_and_the_database_it_used(sample: Manifest) -> None:
    held = {"busybox": ["1.35.0"]}
    sample["database"] = {"kind": "embedded", "location": "/home/u/.local/share/dropscan",
                          "table": "t", "packages": 1, "releases": 1, "held": held}  # fmt: skip
    text = body(sample, local={"manifest": "/tmp/out/m.json", "html": "/tmp/out/report.html"})
    assert "Database:  /home/u/.local/share/dropscan (embedded; 1 package, 1 release: busybox 1.35.0)" in text
    reports = text[text.index("Reports") :]
    assert "  html       /tmp/out/report.html" in reports and "results/" not in reports


def test_one_of_a_thing_is_said_in_the_singular(sample: Manifest) -> None:
    sample["components"][0]["missing"] = sample["components"][0]["missing"][:1]
    sample["summary"] |= {"backported": 0, "vendor_changed": 1}
    text = body(sample)
    assert "1 upstream file missing" in text and "1 vendor-changed file." in text


@pytest.mark.parametrize("supplier", ["acme-router", "a-supplier-with-a-very-long-name-" * 3])
@pytest.mark.parametrize("delta", [False, True])
def test_the_subject_never_cuts_a_phrase_the_drop_name_gives_way(
    sample: Manifest, supplier: str, delta: bool
) -> None:
    sample["supplier"] = supplier
    sample["source"]["key"] = f"drops/{supplier}/" + "acme-busybox-1.35.0-with-a-long-name-" * 4 + ".tar.gz"
    if delta:
        sample["delta"] = {"previous": {"scan_id": "s-1", "key": "drops/x/old.tar.gz", "version": "1.34.1"},
                           "new": ["a"] * 6, "changed": [], "removed": []}  # fmt: skip
    text = render(sample, "text").splitlines()[0]
    assert len(text) <= 99
    tail = "212 of 2,841 files (7.5%)" + (", 6 new since 1.34.1" if delta else " need review")
    assert text.endswith("— action-required: " + tail), text


def test_text_of_a_manifest_before_triage_has_no_triage_sections(old: Manifest) -> None:
    text = body(old)
    assert "busybox 1.35.0 [busybox-1.35.0-acme/] — 2,836 files, 92.4 % identical" in text
    for absent in ("Red flags", "Licences stated", "Reports (beside"):
        assert absent not in text
    assert "Review set:" in text


# ------------------------------------------------------------------ HTML
def html_path(p: str) -> str:
    return html.escape(p, quote=True).replace("/", "/<wbr>")


def test_html_sections_come_in_reading_order(sample: Manifest) -> None:
    page = render(sample, "html")
    marks = ['id="method"', 'id="flags"', 'class="component"', 'id="unreadable"', "<footer"]
    positions = [page.index(m) for m in marks]
    assert positions == sorted(positions)
    assert page.count('class="component"') == len(sample["components"])


def test_html_red_flags_are_severity_ordered(sample: Manifest) -> None:
    page = render(sample, "html")
    table = page[page.index('id="flags"') : page.index('class="component"')]
    rows = re.findall(r'<tr class="flag ([a-z-]+)">', table)
    assert rows == ["action-required"] * 6 + ["review"] * 5
    assert html_path(CRC) in table and "Permission granted for non-commercial use only." in table


def test_html_lists_the_review_set_and_never_identical_files(sample: Manifest) -> None:
    page = render(sample, "html")
    assert all(html_path(p) in page for p in review_paths(sample))
    identical = [f["path"] for f in sample["files"] if f["class"] == "identical"]
    assert not [p for p in identical if html_path(p) in page]
    assert "LicenseRef-scancode-proprietary-license (scancode, line 4)" in page


def test_html_escapes_supplier_paths_and_evidence(sample: Manifest) -> None:
    evil = BUSYBOX + 'x/<script>alert(1)</script>" onmouseover="steal().c'
    f = next(f for f in sample["files"] if f["path"] == CRC)
    f["path"] = evil
    sample["flags"][0].update(path=evil, evidence="<img src=x onerror=alert(2)>")
    f["licenses"][0]["text"] = "</td><script>alert(3)</script>"
    page = render(sample, "html")
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert '" onmouseover="' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot; onmouseover=&quot;steal().c" in page.replace(
        "<wbr>", ""
    )
    assert "&lt;img src=x onerror=alert(2)&gt;" in page


def test_html_is_self_contained(sample: Manifest) -> None:
    page = render(sample, "html")
    for fetch in (r"<script", r"<link", r"<img", r"<iframe", r"\bsrc=", r"url\(", r"@import", r"https?://"):
        assert not re.search(fetch, page, re.IGNORECASE), fetch


def test_html_of_a_manifest_before_triage_says_triage_was_not_done(old: Manifest) -> None:
    page = render(old, "html")
    assert "This manifest carries no licence triage" in page
    assert '<tr class="flag' not in page and "Licence statements found" not in page
    assert all(html_path(p) in page for p in review_paths(old))


def test_html_of_a_rejected_upload_renders_its_reason() -> None:
    m = build_manifest(
        scan_id="s-" + "1" * 24,
        supplier="acme",
        source={"bucket": "b", "key": "drops/acme/empty.tar.gz", "size": 0, "sha256": None},
        status="rejected",
        reason="the upload is empty",
        files=[],
        components=[],
        stats={},
        created_at="2026-12-03T10:00:00+00:00",
        finished_at="2026-12-03T10:00:01+00:00",
    )
    page = render(m, "html")
    assert "rejected" in page and "the upload is empty" in page
    assert validate_full_spdx_document(build_document(m)) == []
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(render(m, "cyclonedx")) is None


# ------------------------------------------------------------------ HTML in a browser
def row_colours(im: Any, y: int) -> dict[tuple[int, int, int], int]:
    return {c: n for n, c in im.crop((0, y, im.width, y + 1)).getcolors(im.width)}


def bars(im: Any) -> list[tuple[int, int]]:
    """(top, bottom) of each class bar: runs of rows mostly in the colour of identical files."""
    green = rgb(html_report.CLASS_COLOURS["identical"])
    rows = [y for y in range(im.height) if row_colours(im, y).get(green, 0) > im.width // 2]
    runs: list[tuple[int, int]] = []
    for y in rows:
        if runs and y == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], y)
        else:
            runs.append((y, y))
    return runs


def shares(im: Any, y: int) -> dict[str, float]:
    counts = row_colours(im, y)
    by_class = {c: counts.get(rgb(colour), 0) for c, colour in html_report.CLASS_COLOURS.items()}
    total = sum(by_class.values())
    return {c: n / total for c, n in by_class.items()}


def test_html_in_chromium_shows_class_bars_in_proportion_and_red_flags(
    sample: Manifest, tmp_path: Path
) -> None:
    im = screenshot(tmp_path, render(sample, "html"), "sample")
    assert im.size == (1280, 3200)
    white = row_colours(im, 0).get((255, 255, 255), 0)
    assert len(im.getcolors(1 << 20)) > 50 and white < im.width  # not blank
    found = bars(im)
    assert len(found) >= 2, found  # the drop's bar in the header, then busybox's
    for top, bottom in found[:2]:
        assert 20 <= bottom - top + 1 <= 30
    drop, busybox = shares(im, sum(found[0]) // 2), shares(im, sum(found[1]) // 2)
    for got, classes, total in ((drop, sample["summary"]["classes"], 2841), (busybox, None, 2836)):
        want = classes or sample["components"][0]["classes"]
        for cls in ("identical", "modified", "added"):
            assert got[cls] == pytest.approx(want[cls] / total, abs=0.015), (cls, got)
    colours = {c: n for n, c in im.getcolors(1 << 20)}
    red = colours.get(rgb(html_report.SEVERITY_COLOURS["action-required"]), 0)
    amber = colours.get(rgb(html_report.SEVERITY_COLOURS["review"]), 0)
    assert red > 6 * 1000 and amber > 5 * 500  # the verdict and the severity badges


def test_html_in_chromium_without_flags_shows_no_red(old: Manifest, tmp_path: Path) -> None:
    im = screenshot(tmp_path, render(old, "html"), "old", height=1600)
    colours = {c: n for n, c in im.getcolors(1 << 20)}
    assert colours.get(rgb(html_report.SEVERITY_COLOURS["action-required"]), 0) == 0
    assert bars(im)


# ------------------------------------------------------------------ SPDX
def spdx_round_trip(m: Manifest, tmp_path: Path) -> Document:
    """The written JSON, parsed back by spdx-tools and validated as SPDX 2.3."""
    path = tmp_path / "sbom.spdx.json"
    path.write_text(render(m, "spdx"))
    doc: Document = json_parser.parse_from_file(str(path))
    assert [v.validation_message for v in validate_full_spdx_document(doc)] == []
    return doc


def review_only(m: Manifest) -> Manifest:
    """``m`` with the review files only: spdx-tools' validation takes seconds per thousand files."""
    return {**m, "files": [f for f in m["files"] if f["class"] in ("modified", "added")]}


def test_spdx_document_is_valid_with_packages_files_and_licences(sample: Manifest, tmp_path: Path) -> None:
    doc = spdx_round_trip(sample, tmp_path)
    assert doc.creation_info.spdx_version == "SPDX-2.3" and doc.creation_info.data_license == "CC0-1.0"
    assert doc.creation_info.document_namespace.endswith(f"/acme-router/{sample['scan_id']}")
    drop, busybox, sdk = doc.packages
    assert (busybox.name, busybox.version, str(busybox.license_declared)) == (
        "busybox",
        "1.35.0",
        "GPL-2.0-only",
    )
    assert [r.locator for r in busybox.external_references] == ["pkg:generic/busybox@1.35.0"]
    assert (sdk.name, sdk.version, sdk.external_references) == ("acme-sdk", None, [])
    assert len(doc.files) == len(sample["files"])
    crc = next(f for f in doc.files if f.name == f"./{CRC}")
    record = next(f for f in sample["files"] if f["path"] == CRC)
    assert {c.algorithm.name: c.value for c in crc.checksums} == {
        "SHA1": record["sha1"],
        "SHA256": record["sha256"],
    }
    assert [str(x) for x in crc.license_info_in_file] == ["LicenseRef-scancode-proprietary-license"]
    assert [x.license_id for x in doc.extracted_licensing_info] == ["LicenseRef-scancode-proprietary-license"]
    flagged = [a for a in doc.annotations if a.spdx_id == crc.spdx_id]
    assert len(flagged) == 1 and "non-commercial (action-required) at line 4" in flagged[0].annotation_comment
    config = next(f for f in doc.files if f.name == f"./{BUSYBOX}.config")
    assert config.license_info_in_file == [SpdxNone()]  # examined, no licence statement
    contains = {(r.spdx_element_id, r.related_spdx_element_id) for r in doc.relationships}
    assert (busybox.spdx_id, crc.spdx_id) in contains and (drop.spdx_id, busybox.spdx_id) in contains


@pytest.mark.parametrize("triaged", [True, False])
def test_spdx_written_from_dicts_equals_what_spdx_tools_writes_of_the_model(
    sample: Manifest, old: Manifest, triaged: bool
) -> None:
    """File elements and their relationships are made as dicts (spdx-tools' converters cost 0.3 ms an
    element): the document must be the one spdx-tools' own writer makes of the whole model."""
    import io

    from spdx_tools.spdx.writer.json.json_writer import write_document_to_stream

    m = sample if triaged else old
    stream = io.StringIO()
    write_document_to_stream(build_document(m), stream, validate=False)
    assert json.loads(render(m, "spdx")) == json.loads(stream.getvalue())


def test_spdx_package_verification_code_follows_clause_7_9(sample: Manifest) -> None:
    doc = build_document(sample)
    sha1s = sorted(f["sha1"] for f in sample["files"] if f["component"] == BUSYBOX)
    code = doc.packages[1].verification_code
    assert code is not None and code.value == hashlib.sha1("".join(sha1s).encode()).hexdigest()


def test_spdx_ids_off_the_licence_list_become_declared_licence_refs(sample: Manifest, tmp_path: Path) -> None:
    f = next(f for f in sample["files"] if f["path"] == CRC)
    f["licenses"] = [
        {"expression": "BSD-3-Clause OR acme-eula", "source": "scancode", "line": 2, "text": "Acme EULA v2"},
        {"expression": "MIT OR ((", "source": "scancode", "line": 3, "text": "garbled"},
    ]
    doc = spdx_round_trip(review_only(sample), tmp_path)
    crc = next(x for x in doc.files if x.name == f"./{CRC}")
    assert [str(x) for x in crc.license_info_in_file] == [
        "BSD-3-Clause OR LicenseRef-acme-eula",
        "LicenseRef-MIT-OR",
    ]
    assert {x.license_id: x.extracted_text for x in doc.extracted_licensing_info}["LicenseRef-acme-eula"] == (
        "Acme EULA v2"
    )


def test_spdx_without_sha1_keeps_packages_and_leaves_files_to_the_manifest(
    old: Manifest, tmp_path: Path
) -> None:
    doc = spdx_round_trip(old, tmp_path)
    assert doc.files == []
    busybox = doc.packages[1]
    assert busybox.files_analyzed is False and busybox.verification_code is None
    assert "no SHA-1" in (busybox.comment or "")


def test_spdx_validator_rejects_a_file_without_sha1(sample: Manifest) -> None:
    """The reason for the rule above: spdx-tools enforces SPDX 2.3's SHA-1 per file."""
    doc = build_document(review_only(sample))
    assert validate_full_spdx_document(doc) == []
    doc.files[0].checksums = [c for c in doc.files[0].checksums if c.algorithm.name != "SHA1"]
    messages = [v.validation_message for v in validate_full_spdx_document(doc)]
    assert any("SHA1" in m for m in messages)


# ------------------------------------------------------------------ CycloneDX
VALIDATOR = JsonStrictValidator(SchemaVersion.V1_6)


def test_cyclonedx_sbom_is_valid_with_purls_licences_and_the_review_set(sample: Manifest) -> None:
    text = render(sample, "cyclonedx")
    assert VALIDATOR.validate_str(text) is None
    bom = json.loads(text)
    assert bom["specVersion"] == "1.6"
    assert bom["metadata"]["component"]["hashes"] == [
        {"alg": "SHA-256", "content": sample["source"]["sha256"]}
    ]
    comps = {c["bom-ref"]: c for c in bom["components"]}
    busybox, sdk = comps[f"component:{BUSYBOX}"], comps["component:acme-sdk/"]
    assert busybox["purl"] == "pkg:generic/busybox@1.35.0"
    assert busybox["licenses"] == [{"expression": "GPL-2.0-only", "acknowledgement": "declared"}]
    assert busybox["evidence"]["identity"][0]["methods"][0]["technique"] == "hash-comparison"
    assert "purl" not in sdk and "version" not in sdk
    files = [f for c in bom["components"] for f in c.get("components", [])]
    assert {f["name"] for f in files} == review_paths(sample)  # identical files are counted, not listed
    crc = next(f for f in files if f["name"] == CRC)
    assert crc["evidence"]["licenses"] == [
        {"expression": "LicenseRef-scancode-proprietary-license", "acknowledgement": "declared"}
    ]
    props = [(p["name"], p["value"]) for p in crc["properties"]]
    assert any(
        n == "dropscan:flag" and v.startswith("action-required non-commercial line 4") for n, v in props
    )


def test_cyclonedx_of_a_manifest_before_triage_is_valid(old: Manifest) -> None:
    bom = json.loads(text := render(old, "cyclonedx"))
    assert VALIDATOR.validate_str(text) is None
    assert all("licenses" not in c for c in bom["components"])


@pytest.mark.parametrize("triaged", [True, False])
def test_cyclonedx_written_as_a_stream_equals_the_librarys_rendering(
    sample: Manifest, old: Manifest, triaged: bool
) -> None:
    """File components are written as dicts, not through cyclonedx-python-lib's model (quadratic at
    40,000 files): the document must be the one the library makes of the whole model."""
    m = sample if triaged else old
    whole = json.loads(JsonV1Dot6(cyclonedx_report.build_bom(m)).output_as_string())
    streamed = json.loads(text := render(m, "cyclonedx"))
    assert streamed == whole
    assert sum(len(c.get("components", [])) for c in streamed["components"]) == len(review_paths(m))
    assert VALIDATOR.validate_str(text) is None


def test_cyclonedx_validator_catches_a_broken_sbom(sample: Manifest) -> None:
    bom = json.loads(render(sample, "cyclonedx"))
    bom["components"][0]["type"] = "not-a-type"
    assert VALIDATOR.validate_str(json.dumps(bom)) is not None


def test_reports_are_the_same_for_the_same_manifest(sample: Manifest) -> None:
    for fmt in FORMATS:
        assert render(sample, fmt) == render(copy.deepcopy(sample), fmt), fmt


# ------------------------------------------------------------------ CLI
@pytest.fixture
def sample_file(tmp_path: Path, sample: Manifest) -> Path:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(sample))
    return path


@pytest.mark.parametrize(
    ("fmt", "check"),
    [
        ("text", lambda s: s.startswith("dropscan: acme-router/")),
        ("html", lambda s: s.startswith("<!DOCTYPE html>")),
        ("spdx", lambda s: json.loads(s)["spdxVersion"] == "SPDX-2.3"),
        ("cyclonedx", lambda s: json.loads(s)["bomFormat"] == "CycloneDX"),
    ],
)
def test_cli_report_writes_each_format(
    sample_file: Path, tmp_path: Path, fmt: str, check: Callable[[str], bool]
) -> None:
    out = tmp_path / f"report.{fmt}"
    assert main(["report", str(sample_file), "--format", fmt, "--out", str(out)]) == 0
    assert check(out.read_text())


def test_cli_report_reads_gzip_and_prints_text_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(SAMPLE)]) == 0
    assert "Red flags (6 action required, 5 to review):" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such manifest"),
        (b"{not json", "not a JSON manifest"),
        (
            b'{"schema": "dropscan.manifest/1"}',
            "not a dropscan manifest (top level): 'scan_id' is a required",
        ),
        (b"\x1f\x8b\x08garbage", "not a JSON manifest"),
    ],
)
def test_cli_report_on_a_bad_manifest_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    path = tmp_path / "manifest.json"
    if content is not None:
        path.write_bytes(content)
    assert main(["report", str(path), "--format", "html"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and message in captured.err and "Traceback" not in captured.err


def test_reports_rendered_side_by_side_are_the_reports_rendered_one_by_one(sample: Manifest) -> None:
    one_by_one = {fmt: render(sample, fmt) for fmt in FORMATS}
    assert render_all(sample, FORMATS, workers=2) == one_by_one
    assert list(render_all(sample, FORMATS, workers=2)) == list(FORMATS)  # in the order asked for


def test_spdx_made_in_parts_is_the_document_made_in_one(sample: Manifest) -> None:
    # parts cut across packages; one package whose files are not written (no SHA-1) between two that are
    busybox = sample["components"][0]["prefix"]
    for f in sample["files"]:
        if not f["path"].startswith(busybox):
            f.pop("sha1", None)
    whole = render(sample, "spdx")
    assert whole.count('"fileName"') > 100  # the files of busybox are written
    for parts in (2, 3, 7):
        with Rendering(sample, parts=parts) as rendering:
            assert rendering.text() == whole


def test_a_manifest_is_written_a_file_a_line_and_reads_back_the_same(sample: Manifest) -> None:
    sample["files"][0]["path"] = "busybox-1.35.0-acme/caf\udce9.c"  # a name that was not UTF-8
    text = to_json(sample)
    assert json.loads(text) == sample
    lines = text.splitlines()
    assert sum(line.lstrip().startswith('{"path":') for line in lines) == len(sample["files"])
    assert text.encode()  # every character encodes: undecodable names stay escaped

"""A review set nothing upstream explains (issue 22): triage once per content, within limits, said plainly."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from dropscan.archive.extract import contents_by_digest
from dropscan.audit.findings import apply, triage_manifest
from dropscan.audit.licenses import TagDetector
from dropscan.audit.manifest import validate
from dropscan.audit.triage_plan import NOT_READ, TAGS_ONLY, TriageLimits, read_plan
from dropscan.reports import FORMATS, render
from dropscan.reports.summary import body

from helpers.builders import make_tar
from helpers.review import LICENSED, RESTRICTED, CountingDetector, manifest_of


def content_of(contents: dict[str, bytes]) -> dict[str, bytes]:
    return {hashlib.sha256(d).hexdigest(): d for d in contents.values()}


def test_a_thousand_copies_of_one_file_are_detected_once_and_flagged_each_where_it_lies() -> None:
    contents = {f"bsp/d{i % 10}/f{i:04d}.c": RESTRICTED for i in range(1000)}
    m = manifest_of(contents)
    counting = CountingDetector()
    report = triage_manifest(m, content_of(contents), detector=counting, workers=1)
    assert len(counting.texts) == 1
    assert report.distinct == 1 and report.files == 1000
    # the component states no licence: one component flag, then one flag per file where it lies
    assert [f.kind for f in report.flags if f.path == "bsp/"] == ["license-unknown"]
    file_flags = [f for f in report.flags if f.path != "bsp/"]
    assert sorted(f.path for f in file_flags) == sorted(contents)
    assert {(f.kind, f.component) for f in file_flags} == {("non-commercial", "bsp/")}
    assert not report.limited


def test_the_same_content_gets_the_licence_flags_of_each_component_it_lies_in() -> None:
    contents = {"bsp/a.c": LICENSED, "bsp/b.c": LICENSED, "other/c.c": LICENSED}
    gpl = b"SPDX-License-Identifier: GPL-2.0-only\n"
    m = manifest_of(contents, copying=gpl)
    next(f for f in m["files"] if f["path"] == "other/c.c")["component"] = "other/"
    m["components"].append({**m["components"][0], "prefix": "other/"})
    report = triage_manifest(m, content_of(contents) | content_of({"COPYING": gpl}), detector=TagDetector())
    flagged = {(f.path, f.kind, f.severity) for f in report.flags}
    # Apache-2.0 in a GPL-2.0-only component (bsp/, from its COPYING); other/ states no licence
    assert flagged == {
        ("bsp/a.c", "license-incompatible", "action-required"),
        ("bsp/b.c", "license-incompatible", "action-required"),
        ("other/", "license-unknown", "review"),
    }
    assert set(report.licenses) == set(contents)


def distinct(n: int) -> dict[str, bytes]:
    return {f"bsp/f{i:03d}.c": LICENSED + f"int v{i};\n".encode() for i in range(n)}


def test_contents_past_triage_max_files_are_read_for_tags_only_and_said_so() -> None:
    contents = distinct(12)
    m = manifest_of(contents)
    limits = TriageLimits(max_files=5, head_bytes=20)
    read = read_plan(m, limits)
    assert (read.count("full"), read.count(TAGS_ONLY)) == (5, 7)
    assert all(cap == 20 for cap in read.caps.values()) and len(read.caps) == 7
    counting = CountingDetector()
    # what extract keeps of a tags-only content: its first head_bytes
    content = {d: data[: read.caps.get(d, len(data))] for d, data in content_of(contents).items()}
    report = triage_manifest(m, content, detector=counting, limits=limits, read=read)
    assert len(counting.texts) == 5  # the full detector; the others by their tags only
    apply(m, report)
    validate(m)
    limited = {f["path"]: f["triage"] for f in m["files"] if "triage" in f}
    assert limited == {p: TAGS_ONLY for p in sorted(contents)[5:]}
    assert m["triage"]["limited"]["tags_only"] == 7
    assert m["triage"]["limited"]["reasons"][0].startswith(
        "12 distinct contents to review, over TriageMaxFiles (5)"
    )
    [flag] = [f for f in m["flags"] if f["kind"] == "review-limit"]
    assert (flag["severity"], flag["path"]) == ("review", "")
    assert "7 of 12 review files were not examined in full" in flag["detail"]
    assert m["verdict"] != "clean"


def test_contents_past_triage_max_mib_are_not_read_and_the_held_bytes_stay_under_it() -> None:
    big = {f"bsp/big{i}.c": LICENSED + bytes([65 + i]) * 400_000 for i in range(6)}
    m = manifest_of(big)
    limits = TriageLimits(max_mib=1, head_bytes=200_000)
    read = read_plan(m, limits)
    assert read.held <= 1 << 20
    # two whole (800 KB), one head of 200 KB, and no room for the rest
    assert (read.count("full"), read.count(TAGS_ONLY), read.count(NOT_READ)) == (2, 1, 3)
    assert set(read.wanted) == {d for d, mode in read.modes.items() if mode != NOT_READ}
    content = {
        d: data[: read.caps.get(d, len(data))] for d, data in content_of(big).items() if d in read.wanted
    }
    report = triage_manifest(m, content, detector=TagDetector(), limits=limits, read=read)
    apply(m, report)
    validate(m)
    assert sorted(f["path"] for f in m["files"] if f.get("triage") == NOT_READ) == sorted(big)[3:]
    assert m["triage"]["limited"]["not_read"] == 3
    assert m["triage"]["limited"]["reasons"][1] == (
        "3 distinct contents not read: the review set holds more than TriageMaxMiB (1 MiB)"
    )


def test_detection_past_the_time_budget_reads_the_rest_for_tags_only() -> None:
    contents = distinct(3)
    m = manifest_of(contents)
    counting = CountingDetector()
    limits = TriageLimits(budget_seconds=0)  # spent before the first content: deterministic
    report = triage_manifest(m, content_of(contents), detector=counting, limits=limits)
    assert counting.texts == []
    assert set(report.licenses) == set(contents)  # the tags were still read
    assert report.limited == dict.fromkeys(contents, TAGS_ONLY)
    assert report.limit_reasons == [
        "detection ran past TriageBudgetSeconds (0 s): 3 distinct contents still waiting were read for "
        "licence tags and restriction terms only"
    ]


def test_extract_keeps_only_the_head_the_plan_allows(tmp_path: Any) -> None:
    contents = {"bsp/a.c": b"a" * 5000, "bsp/b.c": b"b" * 5000}
    drop = make_tar(tmp_path / "d.tar.gz", contents)
    a, b = (hashlib.sha256(d).hexdigest() for d in contents.values())
    got = contents_by_digest(str(drop), {a: 5000, b: 5000}, caps={a: 100})
    assert (len(got.content[a]), len(got.content[b])) == (100, 5000)


def grouped_manifest(n: int) -> dict[str, Any]:
    """``n`` review files in 7 folders, two contents: half flagged non-commercial, half Apache-2.0."""
    contents = {f"bsp/dir{i % 7}/f{i:05d}.c": (LICENSED if i % 2 else RESTRICTED) for i in range(n)}
    m = manifest_of(contents)
    apply(m, triage_manifest(m, content_of(contents), detector=TagDetector()))
    return m


def test_a_review_set_beyond_reading_is_grouped_in_the_summary_and_the_html() -> None:
    m = grouped_manifest(3000)
    text = body(m)
    assert "Review set by folder (3,000 files in 7 folders):" in text
    assert "Review set by distinct content (2 contents):" in text
    assert "  1,500 files  " in text
    assert text.count("\n") < 200  # not 3,000 lines
    html = render(grouped_manifest(12_000), "html")  # 12,000 files, 6,000 flags: past the HTML's rows
    assert "Files to review by folder (7)" in html and "Files to review by distinct content (2)" in html
    assert '<td class="num">6,000</td>' in html  # the flags by kind, and the content groups
    assert html.count("<tr") < 1000


def test_every_report_of_a_grouped_review_set_keeps_every_file_in_the_sboms() -> None:
    import json

    m = grouped_manifest(3000)
    for fmt in FORMATS:
        assert render(m, fmt) == render(copy.deepcopy(m), fmt)
    cdx = json.loads(render(m, "cyclonedx"))
    assert sum(len(c.get("components", [])) for c in cdx["components"]) == 3000


@pytest.mark.parametrize("limit", [0, 1])
def test_a_limit_of_zero_or_one_file_still_ends_in_a_valid_manifest(limit: int) -> None:
    contents = distinct(4)
    m = manifest_of(contents)
    limits = TriageLimits(max_files=limit)
    apply(m, triage_manifest(m, content_of(contents), detector=TagDetector(), limits=limits))
    validate(m)
    assert m["triage"]["limited"]["tags_only"] == 4 - limit

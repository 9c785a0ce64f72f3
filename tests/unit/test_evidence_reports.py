"""How the reports show review evidence (issue 24): each modified file's diff against its upstream base,
its hunks marked by origin (vendor, upstream with the commit cited, noise), backports counted apart from
the review set, added files close to an upstream file, and the pedigree in CycloneDX and SPDX.

The manifests are the BusyBox acceptance scan of tests/data with evidence made from real texts by
libgit2's diff (tests/helpers/evidence.py)."""

from __future__ import annotations

import copy
import gzip
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from spdx_tools.spdx.model.relationship import RelationshipType
from spdx_tools.spdx.parser.json import json_parser
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from dropscan.reports import cyclonedx as cyclonedx_report
from dropscan.reports import diffs, render, view
from dropscan.reports import html as html_report
from dropscan.reports.spdx_elements import build_document
from dropscan.reports.summary import SUBJECT_LIMIT, body, component_line, subject

from helpers.browser import rgb, screenshot
from helpers.evidence import commit_id, evidence, file_record

SAMPLE = Path(__file__).parents[1] / "data" / "busybox-acme.manifest.json.gz"
BUSYBOX = "busybox-1.35.0-acme/"
Manifest = dict[str, Any]


def c_source(steps: int = 14) -> list[str]:
    """A C file of ``steps`` five-line functions: line 5k+3 is ``return fd + k;``."""
    lines = []
    for k in range(steps):
        lines += [f"static int wget_step_{k}(int fd)", "{", f"\treturn fd + {k};", "}", ""]
    return lines


def text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


BASE = c_source()
FIX_A = commit_id("wget: check the descriptor of step 2")
FIX_B = commit_id("wget: step 10 off by one")
COMMITS: dict[str, dict[str, Any]] = {
    FIX_A: {
        "subject": "wget: check the descriptor of step 2",
        "date": "2023-01-03T10:00:00+00:00",
        "release": "1.36.0",
    },
    FIX_B: {"subject": "wget: step 10 off by one", "date": "2024-05-01T08:30:00+00:00", "release": None},
}


def backported() -> list[str]:
    """Two upstream fixes (hunks 0 and 1)."""
    new = list(BASE)
    new[12] = "\treturn fd > 0 ? fd + 2 : -1;"  # line 13
    new[52] = "\treturn fd + 10 + 1;"  # line 53
    return new


def vendor_changed() -> list[str]:
    """A vendor insertion of three lines after line 20 (hunk 0) and a change at line 58 (hunk 1)."""
    new = list(BASE)
    new[57] = "\treturn acme_step(fd, 11);"
    return [
        *new[:20],
        "/* acme: trace every step */",
        "#define ACME_TRACE 1",
        "#include <acme/trace.h>",
        *new[20:],
    ]


def mixed() -> list[str]:
    """Upstream's fix at line 38 (hunk 0), a vendor edit at line 43, five lines on (hunk 1, the same
    3-context hunk), trailing blanks at line 63 (hunk 2, noise)."""
    new = list(BASE)
    new[37] = "\treturn fd > 0 ? fd + 7 : -1;"
    new[62] = "\treturn fd + 12;   "
    new[42:43] = ["\tif (fd < 0)", "\t\treturn acme_log(fd);", "\treturn fd + 8 + ACME;"]
    return new


WGET, HTTPD, XFUNCS, ADDED = (
    BUSYBOX + "networking/wget.c",
    BUSYBOX + "networking/httpd.c",
    BUSYBOX + "libbb/xfuncs.c",
    BUSYBOX + "networking/acme_wget.c",
)


def files_with_evidence() -> list[dict[str, Any]]:
    upstream_a = (FIX_A, "1.36.0", COMMITS[FIX_A]["subject"])
    upstream_b = (FIX_B, None, COMMITS[FIX_B]["subject"])
    made = [
        (WGET, backported(), {"upstream": {0: upstream_a, 1: upstream_b}}),
        (HTTPD, vendor_changed(), {}),
        (XFUNCS, mixed(), {"upstream": {0: upstream_a}, "noise": frozenset({2})}),
    ]
    out = []
    for path, new, rules in made:
        upstream_path = path.removeprefix(BUSYBOX)
        ev = evidence(text(BASE), text(new), upstream_path, version="1.35.0", **rules)  # type: ignore[arg-type]
        out.append({**file_record(path, text(new), ev), "component": BUSYBOX})
    added = file_record(ADDED, text(vendor_changed()), None, cls="added")
    added["similar"] = {
        "package": "busybox",
        "version": "1.35.0",
        "path": "networking/wget.c",
        "sha256": "ab" * 32,
        "similarity": 67,
    }
    out.append({**added, "component": BUSYBOX})
    return out


def with_evidence(sample: Manifest) -> Manifest:
    """The sample scan with three modified files carrying evidence (one backport, one vendor-changed,
    one mixed), an added file close to an upstream one, and the counts the evidence stage writes."""
    m = copy.deepcopy(sample)
    new = files_with_evidence()
    paths = {f["path"] for f in new}
    gone = [f for f in m["files"] if f["path"] in paths]
    m["files"] = [f for f in m["files"] if f["path"] not in paths] + new
    s, busybox = m["summary"], m["components"][0]
    for counts in (s["classes"], busybox["classes"]):
        for f in gone:
            counts[f["class"]] -= 1
        for f in new:
            counts[f["class"]] += 1
    s["files"] += len(new) - len(gone)
    s["backported"], s["vendor_changed"] = 1, 2
    s["review"] = sum(1 for f in m["files"] if view.in_review(f))
    s["review_pct"] = round(100.0 * s["review"] / s["files"], 2)
    busybox["baseline"] = {
        "release": "1.35.0",
        "backported": 1,
        "commits": [FIX_A, FIX_B],
        "vendor_changed": 2,
        "added": busybox["classes"]["added"],
    }
    m["evidence"] = {"commits": COMMITS}
    return m


@pytest.fixture
def sample() -> Manifest:
    data: Manifest = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    return data


@pytest.fixture
def ev_manifest(sample: Manifest) -> Manifest:
    return with_evidence(sample)


def details_of(page: str, path: str) -> str:
    """The ``<details>`` of one file's diff."""
    start = page.index(f'<details class="diff" id="{diffs.file_anchor(path)}"')
    return page[start : page.index("</details>", start)]


def marked(block: str) -> list[tuple[str, str]]:
    """(kind and origin classes, code text) of each changed line of a rendered diff."""
    rows = re.findall(
        r'<span class="((?:add|del)[a-z ]*)"><i>\d*</i><i>\d*</i>'
        r"[+-](.*?)</span>(?=<span>|<span class=\"(?:add|del|hh|mark|note)|<a class|</div>)",
        block,
    )
    return [(cls, html.unescape(re.sub(r"<[^>]+>", "", code))) for cls, code in rows]


# ------------------------------------------------------------------ the patch, line by line
def test_changed_lines_map_to_their_zero_context_hunks_across_a_merged_hunk() -> None:
    ev = evidence(
        text(BASE),
        text(mixed()),
        "libbb/xfuncs.c",
        upstream={0: (FIX_A, "1.36.0", "fix")},
        noise=frozenset({2}),
    )
    assert [(h["old_start"], h["old_lines"], h["new_start"], h["new_lines"]) for h in ev["hunks"]] == [
        (38, 1, 38, 1),
        (43, 1, 43, 3),
        (63, 1, 65, 1),
    ]
    assert ev["patch"].count("\n@@ ") == 2  # the first two 0-context hunks share one 3-context hunk
    lines = diffs.parse(ev["patch"], ev["hunks"])
    changed = [(ln.sign, ln.old, ln.new, ln.hunk) for ln in lines if ln.sign in "+-"]
    assert changed == [
        ("-", 38, None, 0),
        ("+", None, 38, 0),
        ("-", 43, None, 1),
        ("+", None, 43, 1),
        ("+", None, 44, 1),
        ("+", None, 45, 1),
        ("-", 63, None, 2),
        ("+", None, 65, 2),
    ]
    context = [ln for ln in lines if ln.sign == " "]
    assert all(ln.hunk is None and ln.old is not None and ln.new is not None for ln in context)
    assert [ln.text for ln in context if ln.old == 39] == ["}"]


def test_an_insertion_sits_after_its_line_and_a_deletion_has_no_new_lines() -> None:
    new = [*BASE[:5], "/* inserted */", *BASE[5:30], *BASE[31:]]  # insert after line 5, delete line 31
    ev = evidence(text(BASE), text(new), "x.c")
    assert [(h["old_start"], h["old_lines"], h["new_start"], h["new_lines"]) for h in ev["hunks"]] == [
        (5, 0, 6, 1),
        (31, 1, 31, 0),
    ]
    lines = diffs.parse(ev["patch"], ev["hunks"])
    assert [(ln.sign, ln.hunk) for ln in lines if ln.sign in "+-"] == [("+", 0), ("-", 1)]


# ------------------------------------------------------------------ HTML
def test_html_marks_vendor_hunks_and_links_upstream_hunks_to_the_commits_cited(ev_manifest: Manifest) -> None:
    page = render(ev_manifest, "html")
    block = details_of(page, XFUNCS)
    assert "diffed against" in block and "busybox 1.35.0 libbb/xfuncs.c" in block
    assert '<span class="origin mixed">mixed</span>' in block
    link = f'<a class="mark upstream" href="#commit-{FIX_A}" title="{COMMITS[FIX_A]["subject"]}">'
    assert f"{link}upstream {FIX_A[:12]} (1.36.0)</a>" in block
    assert '<span class="mark vendor">vendor change</span>' in block
    assert '<span class="mark noise">noise (keywords, whitespace)</span>' in block
    assert marked(block) == [
        ("del upstream", "\treturn fd + 7;"),
        ("add upstream", "\treturn fd > 0 ? fd + 7 : -1;"),
        ("del vendor", "\treturn fd + 8;"),
        ("add vendor", "\tif (fd < 0)"),
        ("add vendor", "\t\treturn acme_log(fd);"),
        ("add vendor", "\treturn fd + 8 + ACME;"),
        ("del noise", "\treturn fd + 12;"),
        ("add noise", "\treturn fd + 12;   "),
    ]
    # each mark comes right before the first line of its hunk
    assert block.index(link) < block.index('class="del upstream"') < block.index("mark vendor")
    assert block.index("mark vendor") < block.index('class="del vendor"')
    # the anchor the upstream label links to is in the list of commits cited
    cited = page[page.index('<section id="commits">') :]
    assert f'<tr id="commit-{FIX_A}"><td><code>{FIX_A}</code></td><td>1.36.0</td>' in cited
    assert f'<tr id="commit-{FIX_B}"><td><code>{FIX_B}</code></td><td>not in a release</td>' in cited
    assert page.count(f'id="commit-{FIX_A}"') == 1


def test_html_lists_backports_apart_from_the_review_set(ev_manifest: Manifest) -> None:
    page = render(ev_manifest, "html")
    busybox = page[page.index('<section class="component">') :]
    start = busybox.index("<h3>Files to review")
    review = busybox[start : busybox.index("</table>", start)]
    backports = busybox[busybox.index("<h3>Backported upstream fixes (1)</h3>") :]
    assert "networking/<wbr>httpd.c" in review and "libbb/<wbr>xfuncs.c" in review
    assert "networking/<wbr>wget.c" not in review
    block = details_of(backports, WGET)
    assert '<span class="origin upstream">backport</span>' in block
    assert [cls for cls, _ in marked(block)] == ["del upstream", "add upstream"] * 2
    assert f"upstream {FIX_B[:12]}</a>" in block  # no release holds it yet
    assert (
        "Baseline: <b>busybox 1.35.0 + 1 backported upstream fix + 2 vendor-changed files + 73 added files"
        in busybox
    )
    assert "citing 2 upstream commits" in busybox
    header = page[: page.index("</header>")]
    assert (
        "<b>1</b>backported upstream fixes (not reviewed)" in header
        and "<b>2</b>vendor-changed files" in header
    )


def test_html_names_a_historical_base_by_its_commit(ev_manifest: Manifest) -> None:
    f = next(f for f in ev_manifest["files"] if f["path"] == HTTPD)
    f["evidence"]["base"].update(version=None, commit=FIX_B)
    block = details_of(render(ev_manifest, "html"), HTTPD)
    assert f'diffed against <span class="path">busybox commit {FIX_B[:12]} networking/httpd.c</span>' in block


def test_html_diffs_are_collapsed_highlighted_and_open_on_request(ev_manifest: Manifest) -> None:
    page = render(ev_manifest, "html")
    assert page.count('<details class="diff"') == 3
    assert re.findall(r'<details class="diff" id="[^"]+" open>', page) == []
    assert '<span class="kt">int</span>' in details_of(page, HTTPD)  # Pygments' C lexer: a type keyword
    assert ".code .kt {" in page  # and its colour, inline
    opened = html_report.render(ev_manifest, expand=True)
    assert len(re.findall(r'<details class="diff" id="[^"]+" open>', opened)) == 3


def test_html_added_file_names_the_upstream_file_it_is_close_to(ev_manifest: Manifest) -> None:
    page = render(ev_manifest, "html")
    assert "close to busybox 1.35.0 networking/wget.c (67 % of its lines)" in page
    assert f"  added     {ADDED}  (close to busybox 1.35.0 networking/wget.c (67 % of its lines))" in body(
        ev_manifest, review_limit=1_000
    )


def test_html_escapes_the_suppliers_code_in_diffs(ev_manifest: Manifest) -> None:
    new = list(BASE)
    new[20] = "</div></details><script>alert(1)</script><img src=x onerror=alert(2)>"
    ev = evidence(text(BASE), text(new), "networking/httpd.c", version="1.35.0")
    next(f for f in ev_manifest["files"] if f["path"] == HTTPD)["evidence"] = ev
    page = render(ev_manifest, "html")
    assert "<script" not in page.lower() and "<img" not in page.lower()
    shown = html.unescape(re.sub(r"<[^>]+>", "", details_of(page, HTTPD)))
    assert "+</div></details><script>alert(1)</script><img src=x onerror=alert(2)>" in shown


def test_html_says_why_a_file_has_no_diff_and_when_a_diff_was_cut(ev_manifest: Manifest) -> None:
    files = {f["path"]: f for f in ev_manifest["files"]}
    files[HTTPD]["evidence"] = {
        "base": None,
        "lines_added": 0,
        "lines_removed": 0,
        "hunks": [],
        "origin": "vendor",
        "error": "the base release was ingested without contents",
    }
    files[XFUNCS]["evidence"]["patch_truncated"] = True
    page = render(ev_manifest, "html")
    assert "no diff: the base release was ingested without contents" in details_of(page, HTTPD)
    assert '<div class="code">' not in details_of(page, HTTPD)
    assert "the diff was cut at 64 KiB" in details_of(page, XFUNCS)
    assert "no diff: the base release was ingested without contents" in body(ev_manifest, review_limit=1_000)


def test_html_of_a_cut_patch_keeps_the_lines_it_has() -> None:
    ev = evidence(text(BASE), text(mixed()), "libbb/xfuncs.c")
    cut = ev["patch"][: ev["patch"].index("acme_log")]
    lines = diffs.parse(cut, ev["hunks"])
    assert lines[-1].sign == "+" and lines[-1].text.startswith("\t\treturn ")
    assert '<div class="code">' in diffs.body("libbb/xfuncs.c", {**ev, "patch": cut}, diffs.Budget())


def test_diffs_past_the_highlight_budget_are_plain_but_still_marked(ev_manifest: Manifest) -> None:
    f = next(f for f in ev_manifest["files"] if f["path"] == XFUNCS)
    plain = diffs.body(XFUNCS, f["evidence"], diffs.Budget(0))
    coloured = diffs.body(XFUNCS, f["evidence"], diffs.Budget())
    assert '<span class="kt">' not in plain and '<span class="kt">' in coloured
    assert marked(plain) == marked(coloured)


# ------------------------------------------------------------------ text and e-mail
def test_baseline_names_count_backports_and_vendor_changes() -> None:
    c = {"package": "busybox", "version": "1.37.0", "identified": True}
    for counts, name in [
        ((16, 14), "busybox 1.37.0 + 16 backported upstream fixes + 14 vendor-changed files"),
        ((1, 1), "busybox 1.37.0 + 1 backported upstream fix + 1 vendor-changed file"),
        ((0, 3), "busybox 1.37.0 + 3 vendor-changed files"),
        ((2, 0), "busybox 1.37.0 + 2 backported upstream fixes"),
        ((0, 0), "busybox 1.37.0"),
    ]:
        b = {
            "release": "1.37.0",
            "backported": counts[0],
            "vendor_changed": counts[1],
            "commits": [],
            "added": 0,
        }
        assert view.baseline_name({**c, "baseline": b}) == name
    assert view.baseline_name(c) == "busybox 1.37.0"  # a manifest before issue 24


def test_text_gives_the_baseline_and_the_counts(ev_manifest: Manifest) -> None:
    line = component_line(ev_manifest["components"][0])
    assert line.startswith(
        "busybox 1.35.0 + 1 backported upstream fix + 2 vendor-changed files [busybox-1.35.0-acme/]"
    )
    assert "backports cite 2 upstream commits" in line
    text = body(ev_manifest, review_limit=1_000)
    assert "  1 backported upstream fix (changes upstream published: cited, not in the review set); " in text
    assert "2 vendor-changed files." in text
    backports = text[text.index("Backported upstream fixes (1 file, not in the review set):") :]
    assert backports.splitlines()[1] == f"  {WGET}  [{FIX_A[:12]} (1.36.0), {FIX_B[:12]}]"
    review = text[text.index("Review set") : text.index("Backported upstream fixes")]
    assert WGET not in review
    assert f"  modified  {XFUNCS}  (mixed: +5 -3 against busybox 1.35.0 libbb/xfuncs.c)" in review


def test_subject_counts_backports_within_sns_limit(ev_manifest: Manifest) -> None:
    s = ev_manifest["summary"]
    counts = f"{s['review']} of {s['files']:,} files ({s['review_pct']:.1f}%) need review"
    ev_manifest["verdict"] = "review"
    line = subject(ev_manifest)
    assert line.endswith(f"— review: {counts}, 1 backported") and len(line) <= SUBJECT_LIMIT
    assert "acme-router/acme-bu….tar.gz — " in line  # the drop name, shortened in the middle
    # a longer verdict: the name gives way down to 12 characters, then the backports (in the body)
    ev_manifest["verdict"] = "action-required"
    line = subject(ev_manifest)
    assert line.endswith(f"— action-required: {counts}") and len(line) <= SUBJECT_LIMIT


# ------------------------------------------------------------------ SBOMs
VALIDATOR = JsonStrictValidator(SchemaVersion.V1_6)


def small(m: Manifest) -> Manifest:
    """``m`` with the review files, backports and a few identical files: the validators are slow."""
    keep = [f for f in m["files"] if f["class"] in ("modified", "added", "vcs-keywords")]
    return {**m, "files": keep + [f for f in m["files"] if f["class"] == "identical"][:20]}


def test_cyclonedx_carries_the_pedigree_and_validates(ev_manifest: Manifest) -> None:
    text = render(ev_manifest, "cyclonedx")
    assert VALIDATOR.validate_str(text) is None
    bom = json.loads(text)
    busybox = next(c for c in bom["components"] if c["bom-ref"] == f"component:{BUSYBOX}")
    pedigree = busybox["pedigree"]
    [ancestor] = pedigree["ancestors"]
    assert (ancestor["name"], ancestor["version"], ancestor["purl"]) == (
        "busybox",
        "1.35.0",
        "pkg:generic/busybox@1.35.0",
    )
    assert {c["uid"]: c["message"] for c in pedigree["commits"]} == {
        FIX_A: COMMITS[FIX_A]["subject"],
        FIX_B: COMMITS[FIX_B]["subject"],
    }
    by_type: dict[str, list[str]] = {}
    for p in pedigree["patches"]:
        by_type.setdefault(p["type"], []).append(p["diff"]["text"]["content"])
    [backport] = by_type["backport"]
    assert backport.startswith(f"Backport of upstream changes to {WGET} (evidence origin upstream)")
    assert f"upstream commit {FIX_A} (1.36.0): {COMMITS[FIX_A]['subject']}" in backport
    assert "\n--- a/networking/wget.c\n+++ b/networking/wget.c\n@@ " in backport
    assert len(by_type["unofficial"]) == 2  # the vendor-changed file and the mixed one, with their diffs
    assert all(
        "+#include <acme/trace.h>" in d or "+\t\treturn acme_log(fd);" in d for d in by_type["unofficial"]
    )
    files = {f["name"]: f for f in busybox["components"]}
    assert WGET in files  # a backport is still a modified file of the component
    props = {(p["name"], p["value"]) for p in files[XFUNCS]["properties"]}
    assert {("dropscan:origin", "mixed"), ("dropscan:base", "busybox 1.35.0 libbb/xfuncs.c")} <= props
    assert ("dropscan:similar", "close to busybox 1.35.0 networking/wget.c (67 % of its lines)") in {
        (p["name"], p["value"]) for p in files[ADDED]["properties"]
    }


def test_cyclonedx_with_pedigree_streamed_equals_the_librarys_rendering(ev_manifest: Manifest) -> None:
    whole = json.loads(JsonV1Dot6(cyclonedx_report.build_bom(ev_manifest)).output_as_string())
    assert json.loads(render(ev_manifest, "cyclonedx")) == whole


def test_cyclonedx_validator_rejects_a_patch_of_an_unknown_type(ev_manifest: Manifest) -> None:
    bom = json.loads(render(ev_manifest, "cyclonedx"))
    busybox = next(c for c in bom["components"] if "pedigree" in c)
    busybox["pedigree"]["patches"][0]["type"] = "vendor"
    assert VALIDATOR.validate_str(json.dumps(bom)) is not None


def test_spdx_says_the_component_descends_from_upstream_and_its_files_were_modified(
    ev_manifest: Manifest, tmp_path: Path
) -> None:
    path = tmp_path / "sbom.spdx.json"
    path.write_text(render(small(ev_manifest), "spdx"))
    doc = json_parser.parse_from_file(str(path))
    assert [v.validation_message for v in validate_full_spdx_document(doc)] == []
    packages = {p.spdx_id: p for p in doc.packages}
    files = {f.name: f.spdx_id for f in doc.files}
    [descends] = [r for r in doc.relationships if r.relationship_type == RelationshipType.DESCENDANT_OF]
    assert packages[descends.spdx_element_id].name == "busybox"
    upstream = packages[str(descends.related_spdx_element_id)]
    assert (upstream.name, upstream.version, upstream.files_analyzed) == ("busybox", "1.35.0", False)
    assert [r.locator for r in upstream.external_references] == ["pkg:generic/busybox@1.35.0"]
    modified = {
        r.spdx_element_id: r
        for r in doc.relationships
        if r.relationship_type == RelationshipType.FILE_MODIFIED
    }
    assert set(modified) == {files[f"./{p}"] for p in (WGET, HTTPD, XFUNCS)}
    wget = modified[files[f"./{WGET}"]]
    assert wget.related_spdx_element_id == upstream.spdx_id
    assert "a backport: every change is upstream's own" in (wget.comment or "") and FIX_B in (
        wget.comment or ""
    )
    assert "libbb/xfuncs.c" in (modified[files[f"./{XFUNCS}"]].comment or "")


def test_spdx_names_the_upstream_file_a_keyword_only_file_was_compared_with(ev_manifest: Manifest) -> None:
    f = next(f for f in ev_manifest["files"] if f["class"] == "vcs-keywords")
    upstream_path = f["path"].removeprefix(BUSYBOX)
    f["evidence"] = {
        "base": {"package": "busybox", "version": "1.35.0", "path": upstream_path, "sha256": "cd" * 32},
        "lines_added": 1,
        "lines_removed": 1,
        "hunks": [{"old_start": 3, "old_lines": 1, "new_start": 3, "new_lines": 1, "origin": "noise"}],
        "origin": "upstream",
    }
    doc = build_document(small(ev_manifest))
    [element] = [x for x in doc.files if x.name == f"./{f['path']}"]
    assert (
        element.comment
        == f"class vcs-keywords; upstream busybox 1.35.0; against busybox 1.35.0 {upstream_path}"
    )
    assert not view.is_backport(f)  # only a modified file is a backport


def test_spdx_names_a_historical_base_as_its_own_package(ev_manifest: Manifest) -> None:
    f = next(f for f in ev_manifest["files"] if f["path"] == HTTPD)
    f["evidence"]["base"].update(version=None, commit=FIX_B)
    doc = build_document(small(ev_manifest))
    assert validate_full_spdx_document(doc) == []
    historical = [p for p in doc.packages if p.spdx_id.startswith("SPDXRef-Upstream-") and p.version is None]
    assert len(historical) == 1 and FIX_B in (historical[0].comment or "")


def test_spdx_with_evidence_written_from_dicts_equals_what_spdx_tools_writes(ev_manifest: Manifest) -> None:
    import io

    from spdx_tools.spdx.writer.json.json_writer import write_document_to_stream

    stream = io.StringIO()
    write_document_to_stream(build_document(ev_manifest), stream, validate=False)
    assert json.loads(render(ev_manifest, "spdx")) == json.loads(stream.getvalue())


# ------------------------------------------------------------------ manifests before issue 24
def test_a_manifest_without_evidence_shows_none_of_it(sample: Manifest) -> None:
    page = render(sample, "html")
    for absent in ('<details class="diff"', "Baseline:", "Backported", 'id="commits"', "vendor-changed"):
        assert absent not in page, absent
    text = render(sample, "text")
    assert "backported" not in text and "vendor-changed" not in text
    assert "pedigree" not in render(sample, "cyclonedx")
    spdx = render(sample, "spdx")
    assert "DESCENDANT_OF" not in spdx and "FILE_MODIFIED" not in spdx and "SPDXRef-Upstream" not in spdx


def test_a_manifest_without_evidence_keeps_backport_candidates_in_review(sample: Manifest) -> None:
    views = view.components(sample)
    assert sum(len(v.review) for v in views) == sample["summary"]["review"] == 212
    assert all(not v.backports for v in views)


# ------------------------------------------------------------------ as Chromium shows it
def longest_run(im: Any, colour: str) -> int:
    """The longest vertical run of pixels of exactly ``colour``: a diff's origin bar down its lines."""
    from PIL import Image, ImageChops

    want = rgb(colour)
    r, g, b = (
        band.point(lambda v, w=w: 255 if v == w else 0) for band, w in zip(im.split(), want, strict=True)
    )
    mask = ImageChops.multiply(ImageChops.multiply(r, g), b)
    # the columns with most of the colour: the bars at the left of marked lines, not the labels' width
    density = mask.resize((mask.width, 1), Image.Resampling.BOX).tobytes()
    columns = sorted(range(mask.width), key=lambda x: -density[x])[:12]
    best = 0
    for x in columns:
        run = 0
        for value in mask.crop((x, 0, x + 1, mask.height)).tobytes():
            run = run + 1 if value else 0
            best = max(best, run)
    return best


def test_html_in_chromium_shows_vendor_hunks_marked_when_a_diff_is_open(
    ev_manifest: Manifest, tmp_path: Path
) -> None:
    ev_manifest["flags"] = []  # the diffs come up the page
    ev_manifest["files"] = [f for f in ev_manifest["files"] if f["class"] != "identical" or "evidence" in f]
    ev_manifest["files"] = [f for f in ev_manifest["files"] if f["component"] != BUSYBOX or f["path"] in
                            (WGET, HTTPD, XFUNCS, ADDED)]  # fmt: skip
    vendor, upstream = diffs.ORIGIN_COLOURS["vendor"], diffs.ORIGIN_COLOURS["upstream"]
    opened = screenshot(tmp_path, html_report.render(ev_manifest, expand=True), "open", height=4000)
    assert len(opened.getcolors(1 << 20)) > 50  # not blank
    # a vendor hunk: its label and its lines (one removed, three added in the mixed file) under one bar
    assert longest_run(opened, vendor) >= 4 * 16
    assert longest_run(opened, upstream) >= 3 * 16  # upstream's fix: label, removed line, added line
    collapsed = screenshot(tmp_path, render(ev_manifest, "html"), "collapsed", height=4000)
    assert 0 < longest_run(collapsed, vendor) < 2 * 16  # only the badges: no diff line shows

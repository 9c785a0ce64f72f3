"""Issue 38's acceptance walkthrough in a real browser, on the BusyBox acceptance drop: Debian's Chromium
driven by Selenium against the desk of an embedded stack (served on 127.0.0.1 behind the local HTTP API
and its JWT check), BusyBox 1.35.0 ingested and the acceptance drop scanned as supplier acme.

A new reviewer, made as an administrator makes one (``dropscan users add``: a temporary password),
signs in with it and chooses their own; opens the drop, reads its review set off the table's pages,
then opens every file of it one by one from its page (class, red flags, the diff against upstream),
decides each with a click (accepted with a note; "needs action" for the first file with a red flag of
severity action-required): the first, then the page's "next undecided file" link; from the second on
with "then open the next undecided file" ticked, until the desk brings her back to the last file with
nothing left. The drop's own state filter then shows nothing undecided. The supplier's next drop (that
file reworked, two more reviewed files and two upstream-identical ones edited, one added) comes back
with only those six to review and the rest accepted under the reviewer's name. Screenshots of the main
steps go to ``$DROPSCAN_TEST_OUT/web/busybox-*.png`` (default: the test's temporary folder).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dropscan.cli import main
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.local.http_api import serve

from helpers.browser import browser_or_skip, chromium, click, visit, wait_for, wait_shown
from helpers.builders import busybox_case, busybox_orig, next_drop
from helpers.desk import DeskClient
from helpers.flows import Scanned, scan_and_wait

REVIEWER = "dana"
OWN = "Dana-Chose-This-1"  # what she types at the first sign-in
TOP, NEXT_TOP = "busybox-1.35.0-acme/", "busybox-1.35.1-acme/"

#: what a file's page shows, read in one call (each WebDriver call is a round trip)
FILE_PAGE = r"""
const q = (s) => document.querySelector(s);
const text = (s) => (q(s) ? q(s).textContent.trim() : null);
return {
  path: text("#file-path"), cls: text(".facts .cls"), state: text("#file-state"), notice: text("#notice"),
  flags: [...document.querySelectorAll("#flags tbody tr")].map((r) => ({
    severity: r.cells[0].textContent, kind: r.cells[1].textContent, evidence: r.cells[3].textContent})),
  base: text("#base"), diff_lines: document.querySelectorAll("#diff .add, #diff .del").length,
  added_note: document.body.textContent.includes("An added file: no upstream file at this path."),
  copies: +((document.body.textContent.match(/(\d+) files of this drop have this content/) || [0, 1])[1]),
  next: q("#next-undecided") ? q("#next-undecided").getAttribute("href") : null,
  undecided: text("#undecided"), decided: text("#decided-file"),
  then: q("#then-next") ? q("#then-next").checked : null,
};
"""

#: the review table's rows on screen: path, class, flag kinds, state (with who decided)
TABLE = """
return [...document.querySelectorAll("#review tbody tr")].map((r) => ({
  path: r.querySelector("td.path a").textContent, cls: r.cells[2].textContent,
  flags: [...r.querySelectorAll(".flag")].map((f) => f.textContent), severity: r.querySelector(".flag")
    ? [...r.querySelector(".flag").classList].find((c) => c.startsWith("sev-")).slice(4) : "",
  state: r.querySelector("td.state").textContent.trim()}));
"""


@dataclass
class Site:
    es: EmbeddedStack
    url: str
    first: Scanned
    case: Path
    expected: dict[str, Any]
    temporary: str  # the password `dropscan users add` printed
    tmp: Path
    shots: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    browser_or_skip()
    tmp = tmp_path_factory.mktemp("busybox-desk")
    shots = Path(os.environ.get("DROPSCAN_TEST_OUT") or tmp) / "web"
    shots.mkdir(parents=True, exist_ok=True)
    case = busybox_case(tmp / "case")
    expected = json.loads((case / "expected.json").read_text())
    with embedded() as es:
        es.client.ingest(busybox_orig(), "busybox", "1.35.0")
        first = scan_and_wait(es, case / expected["drop"], "acme")
        desk = DeskClient(es)
        printed = io.StringIO()
        with redirect_stdout(printed):  # as an administrator makes a reviewer: a temporary password
            assert main(["users", "add", REVIEWER, "--group", "acme", "--stack", es.stack.name]) == 0
        made = json.loads(printed.getvalue().strip().splitlines()[-1])
        assert made["temporary"] is True
        server = serve(desk.api, "127.0.0.1", 0)
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            yield Site(es, url, first, case, expected, made["password"], tmp, shots)
        finally:
            server.shutdown()


@pytest.fixture
def browser(site: Site) -> Iterator[Any]:
    with chromium(site.tmp / "chromium") as b:
        yield b


def shot(b: Any, site: Site, name: str) -> None:
    assert b.save_screenshot(str(site.shots / f"busybox-{name}.png"))


def table(b: Any) -> list[dict[str, Any]]:
    """Every row of the review table, following the pager's "next" to the last page."""
    rows: list[dict[str, Any]] = []
    while True:
        rows += b.execute_script(TABLE)
        if not b.find_elements("css selector", "#next-page"):
            return rows
        click(b, "#next-page")


def show_state(b: Any, state: str) -> list[dict[str, Any]]:
    """The drop's page filtered on one decision state, as the reviewer picks it: its rows."""
    from selenium.webdriver.support.ui import Select

    Select(wait_for(b, "select[name=state]")).select_by_value(state)
    click(b, "#filter-button")
    return table(b)


def state_counts(b: Any) -> dict[str, str]:
    """The state filter's choices and their counts, as the page offers them ("accepted (206)")."""
    options = b.find_elements("css selector", "select[name=state] option")
    return {o.get_attribute("value"): o.text for o in options}


def check_file_page(page: dict[str, Any], row: dict[str, Any], flags: list[dict[str, Any]]) -> None:
    """What the review table said of the file is on its page, with the evidence its manifest holds:
    each red flag's kind, severity and the line that raised it; the diff against upstream."""
    assert page["path"] == row["path"] and page["cls"] == row["cls"], (page, row)
    assert page["state"] == "open"
    assert {f["kind"] for f in page["flags"]} == set(row["flags"]), page
    shown = sorted((f["kind"], f["severity"], f["evidence"]) for f in page["flags"])
    assert shown == sorted((f["kind"], f["severity"], f.get("evidence") or "") for f in flags), page
    if row["cls"] == "modified":  # every one has a patch: its lines, marked upstream / vendor
        assert page["base"] and "diffed against" in page["base"] and page["diff_lines"] > 0, page
    else:
        assert page["added_note"], page


def test_a_new_reviewer_decides_the_busybox_drop_from_its_pages_and_the_next_drop_comes_back_decided(
    browser: Any, site: Site
) -> None:
    b, scan_id = browser, site.first.scan_id

    # -- a new reviewer's first sign-in: the temporary password, then her own
    b.get(f"{site.url}/")
    wait_for(b, "#username").send_keys(REVIEWER)
    b.find_element("css selector", "#password").send_keys(site.temporary)
    b.find_element("css selector", "#signin-button").click()
    wait_shown(b, "#new-password-1").send_keys(OWN)
    b.find_element("css selector", "#new-password-2").send_keys(OWN)
    shot(b, site, "1-choose-password")
    b.find_element("css selector", "#new-password-button").click()
    wait_for(b, "#who", REVIEWER)  # signed in, on the suppliers page
    assert f'href="/scans/{scan_id}"' in b.page_source
    shot(b, site, "2-suppliers")

    # -- the drop's review set, read off the table, page by page
    click(b, f'a[href="/scans/{scan_id}"]')
    total = int(wait_for(b, "#review-count").text)
    assert "page 1 of 3" in wait_for(b, "#pager").text  # 207 files, 100 a page
    shot(b, site, "3-review-set")
    rows = {r["path"]: r for r in table(b)}
    assert len(rows) == total == 207 and {r["state"] for r in rows.values()} == {"open"}
    assert {r["cls"] for r in rows.values()} == {"modified", "added"}
    flagged = sorted(p for p, r in rows.items() if r["severity"] == "action-required")
    assert flagged, "the acceptance drop carries files that need action"

    # -- every file from its page: read it, decide it, on to the next undecided one
    visit(b, f"{site.url}/#/scans/{scan_id}")
    click(b, "#review td.path a")  # the table's first file
    flags_at: dict[str, list[dict[str, Any]]] = {p: [] for p in rows}
    for fl in site.first.manifest["flags"]:
        flags_at.setdefault(fl["path"], []).append(fl)
    decided: dict[str, str] = {}
    covered = 0  # files of the same content as one decided: its decision covers them, never opened
    last: tuple[str, str] | None = None  # the file just decided, and how
    while len(decided) <= total:
        page = b.execute_script(FILE_PAGE)
        if last is not None:  # the page a decision led to says what was recorded, and on which file
            assert page["notice"].startswith(f"Recorded: {last[1]} on 1 distinct content"), page
            assert page["then"], "the box stays ticked while working through"
            if page["path"] == last[0]:  # back on the file just decided: nothing left
                assert page["state"] == last[1] and page["next"] is None, page
                break
            assert page["decided"] == last[0], page
        row = rows[page["path"]]
        assert page["path"] not in decided, "the next undecided file was one decided already"
        check_file_page(page, row, flags_at[page["path"]])
        covered += page["copies"] - 1
        verdict = "needs-action" if page["path"] == flagged[0] else "accepted"
        note = f"{row['flags'][0]}: back to acme" if verdict == "needs-action" else "as upstream's"
        b.find_element("css selector", "#note").send_keys(note)
        if not decided and row["cls"] == "modified":
            shot(b, site, "4-file-diff")
        if verdict == "needs-action":
            shot(b, site, "5-needs-action")
        if len(decided) == 1:  # from the second file on: each decision goes on to the next undecided file
            b.find_element("css selector", "#then-next").click()
        click(b, "#accept" if verdict == "accepted" else "#needs-action")
        decided[page["path"]] = verdict
        last = (page["path"], verdict)
        if len(decided) == 1:  # the first: decided on its own page, then the link to the next one
            after = b.execute_script(FILE_PAGE)
            assert after["path"] == page["path"] and after["state"] == verdict, after
            assert after["notice"].startswith(f"Recorded: {verdict} on 1 distinct content")
            assert after["next"] and not after["then"]
            click(b, "#next-undecided")
            last = None
    assert page["undecided"] == "Every file of the review set is decided."
    shot(b, site, "6-last-file-decided")
    assert list(decided.values()).count("needs-action") == 1
    # every file was opened once, but for those another file's decision covered (the same content)
    assert len(decided) + covered == total

    # -- the drop's own views: nothing left undecided; the file that needs action, still to decide
    click(b, f'nav.crumbs a[href="/scans/{scan_id}"]')
    left = table(b)  # the default view: still to decide
    assert [(r["path"], r["state"]) for r in left] == [(flagged[0], f"needs-action {REVIEWER}")]
    assert show_state(b, "open") == [] and "0 files" in wait_for(b, "#groups").text
    counts = state_counts(b)
    assert counts["accepted"] == f"accepted ({total - 1})" and counts["needs-action"] == "needs-action (1)"
    assert counts["open"] == "open (0)" and counts["reopened"] == "reopened (0)"
    shot(b, site, "7-nothing-undecided")

    # -- the supplier's next drop: the file that needed action reworked, two more reviewed files and
    # two upstream-identical ones edited, one added; only those six come back to review
    inner = {p: p.removeprefix(TOP) for p in rows}
    others = sorted(inner[p] for p in rows if p.endswith(".c") and "/acme/" not in p)[:2]
    reviewed = [inner[flagged[0]], *others]
    identical = sorted(p.removeprefix(TOP) for p, v in site.expected["files"].items()
                       if v["class"] == "identical" and p.endswith(".c"))[:2]  # fmt: skip
    added = "drivers/acme/board_v2.c"
    out = site.tmp / "acme-busybox-1.35.1-gpl.tar.gz"
    second = scan_and_wait(
        site.es, next_drop(site.case / site.expected["drop"], out, reviewed + identical, added)
    )
    visit(b, f"{site.url}/#/desk")
    click(b, f'a[href="/scans/{second.scan_id}"]')
    assert wait_for(b, "#review-count").text == "6"
    again = table(b)
    assert {r["path"] for r in again} == {NEXT_TOP + p for p in [*reviewed, *identical, added]}
    assert {r["state"] for r in again} == {"open"}
    counts = state_counts(b)
    assert counts["accepted"] == f"accepted ({total - len(reviewed)})" and counts["open"] == "open (6)"
    shot(b, site, "8-next-drop")
    carried = show_state(b, "accepted")  # the rest: the reviewer's decisions, applied by the scan
    assert len(carried) == total - len(reviewed)
    assert {r["state"] for r in carried} == {f"accepted {REVIEWER}"}

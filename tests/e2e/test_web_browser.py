"""The review desk in a real browser: Debian's Chromium driven by Selenium (chromedriver) against the
desk of an embedded stack, served on 127.0.0.1 behind the local HTTP API and its JWT check.

A reviewer signs in, opens a drop, a file with its diff, decides, decides a single vendor hunk of
another file, decides the rest of the review set
from the page, and the supplier's next drop comes back with those decisions applied; a reviewer of
another supplier sees none of it; a hostile file name is text; a new reviewer's first sign-in asks for
their own password in place of the temporary one. Screenshots of the main pages go to
``$DROPSCAN_TEST_OUT/web`` (default: the test's temporary folder).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.local.http_api import serve

from helpers.browser import browser_or_skip, chromium, click, visit, wait_for, wait_shown
from helpers.builders import make_tar
from helpers.desk import PASSWORD, DeskClient
from helpers.flows import Scanned, scan_and_wait
from helpers.product_drops import UPSTREAM, first_drop, second_drop

HOSTILE = "widget-1.0-acme/acme/<img src=x onerror=alert(1)>.c"
TEMPORARY = "Temporary-Pass-7"  # what `dropscan users add` printed for carol


@dataclass
class Site:
    es: EmbeddedStack
    url: str
    acme: Scanned
    globex: Scanned
    tmp: Path
    shots: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    browser_or_skip()
    tmp = tmp_path_factory.mktemp("browser")
    shots = Path(os.environ.get("DROPSCAN_TEST_OUT") or tmp) / "web"
    shots.mkdir(parents=True, exist_ok=True)
    with embedded() as es:
        es.client.ingest(make_tar(tmp / "widget-1.0.tar.gz", UPSTREAM), "widget", "1.0")
        first = first_drop() | {HOSTILE: b"int hostile;\n"}
        acme = scan_and_wait(es, make_tar(tmp / "acme-widget-1.0-gpl.tar.gz", first), "acme")
        other = {p.replace("acme", "globex"): d for p, d in first_drop().items()}
        globex = scan_and_wait(es, make_tar(tmp / "globex-widget-1.0-gpl.tar.gz", other), "globex")
        desk = DeskClient(es)
        desk.add_user("alice", "review-acme")
        desk.add_user("bob", "review-globex")
        desk.add_new_user("carol", TEMPORARY, "review-acme")
        server = serve(desk.api, "127.0.0.1", 0)
        try:
            yield Site(es, f"http://127.0.0.1:{server.server_address[1]}", acme, globex, tmp, shots)
        finally:
            server.shutdown()


@pytest.fixture
def browser(site: Site) -> Iterator[Any]:
    with chromium(site.tmp / "chromium") as b:
        yield b


def sign_in(b: Any, site: Site, name: str, where: str = "") -> None:
    b.get(f"{site.url}/{where}")
    wait_for(b, "#username").send_keys(name)
    b.find_element("css selector", "#password").send_keys(PASSWORD)
    b.find_element("css selector", "#signin-button").click()
    wait_for(b, "#who", name)


def shot(b: Any, site: Site, name: str) -> None:
    assert b.save_screenshot(str(site.shots / f"{name}.png"))


def test_a_reviewer_works_through_a_drop_and_the_next_drop_comes_back_decided(
    browser: Any, site: Site
) -> None:
    b = browser
    sign_in(b, site, "alice")
    assert site.acme.scan_id in b.page_source and site.globex.scan_id not in b.page_source
    shot(b, site, "1-suppliers")

    click(b, f'a[href="/scans/{site.acme.scan_id}"]')
    wait_for(b, "#review")
    assert b.current_url.endswith(f"/#/scans/{site.acme.scan_id}")
    shot(b, site, "2-review-set")

    # the hostile name is a row of text; nothing of it became markup or ran
    wait_for(b, "#filter-q").send_keys("onerror")
    click(b, "#filter-button")
    cell = wait_for(b, "td.path a")
    assert cell.text == HOSTILE
    assert b.execute_script("return document.querySelectorAll('img').length") == 0
    shot(b, site, "3-hostile-name")

    visit(b, f"{site.url}/#/scans/{site.acme.scan_id}/file?path=widget-1.0-acme%2Fsrc%2Fw00.c")
    wait_for(b, "#diff .add.vendor")
    colour = b.execute_script(
        "return getComputedStyle(document.querySelector('#diff .add.vendor')).borderLeftColor"
    )
    assert colour == "rgb(216, 27, 96)"  # the vendor hunk's colour (dropscan.reports.diffs)
    shot(b, site, "4-file-diff")
    wait_for(b, "#note").send_keys("acme's tuning, reviewed")
    click(b, "#accept")
    wait_for(b, "#notice", "under your name")
    assert wait_for(b, "#file-state").text == "accepted"
    assert "alice" in wait_for(b, "#history").text and "acme's tuning, reviewed" in b.page_source
    shot(b, site, "5-decided")

    # one vendor hunk of another file, decided on its own: its only one, so the file is accepted
    visit(b, f"{site.url}/#/scans/{site.acme.scan_id}/file?path=widget-1.0-acme%2Fsrc%2Fw01.c")
    assert wait_for(b, '[data-hunk-state="0"]').text == "open"
    b.find_element("css selector", "#hunk-0 input[name=note]").send_keys("this hunk is fine")
    click(b, "#hunk-0-accept")
    wait_for(b, "#notice", "the hunk accepted")
    assert wait_for(b, '[data-hunk-state="0"]').text == "accepted"
    assert wait_for(b, "#file-state").text == "accepted"
    assert "this hunk is fine" in wait_for(b, "#hunks").text
    shot(b, site, "5b-hunk-decided")

    # the rest of the review set, from the drop's page: everything still to decide
    visit(b, f"{site.url}/#/scans/{site.acme.scan_id}")
    wait_for(b, "#select-matching").click()
    click(b, "#accept")
    wait_for(b, "#notice", "Recorded: accepted")
    assert b.find_elements("css selector", "#review tbody tr") == []

    second, changed, new = second_drop(first_drop())
    m2 = scan_and_wait(site.es, make_tar(site.tmp / "acme-widget-1.1-gpl.tar.gz", second), "acme").manifest
    visit(b, f"{site.url}/#/desk")
    wait_for(b, f'a[href="/scans/{m2["scan_id"]}"]')
    click(b, f'a[href="/scans/{m2["scan_id"]}"]')
    assert wait_for(b, "#review-count").text == str(len(changed | new))
    rows = {e.text for e in b.find_elements("css selector", "#review td.path a")}
    assert rows == changed | new  # only what changed since the decided drop
    shot(b, site, "6-next-drop")


def test_a_reviewer_of_another_supplier_sees_none_of_it(browser: Any, site: Site) -> None:
    b = browser
    sign_in(b, site, "bob")
    assert site.globex.scan_id in b.page_source and site.acme.scan_id not in b.page_source
    assert "acme" not in wait_for(b, "main").text
    visit(b, f"{site.url}/#/scans/{site.acme.scan_id}")
    assert wait_for(b, "#error-message").text.startswith("There is nothing here")
    shot(b, site, "7-other-supplier")
    click(b, "#signout")
    wait_for(b, "#username")
    b.get(f"{site.url}/#/desk")
    assert wait_for(b, "#signin-button").is_displayed()  # signed out: the desk asks again


def test_a_new_reviewer_chooses_their_own_password_at_first_sign_in(browser: Any, site: Site) -> None:
    b = browser
    b.get(f"{site.url}/")
    wait_for(b, "#username").send_keys("carol")
    b.find_element("css selector", "#password").send_keys(TEMPORARY)
    b.find_element("css selector", "#signin-button").click()
    first = wait_shown(b, "#new-password-1")
    assert not b.find_element("css selector", "#signin").is_displayed()
    assert b.execute_script("return sessionStorage.length") == 0  # no token, no session kept
    shot(b, site, "8-choose-password")

    # a password the pool's policy refuses: said so, still on the form
    first.send_keys("alllowercase12")
    b.find_element("css selector", "#new-password-2").send_keys("alllowercase12")
    b.find_element("css selector", "#new-password-button").click()
    assert "12 characters" in wait_shown(b, "#new-password-error").text
    shot(b, site, "8b-password-refused")

    own = "Car0lsOwnPassword"
    for css in ("#new-password-1", "#new-password-2"):
        b.find_element("css selector", css).clear()
        b.find_element("css selector", css).send_keys(own)
    b.find_element("css selector", "#new-password-button").click()
    wait_for(b, "#who", "carol")  # signed in, on the suppliers page
    assert site.acme.scan_id in b.page_source and site.globex.scan_id not in b.page_source
    shot(b, site, "8c-first-sign-in")

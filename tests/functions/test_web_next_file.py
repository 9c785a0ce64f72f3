"""A reviewer working through a drop's review set file by file: each file's page links to the next
undecided file (by path, round to the first), and a decision may go on to it at once, so that the whole
set is decided from file pages alone; the page says so when nothing is left. On moto, through the local
HTTP API's JWT check."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest

from dropscan.local.embedded import embedded

from helpers.builders import make_tar
from helpers.desk import DeskClient, Session
from helpers.flows import Scanned, scan_and_wait
from helpers.product_drops import UPSTREAM, first_drop, review_set

HOSTILE = "widget-1.0-acme/acme/<b>&\"'.c"
NEXT = re.compile(r'<a href="/scans/s-[0-9a-f]{24}/file\?path=([^"]+)" id="next-undecided"')


@dataclass
class World:
    desk: DeskClient
    acme: Scanned
    tmp: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("next-file")
    with embedded() as es:
        es.client.ingest(make_tar(tmp / "widget-1.0.tar.gz", UPSTREAM), "widget", "1.0")
        drop = first_drop() | {HOSTILE: b"int hostile;\n"}
        acme = scan_and_wait(es, make_tar(tmp / "acme-widget-1.0-gpl.tar.gz", drop), "acme")
        desk = DeskClient(es)
        desk.add_user("alice", "review-acme")
        desk.add_user("carol", "supplier-acme")
        yield World(desk, acme, tmp)


def file_page(who: Session, scanned: Scanned, path: str, **extra: str) -> str:
    answer = who.get(f"/scans/{scanned.scan_id}/file", path=path, **extra)
    assert answer.status == 200, answer.body
    return answer.body


def next_of(page: str) -> str | None:
    found = NEXT.search(page)
    return unquote(html.unescape(found.group(1))) if found else None


def test_a_reader_is_shown_the_next_undecided_file_too(world: World) -> None:
    carol = world.desk.sign_in("carol")  # read-only: no decision bar, still a way through the set
    first, second = sorted(review_set(world.acme.manifest))[:2]
    page = file_page(carol, world.acme, first)
    assert 'id="decide"' not in page and next_of(page) == second


def test_the_whole_review_set_is_decided_from_file_pages_going_on_to_the_next_each_time(world: World) -> None:
    """Each file decided with "then open the next undecided file" ticked: the decision lands the reviewer
    on the file the page's link named, the box still ticked, the notice naming the file just decided;
    after the last one, back on it with nothing left."""
    alice = world.desk.sign_in("alice")
    todo = sorted(review_set(world.acme.manifest))
    assert HOSTILE in todo and len(todo) == 9
    # from the last file by path, the next is the first: round to the start
    assert next_of(file_page(alice, world.acme, todo[-1])) == todo[0]

    path = todo[0]
    seen: list[str] = []
    while len(seen) <= len(todo):
        seen.append(path)
        linked = next_of(file_page(alice, world.acme, path))
        form = {"csrf": alice.csrf(), "path": path, "back": "file", "verdict": "accepted", "then": "next"}
        done = alice.post(f"/scans/{world.acme.scan_id}/decisions", form)
        assert done.status == 303
        there = {k: v[0] for k, v in parse_qs(urlsplit(done.location).query).items()}
        assert (there["decided"], there["done"], there["then"]) == (path, "1-accepted", "next")
        page = alice.get(done.location).body
        assert "Recorded: accepted" in page and 'id="then-next" checked' in page
        if there["path"] == path:  # nothing left: back on the file just decided
            assert linked is None and 'id="file-state">accepted<' in page
            break
        assert there["path"] == linked  # where the link before the decision pointed
        assert f'file?path={quote(path, safe="")}" id="decided-file"' in page
        assert 'id="file-state">open<' in page
        left = len(todo) - len(seen)
        said = (
            f"{left} undecided in this drop" if left > 1 else "This is the last undecided file of the drop."
        )
        assert f'id="undecided">{said}<' in page
        path = there["path"]
    assert seen == todo  # every file once, in path order; the hostile name went through as a link
    assert 'id="undecided">Every file of the review set is decided.<' in page
    assert alice.get(f"/api/scans/{world.acme.scan_id}/review").json()["total"] == 0

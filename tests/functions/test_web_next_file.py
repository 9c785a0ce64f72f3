"""A reviewer working through a drop's review set file by file: each file's page links to the next
undecided file (by path, round to the first), so that the whole set is decided from file pages alone,
and says so when nothing is left. On moto, through the local HTTP API's JWT check."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

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


def test_the_whole_review_set_is_decided_from_file_pages_following_the_next_link(world: World) -> None:
    alice = world.desk.sign_in("alice")
    todo = sorted(review_set(world.acme.manifest))
    assert HOSTILE in todo and len(todo) == 9
    # from the last file by path, the next is the first: round to the start
    assert next_of(file_page(alice, world.acme, todo[-1])) == todo[0]

    path: str | None = todo[0]
    seen: list[str] = []
    while path is not None and len(seen) <= len(todo):
        seen.append(path)
        form = {"csrf": alice.csrf(), "path": path, "back": "file", "verdict": "accepted", "note": "read"}
        done = alice.post(f"/scans/{world.acme.scan_id}/decisions", form)
        assert done.status == 303
        assert done.location.startswith(f"/scans/{world.acme.scan_id}/file?path={quote(path, safe='')}&")
        page = file_page(alice, world.acme, path, done="1-accepted")
        assert "Recorded: accepted" in page and 'id="file-state">accepted<' in page
        path = next_of(page)
        left = len(todo) - len(seen)
        if path is not None:
            assert f'id="undecided">{left} undecided in this drop<' in page
    assert seen == todo  # every file once, in path order; the hostile name went through as a link
    assert 'id="undecided">Every file of the review set is decided.<' in page
    assert alice.get(f"/api/scans/{world.acme.scan_id}/review").json()["total"] == 0

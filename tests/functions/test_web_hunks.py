"""Decisions on single vendor hunks from the review desk, on moto: decided one by one, attributed, in
the history; a file whose every hunk is accepted counts as accepted; the same hunk in the supplier's
next drop comes back decided, and a file whose hunks are all accepted ones comes back accepted."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from dropscan.audit import hunk_decisions
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.store.services import reset as reset_services
from dropscan.web import routes

from helpers.builders import make_tar
from helpers.desk import DeskClient
from helpers.flows import Scanned, scan_and_wait

BASE = [f"int line{i} = {i};" for i in range(1, 41)]
#: the upstream release: w.c and v.c of forty lines, and twenty files the drops ship unchanged
UPSTREAM = {f"gadget-1.0/src/u{i:02d}.c": f"int u{i}(void) {{ return {i}; }}\n".encode() for i in range(20)}
UPSTREAM |= {f"gadget-1.0/src/{n}": "\n".join(BASE).encode() + b"\n" for n in ("w.c", "v.c")}
UPSTREAM["gadget-1.0/COPYING"] = b"GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991\n"


def drop(version: str, **files: bytes) -> dict[str, bytes]:
    out = {p.replace("gadget-1.0/", f"gadget-{version}-acme/"): d for p, d in UPSTREAM.items()}
    return out | {f"gadget-{version}-acme/src/{n}.c": d for n, d in files.items()}


def edited(*, a: bool = True, b: bool = True, c: bool = False) -> bytes:
    lines = list(BASE)
    if a:
        lines[2] = "int line3 = 3000; /* acme: a faster clock */"
    if b:
        lines[30] = "int line31 = 0; /* acme: no watchdog */"
    if c:
        lines[15] = "int line16 = -1; /* acme: a new quirk */"
    return "\n".join(lines).encode() + b"\n"


@dataclass
class World:
    es: EmbeddedStack
    desk: DeskClient
    first: Scanned
    tmp: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("hunks")
    with embedded() as es:
        es.client.ingest(make_tar(tmp / "gadget-1.0.tar.gz", UPSTREAM), "gadget", "1.0")
        files = drop("1.0", w=edited(), v=edited(a=False))
        first = scan_and_wait(es, make_tar(tmp / "acme-gadget-1.0.tar.gz", files), "acme")
        desk = DeskClient(es)
        desk.add_user("alice", "review-acme")
        desk.add_user("carol", "supplier-acme")
        desk.add_user("bob", "review-globex")
        yield World(es, desk, first, tmp)


def url(scanned: Scanned, path: str) -> str:
    return f"/scans/{scanned.scan_id}/file?path={quote(path, safe='')}"


def hunk_states(body: str) -> dict[int, str]:
    return {int(i): s for i, s in re.findall(r'data-hunk-state="(\d+)">([a-z-]+)<', body)}


W = "gadget-1.0-acme/src/w.c"


def test_the_file_page_lists_each_vendor_hunk_to_decide(world: World) -> None:
    f = next(f for f in world.first.manifest["files"] if f["path"] == W)
    assert [h["origin"] for h in f["evidence"]["hunks"]] == ["vendor", "vendor"]
    assert len(hunk_decisions.fingerprints(f)) == 2
    page = world.desk.sign_in("alice").get(url(world.first, W))
    assert page.status == 200 and hunk_states(page.body) == {0: "open", 1: "open"}
    assert 'id="hunk-0-accept"' in page.body


def test_a_hunk_decision_needs_the_csrf_token_a_reviewer_and_a_hunk(world: World) -> None:
    target = f"/scans/{world.first.scan_id}/hunks"
    alice = world.desk.sign_in("alice")
    form = {"path": W, "hunk": "0", "verdict": "accepted"}
    assert alice.post(target, form).status == 403  # no CSRF token
    assert alice.post(target, form | {"csrf": alice.csrf()}, origin="https://evil.example").status == 403
    carol = world.desk.sign_in("carol")
    assert carol.post(target, form | {"csrf": carol.csrf()}).status == 403  # reads only
    bob = world.desk.sign_in("bob")
    assert bob.post(target, form | {"csrf": bob.csrf()}).status == 404  # another supplier's scan
    assert alice.post(target, form | {"csrf": alice.csrf(), "hunk": "7"}).status == 400
    assert alice.post(target, form | {"csrf": alice.csrf(), "verdict": "rejected"}).status == 400
    assert hunk_states(alice.get(url(world.first, W)).body) == {0: "open", 1: "open"}


def test_hunks_decided_one_by_one_accept_the_file_once_every_one_is(world: World) -> None:
    alice = world.desk.sign_in("alice")
    target = f"/scans/{world.first.scan_id}/hunks"
    base = {"path": W, "csrf": alice.csrf()}
    answer = alice.post(target, base | {"hunk": "0", "verdict": "accepted", "note": "clock is fine"})
    assert answer.status == 303 and "done=hunk-accepted" in answer.location
    assert alice.post(target, base | {"hunk": "1", "verdict": "needs-action", "note": "why?"}).status == 303
    page = alice.get(url(world.first, W)).body
    assert hunk_states(page) == {0: "accepted", 1: "needs-action"}
    assert 'id="file-state">open' in page  # not every hunk accepted
    assert "clock is fine" in page and "why?" in page
    assert alice.post(target, base | {"hunk": "1", "verdict": "accepted"}).status == 303
    page = alice.get(url(world.first, W)).body
    assert hunk_states(page) == {0: "accepted", 1: "accepted"}
    assert 'id="file-state">accepted' in page and hunk_decisions.NOTE in page
    rows = alice.get(f"/api/scans/{world.first.scan_id}/review", state="all").json()["rows"]
    assert {r["path"]: r["state"] for r in rows}[W] == "accepted"
    # the history keeps all three, attributed
    f = next(f for f in world.first.manifest["files"] if f["path"] == W)
    fp = hunk_decisions.fingerprints(f)[1]
    history = routes.backend().desk.history_of_subject(hunk_decisions.subject(fp))
    assert [(d.verdict, d.by) for d in history] == [("needs-action", "alice"), ("accepted", "alice")]


def test_the_next_drop_comes_back_with_its_hunks_decided(world: World) -> None:
    """w.c without hunk b (both hunks were accepted: its one hunk is), v.c with hunk b (accepted on
    v.c now) and a new one before it."""
    alice = world.desk.sign_in("alice")
    v1 = {"path": "gadget-1.0-acme/src/v.c", "csrf": alice.csrf(), "hunk": "0", "verdict": "accepted"}
    assert alice.post(f"/scans/{world.first.scan_id}/hunks", v1).status == 303
    files = drop("1.1", w=edited(b=False), v=edited(a=False, c=True))
    second = scan_and_wait(world.es, make_tar(world.tmp / "acme-gadget-1.1.tar.gz", files), "acme")
    by_path = {f["path"]: f for f in second.manifest["files"]}
    w, v = by_path["gadget-1.1-acme/src/w.c"], by_path["gadget-1.1-acme/src/v.c"]
    assert w["decision"]["verdict"] == "accepted" and w["decision"]["hunks"] is True
    assert w["decision"]["by"] == "alice"
    assert "decision" not in v
    decided = [h.get("decision", {}).get("verdict") for h in v["evidence"]["hunks"]]
    assert decided == [None, "accepted"]
    assert second.manifest["summary"]["review"] == 1
    page = alice.get(url(second, v["path"]))
    assert hunk_states(page.body) == {0: "open", 1: "accepted"}


# ------------------------------------------------------------------ the e-mail
def test_the_email_links_to_the_drops_page_only_when_the_desk_is_configured(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    [plain] = world.first.notifications  # the embedded stack serves no desk: no link
    assert "Review it on the desk" not in plain.message and "#/scans/" not in plain.message
    monkeypatch.setenv("DESK_URL", "https://desk.example/")
    reset_services()
    try:
        files = drop("1.2", w=edited(a=False, c=True))
        third = scan_and_wait(world.es, make_tar(world.tmp / "acme-gadget-1.2.tar.gz", files), "acme")
    finally:
        monkeypatch.delenv("DESK_URL")
        reset_services()
    [mail] = third.notifications
    link = f"https://desk.example/#/scans/{third.scan_id}"
    assert mail.message.splitlines()[0] == f"Review it on the desk: {link}"
    # the page the link opens (after the sign-in page, desk.js follows the path after "#")
    assert world.desk.sign_in("alice").get(link.split("#", 1)[1]).status == 200

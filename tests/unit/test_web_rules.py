"""The review desk's rules without AWS: who a token's claims make the user, the CSRF and origin check,
the JWT check the local HTTP API plays, and the paging of a 120,000-file review set."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from dropscan.local.http_api import Authorizer, LocalApi, gateway_claims, issuer, moto_jwks
from dropscan.models import Decision
from dropscan.web import render, review
from dropscan.web.access import Forbidden, check_state_change, csrf_token, groups_of, user_of

POOL, CLIENT = "us-east-1_desk", "client-1"


def claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {"iss": issuer("us-east-1", POOL), "aud": CLIENT, "token_use": "id", "sub": "u-1"}
    base |= {"cognito:username": "alice", "exp": now + 3600, "iat": now, "jti": "j-1", "origin_jti": "o-1"}
    return base | extra


def moto_signed(payload: dict[str, Any]) -> str:
    from moto.utilities.utils import load_resource

    key = RSAKey.import_key(load_resource("cognitoidp/resources/jwks-private.json"))
    return jwt.encode({"alg": "RS256", "kid": "dummy"}, payload, key)


# ------------------------------------------------------------------ claims and roles
def test_groups_arrive_as_a_list_or_as_api_gateways_text() -> None:
    assert groups_of({"cognito:groups": ["review-acme", "supplier-x"]}) == ["review-acme", "supplier-x"]
    assert groups_of({"cognito:groups": "[review-acme supplier-x]"}) == ["review-acme", "supplier-x"]
    assert groups_of({}) == []
    c = claims(**{"cognito:groups": ["review-acme", "global-decisions"]})
    assert user_of(gateway_claims(c)) == user_of(c)  # what API Gateway passes names the same user


def test_groups_make_reviewers_read_only_suppliers_and_global_deciders() -> None:
    u = user_of(claims(**{"cognito:groups": "[review-acme supplier-globex]"}))
    assert u is not None and u.name == "alice" and u.suppliers == ["acme", "globex"]
    assert (u.can_read("acme"), u.can_decide("acme")) == (True, True)
    assert (u.can_read("globex"), u.can_decide("globex")) == (True, False)
    assert not u.can_read("initech") and u.scopes() == ["supplier"]
    g = user_of(claims(**{"cognito:groups": ["review-acme", "global-decisions"]}))
    assert g is not None and g.scopes() == ["supplier", "global"]
    assert user_of({}) is None  # no authorizer ran: nobody
    assert user_of(claims(**{"cognito:groups": "[reviewer-acme acme]"})).suppliers == []  # type: ignore[union-attr]


# ------------------------------------------------------------------ state changes
def test_a_state_change_needs_this_sessions_token_from_this_site() -> None:
    alice = user_of(claims())
    assert alice is not None
    token = csrf_token(alice)
    check_state_change(alice, token, {"Origin": "https://desk.example"}, "desk.example")
    check_state_change(alice, token, {}, "desk.example")  # no Origin (not a browser): the token decides
    later = user_of(claims(jti="j-2"))  # a refreshed token of the same sign-in keeps the session
    assert later is not None and csrf_token(later) == token
    other = user_of(claims(origin_jti="o-2"))
    assert other is not None and csrf_token(other) != token
    refused = [
        (csrf_token(other), {}),
        ("", {}),
        (token, {"Origin": "https://evil.example"}),
        (token, {"origin": "null"}),
        (token, {"Sec-Fetch-Site": "cross-site"}),
    ]
    for given, headers in refused:
        with pytest.raises(Forbidden):
            check_state_change(alice, given, headers, "desk.example")


# ------------------------------------------------------------------ the JWT authorizer, played locally
def test_the_local_authorizer_lets_through_what_api_gateway_would_and_nothing_else() -> None:
    auth = Authorizer.of("us-east-1", POOL, CLIENT, moto_jwks())
    good = claims(**{"cognito:groups": ["review-acme"]})
    assert auth.claims(f"Bearer {moto_signed(good)}") == good
    access = {k: v for k, v in good.items() if k != "aud"} | {"token_use": "access", "client_id": CLIENT}
    assert auth.claims(f"Bearer {moto_signed(access)}") is not None
    stranger = RSAKey.generate_key(2048, parameters={"kid": "dummy"})
    forged = jwt.encode({"alg": "RS256", "kid": "dummy"}, good, stranger)
    for refused in (
        "",
        "Basic abc",
        f"Bearer {forged}",
        f"Bearer {moto_signed(good | {'exp': int(time.time()) - 1})}",
        f"Bearer {moto_signed(good | {'aud': 'another-client'})}",
        f"Bearer {moto_signed(good | {'iss': issuer('us-east-1', 'another-pool')})}",
        f"Bearer {moto_signed(good | {'token_use': 'refresh'})}",
        f"Bearer {moto_signed(good)[:-6]}",
    ):
        assert auth.claims(refused) is None, refused


def test_the_local_api_lets_only_the_public_routes_through_without_a_token() -> None:
    seen: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], _: Any) -> dict[str, Any]:
        seen.append(event)
        return {"statusCode": 200, "body": "ok"}

    api = LocalApi(handler, Authorizer.of("us-east-1", POOL, CLIENT, moto_jwks()))
    public = (("GET", "/"), ("GET", "/static/desk.js"), ("POST", "/auth/signin"))
    assert [api.call(m, p, {})[0] for m, p in public] == [200, 200, 200]
    assert all("authorizer" not in e["requestContext"] for e in seen)
    assert [api.call(m, p, {})[0] for m, p in (("POST", "/"), ("GET", "/static/a/b"), ("GET", "/desk"))] == [
        401
    ] * 3
    token = moto_signed(claims(**{"cognito:groups": ["review-acme", "supplier-x"]}))
    status, _, _ = api.call("GET", "/desk?x=1", {"Authorization": f"Bearer {token}"})
    assert status == 200
    passed = seen[-1]["requestContext"]["authorizer"]["jwt"]["claims"]
    assert passed["cognito:groups"] == "[review-acme supplier-x]" and passed["exp"].isdigit()
    assert seen[-1]["rawQueryString"] == "x=1" and seen[-1]["rawPath"] == "/desk"


# ------------------------------------------------------------------ a review set, paged
def big_manifest(n: int) -> dict[str, Any]:
    files = [{"path": f"drop/d{i % 400:03d}/f{i:06d}.c", "sha256": f"{i:064x}", "class": "added",
              "component": "drop/"} for i in range(n)]  # fmt: skip
    flags = [{"path": files[7]["path"], "kind": "proprietary", "severity": "action-required", "line": 3}]
    return {"files": files, "flags": flags, "components": [{"prefix": "drop/"}]}


def test_a_120000_file_review_set_is_paged_filtered_and_grouped_on_the_server() -> None:
    rows = review.rows(big_manifest(120_000))
    first = review.page(rows, review.Query.parse({}))
    assert (first.total, first.pages, len(first.rows)) == (120_000, 1200, review.PAGE_SIZE)
    last = review.page(rows, review.Query.parse({"page": "9999"}))
    assert last.page == 1200 and len(last.rows) == 100
    folder = review.page(rows, review.Query.parse({"group": "folder", "folder": "drop/d007/"}))
    assert folder.total == 300 and folder.groups == [("drop/d007/", 300)]
    flagged = review.page(rows, review.Query.parse({"flag": "proprietary"}))
    assert [r.path for r in flagged.rows] == ["drop/d007/f000007.c"] and flagged.rows[
        0
    ].severity == "action-required"
    by_folder = review.page(rows, review.Query.parse({"group": "folder"}))
    assert len(by_folder.groups) == review.GROUPS_SHOWN and by_folder.groups[0][1] == 300


def test_decisions_taken_since_the_scan_change_the_state_shown() -> None:
    rows = review.rows(big_manifest(10))
    d = Decision(subject="sha256:" + rows[0].sha256, scope="supplier", supplier="acme", verdict="accepted",
                 by="alice", at="2026-12-07T00:00:00+00:00")  # fmt: skip
    other = Decision(subject="sha256:" + rows[1].sha256, scope="supplier", supplier="globex",
                     verdict="rejected", by="bob", at="2026-12-07T00:00:00+00:00")  # fmt: skip
    now = review.overlay(rows, [d, other], "acme")
    assert (now[0].state, now[0].by) == ("accepted", "alice") and now[1].state == "open"  # not globex's
    open_ = review.page(now, review.Query.parse({}))
    assert open_.total == 9 and open_.states == {"accepted": 1, "open": 9}
    assert review.page(now, review.Query.parse({"state": "accepted"})).total == 1


def test_a_query_keeps_to_what_it_knows() -> None:
    q = review.Query.parse({"page": "-3", "group": "<script>", "state": "bogus", "q": "x" * 500})
    assert (q.page, q.group, q.state, len(q.q)) == (1, "state", "", 200)
    assert review.Query.parse({"page": "two"}).page == 1
    assert q.params(page=3)["page"] == "3" and "page" not in q.params()


# ------------------------------------------------------------------ rendering
def test_pages_escape_what_they_are_given_and_static_files_are_only_the_desks() -> None:
    html = render.page("error.html", title="<b>t</b>", message="<img src=x onerror=alert(1)>")
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img" not in html and "<b>t" not in html
    assert render.static("desk.js") is not None and render.static("../routes.py") is None
    css = render.static("desk.css")
    assert css is not None and ".code .vendor" in css[1]  # the diff colours of the reports


def test_a_folder_found_by_bisection_is_the_folder_a_filter_finds() -> None:
    m = big_manifest(5_000)
    m["files"] += [{"path": p, "sha256": "f" * 64, "class": "added", "component": ""}
                   for p in ("README", "drop/d007x/y.c", "drop/d007/sub/z.c")]  # fmt: skip
    rows = review.rows(m)
    orders = review.Orders(rows)
    for folder in ("drop/d007/", "drop/d007", "drop/", "(top level)", "drop/d007/sub/", "nowhere/"):
        for group in review.GROUPS:
            q = review.Query.parse({"folder": folder, "group": group})
            got = review.page(rows, q, size=10_000, orders=orders).rows
            assert {r.path for r in got} == {r.path for r in review.matching(rows, q)}, (folder, group)
    under = {r.path for r in review.page(rows, review.Query.parse({"folder": "drop/d007"})).rows}
    assert "drop/d007/sub/z.c" in under and "drop/d007x/y.c" not in under and len(under) == 14


def test_a_whole_review_set_by_a_group_is_paged_as_the_filtered_one_would_be() -> None:
    rows = review.rows(big_manifest(3_000))
    orders = review.Orders(rows)
    for group in ("component", "folder", "flag"):
        for n in (1, 7, 30):
            fast = review.page(rows, review.Query.parse({"group": group, "page": str(n)}), orders=orders)
            # the same query through the filtering path: a filter that keeps every row
            slow = review.page(rows, review.Query.parse({"group": group, "page": str(n), "q": "/"}))
            assert (fast.rows, fast.total, fast.groups) == (slow.rows, slow.total, slow.groups), (group, n)


def test_the_default_page_is_the_filtered_one() -> None:
    rows = review.rows(big_manifest(2_000))
    for params in ({}, {"state": "all"}, {"page": "3"}):
        fast = review.page(rows, review.Query.parse(params))
        slow = review.page(rows, review.Query.parse(params | {"q": "/"}))
        assert (fast.rows, fast.total, fast.groups, fast.states) == (
            slow.rows,
            slow.total,
            slow.groups,
            slow.states,
        )


def test_the_next_undecided_file_follows_by_path_and_wraps_round_to_the_first() -> None:
    rows = review.rows(big_manifest(8))  # drop/d000/f000000.c ... drop/d007/f000007.c
    paths = [r.path for r in rows]
    decided = [Decision(subject="sha256:" + rows[i].sha256, scope="supplier", supplier="acme", verdict=v,
                        by="alice", at="2026-12-07T00:00:00+00:00")
               for i, v in ((1, "accepted"), (2, "needs-action"), (4, "rejected"))]  # fmt: skip
    now = review.overlay(rows, decided, "acme")
    # decided files are passed over, whatever the verdict: only open (or re-opened) ones are next
    assert review.next_undecided(now, paths[0]) == review.Next(paths[3], 5)
    assert review.next_undecided(now, paths[3]) == review.Next(paths[5], 5)
    assert review.next_undecided(now, paths[7]) == review.Next(paths[0], 5)  # round to the first
    assert review.next_undecided(now, paths[1]) == review.Next(paths[3], 5)  # from a decided file too
    assert review.next_undecided(now, "nowhere/else.c") == review.Next(paths[0], 5)
    last = review.overlay(rows, [replace(d, subject="sha256:" + r.sha256) for d in decided[:1]
                                 for r in rows[1:]], "acme")  # fmt: skip
    assert review.next_undecided(last, paths[0]) == review.Next(None, 1)  # this one is the last
    done = review.overlay(rows, [replace(decided[0], subject="sha256:" + r.sha256) for r in rows], "acme")
    assert review.next_undecided(done, paths[0]) == review.Next(None, 0)

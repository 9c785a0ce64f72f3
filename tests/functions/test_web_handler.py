"""The review desk's function on moto: users signed in through moto's Cognito, their ID tokens checked
as the HTTP API's JWT authorizer checks them, their claims passed on as API Gateway passes them.

One stack for the module: BusyBox-like drops of two suppliers, scanned through the whole flow; users
of each supplier, a read-only supplier user and a reviewer who may decide globally.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

import pytest

from dropscan.keys import desk_index_keys, manifest_key
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.models import Decision
from dropscan.web import routes
from dropscan.web.index import Index
from dropscan.web.routes import SECURITY_HEADERS

from helpers.builders import make_tar
from helpers.desk import DeskClient
from helpers.flows import Scanned, scan_and_wait
from helpers.product_drops import UPSTREAM, first_drop, review_set, second_drop

HOSTILE = "widget-1.0-acme/acme/<img src=x onerror=alert(1)>.c"


@dataclass
class World:
    es: EmbeddedStack
    desk: DeskClient
    acme: Scanned
    globex: Scanned
    tmp: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("desk")
    with embedded() as es:
        es.client.ingest(make_tar(tmp / "widget-1.0.tar.gz", UPSTREAM), "widget", "1.0")
        first = first_drop() | {HOSTILE: b"int hostile;\n"}
        acme = scan_and_wait(es, make_tar(tmp / "acme-widget-1.0-gpl.tar.gz", first), "acme")
        other = {p.replace("acme", "globex"): d for p, d in first_drop().items()}
        globex = scan_and_wait(es, make_tar(tmp / "globex-widget-1.0-gpl.tar.gz", other), "globex")
        desk = DeskClient(es)
        desk.add_user("alice", "review-acme")
        desk.add_user("bob", "review-globex")
        desk.add_user("carol", "supplier-acme")
        desk.add_user("dave", "review-acme", "global-decisions")
        yield World(es, desk, acme, globex, tmp)


def modified(scanned: Scanned) -> str:
    files = scanned.manifest["files"]
    return str(next(f["path"] for f in files if f["class"] == "modified" and f.get("evidence")))


def file_url(scanned: Scanned, path: str) -> str:
    return f"/scans/{scanned.scan_id}/file?path={quote(path, safe='')}"


# ------------------------------------------------------------------ signing in
def test_a_wrong_password_signs_nobody_in_and_a_page_needs_a_token(world: World) -> None:
    answer = world.desk.call("POST", "/auth/signin", {}, b"username=alice&password=not-it")
    assert answer.status == 401 and "wrong name or password" in answer.json()["message"]
    assert world.desk.call("GET", "/desk", {}).status == 401
    assert world.desk.call("GET", "/desk", {"Authorization": "Bearer not.a.token"}).status == 401
    alice = world.desk.sign_in("alice")
    forged = alice.token[:-4] + ("AAAA" if not alice.token.endswith("AAAA") else "BBBB")
    assert world.desk.call("GET", "/desk", {"Authorization": f"Bearer {forged}"}).status == 401
    assert alice.get("/desk").status == 200


def test_the_sign_in_page_and_its_script_need_no_token_and_carry_the_policy(world: World) -> None:
    for target in ("/", "/static/desk.js", "/static/desk.css"):
        answer = world.desk.call("GET", target, {})
        assert answer.status == 200, target
        assert answer.headers["Content-Security-Policy"] == SECURITY_HEADERS["Content-Security-Policy"]
    assert world.desk.call("GET", "/static/../routes.py", {}).status in (401, 404)


# ------------------------------------------------------------------ who sees what
def test_a_reviewer_sees_the_drops_of_their_suppliers_only(world: World) -> None:
    alice, bob = world.desk.sign_in("alice"), world.desk.sign_in("bob")
    home = alice.get("/desk")
    assert world.acme.scan_id in home.body and world.globex.scan_id not in home.body
    assert "globex" not in home.body
    assert world.globex.scan_id in bob.get("/desk").body and world.acme.scan_id not in bob.get("/desk").body
    assert alice.get(f"/scans/{world.acme.scan_id}").status == 200


def test_another_suppliers_scan_answers_404_as_if_it_did_not_exist(world: World) -> None:
    alice = world.desk.sign_in("alice")
    other = world.globex.scan_id
    missing = "s-" + "0" * 24
    for target in (f"/scans/{other}", file_url(world.globex, modified(world.globex)), "/suppliers/globex"):
        answer = alice.get(target)
        assert answer.status == 404, target
        assert answer.body == alice.get(f"/scans/{missing}").body  # nothing tells the two apart
    assert alice.get(f"/api/scans/{other}/review").status == 404
    assert alice.get("/api/suppliers/globex/scans").status == 404
    csrf = alice.csrf()
    path = modified(world.globex)
    answer = alice.post(f"/scans/{other}/decisions", {"csrf": csrf, "path": path, "verdict": "accepted"})
    assert answer.status == 404
    assert world.es.client.decisions.for_contents([_sha(world.globex, path)], "globex") == []


def test_a_supplier_reads_its_own_findings_but_cannot_decide(world: World) -> None:
    carol = world.desk.sign_in("carol")
    page = carol.get(f"/scans/{world.acme.scan_id}")
    assert page.status == 200 and 'id="decide"' in page.body and 'id="accept"' not in page.body
    path = modified(world.acme)
    answer = carol.post(f"/scans/{world.acme.scan_id}/decisions",
                        {"csrf": carol.csrf(), "path": path, "verdict": "accepted"})  # fmt: skip
    assert answer.status == 403
    assert world.es.client.decisions.for_contents([_sha(world.acme, path)], "acme") == []
    assert carol.get(f"/scans/{world.globex.scan_id}").status == 404


# ------------------------------------------------------------------ pages
def test_the_review_page_groups_filters_and_pages_on_the_server(world: World) -> None:
    alice = world.desk.sign_in("alice")
    review = alice.get(f"/api/scans/{world.acme.scan_id}/review", group="folder", state="all").json()
    review_class = {f["path"] for f in world.acme.manifest["files"] if f["class"] in ("modified", "added")}
    assert review["total"] == len(review_class) == len({r["path"] for r in review["rows"]})
    assert {g for g, _ in review["groups"]} >= {"widget-1.0-acme/acme/", "widget-1.0-acme/src/"}
    only = alice.get(
        f"/api/scans/{world.acme.scan_id}/review", folder="widget-1.0-acme/src/", state="all"
    ).json()
    assert only["total"] == 4 and all(r["path"].startswith("widget-1.0-acme/src/") for r in only["rows"])
    flagged = alice.get(f"/api/scans/{world.acme.scan_id}/review", flag="proprietary", state="all").json()
    assert [r["path"] for r in flagged["rows"]] == ["widget-1.0-acme/acme/secret.c"]
    page = alice.get(f"/scans/{world.acme.scan_id}", group="component")
    assert page.status == 200 and "widget-1.0-acme/src/w00.c" in page.body


def test_a_file_page_shows_its_diff_flags_and_licences(world: World) -> None:
    alice = world.desk.sign_in("alice")
    page = alice.get(file_url(world.acme, "widget-1.0-acme/src/w00.c"))
    assert page.status == 200
    assert 'class="add vendor"' in page.body and "acme: tuned" in page.body  # the vendor hunk, coloured
    secret = alice.get(file_url(world.acme, "widget-1.0-acme/acme/secret.c")).body
    assert "proprietary" in secret and "CONFIDENTIAL AND PROPRIETARY" in secret and "<td>1</td>" in secret
    assert alice.get(file_url(world.acme, "no/such/file.c")).status == 404


def test_everything_from_the_drop_is_text_never_markup(world: World) -> None:
    alice = world.desk.sign_in("alice")
    for answer in (
        alice.get(f"/scans/{world.acme.scan_id}", q="img"),
        alice.get(file_url(world.acme, HOSTILE)),
    ):
        assert answer.status == 200
        assert "&lt;img src=x onerror=alert(1)&gt;.c" in answer.body
        assert "<img" not in answer.body
        assert answer.headers["Content-Security-Policy"].startswith("default-src 'none'; script-src 'self'")


def test_report_links_are_presigned_and_short_lived(world: World) -> None:
    alice = world.desk.sign_in("alice")
    body = alice.get(f"/scans/{world.acme.scan_id}").body
    links = dict(re.findall(r'href="([^"]+)" target="_blank" rel="noopener noreferrer" class="report" '
                            r'data-format="([a-z]+)"', body))  # fmt: skip
    by_format = {fmt: url.replace("&amp;", "&") for url, fmt in links.items()}
    assert set(by_format) == {"html", "spdx", "cyclonedx", "manifest"}
    assert all("X-Amz-Expires=300" in u and "X-Amz-Signature=" in u for u in by_format.values())


# ------------------------------------------------------------------ deciding
def test_a_state_change_needs_the_sessions_csrf_token_and_the_desks_origin(world: World) -> None:
    alice = world.desk.sign_in("alice")
    path = "widget-1.0-acme/src/w01.c"
    url = f"/scans/{world.acme.scan_id}/decisions"
    form = {"path": path, "verdict": "accepted"}
    assert alice.post(url, form).status == 403  # no token
    assert alice.post(url, form | {"csrf": "0" * 64}).status == 403
    other = world.desk.sign_in("dave")  # another session's token is not this one's
    assert alice.post(url, form | {"csrf": other.csrf()}).status == 403
    assert alice.post(url, form | {"csrf": alice.csrf()}, origin="https://evil.example").status == 403
    assert world.es.client.decisions.for_contents([_sha(world.acme, path)], "acme") == []
    assert alice.post(url, form | {"csrf": alice.csrf()}).status == 303
    assert alice.post(url, form | {"csrf": alice.csrf()}, origin="").status == 303  # no Origin: token alone


def test_a_decision_is_attributed_to_the_signed_in_user_whatever_the_form_says(world: World) -> None:
    alice = world.desk.sign_in("alice")
    path = "widget-1.0-acme/src/w02.c"
    form = {"csrf": alice.csrf(), "path": path, "verdict": "needs-action", "note": "ask acme"}
    form |= {"by": "mallory", "back": "file"}
    answer = alice.post(f"/scans/{world.acme.scan_id}/decisions", form)
    assert answer.status == 303 and answer.location.startswith(f"/scans/{world.acme.scan_id}/file?path=")
    [d] = world.es.client.decisions.for_contents([_sha(world.acme, path)], "acme")
    assert (d.by, d.verdict, d.note, d.scope, d.supplier, d.scan_id) == (
        "alice", "needs-action", "ask acme", "supplier", "acme", world.acme.scan_id
    )  # fmt: skip
    page = alice.get(answer.location)
    assert 'id="file-state">needs-action' in page.body and '<td class="by">alice</td>' in page.body
    # decided again: the table holds the latest, the history keeps both
    alice.post(f"/scans/{world.acme.scan_id}/decisions", form | {"verdict": "accepted", "note": "fixed"})
    [d] = world.es.client.decisions.for_contents([_sha(world.acme, path)], "acme")
    assert d.verdict == "accepted"
    history = alice.get(file_url(world.acme, path)).body
    assert history.count('<td class="by">alice</td>') == 2 and "ask acme" in history and "fixed" in history


def test_a_decision_the_rules_refuse_is_a_clear_400_and_writes_nothing(world: World) -> None:
    alice = world.desk.sign_in("alice")
    url = f"/scans/{world.acme.scan_id}/decisions"
    path = "widget-1.0-acme/acme/leds.c"
    for form in ({"path": path, "verdict": "maybe"}, {"path": "not/in/the/drop.c", "verdict": "accepted"},
                 {"path": "widget-1.0-acme/README", "verdict": "accepted"}):  # fmt: skip
        answer = alice.post(url, form | {"csrf": alice.csrf()})
        assert answer.status == 400 and 'id="error-message"' in answer.body, form
    assert world.es.client.decisions.for_contents([_sha(world.acme, path)], "acme") == []
    nothing = alice.post(url, {"csrf": alice.csrf(), "verdict": "accepted"})  # nothing checked
    assert nothing.status == 303 and "done=none" in nothing.location
    headers = {"Authorization": f"Bearer {alice.token}", "X-CSRF-Token": alice.csrf()}
    api = world.desk.call("POST", f"/api/scans/{world.acme.scan_id}/decisions", headers, b"[1, 2")
    assert api.status == 400 and api.json()["message"] == "the body is not JSON"


def test_a_global_decision_needs_the_group_for_it(world: World) -> None:
    alice, dave = world.desk.sign_in("alice"), world.desk.sign_in("dave")
    path = "widget-1.0-acme/src/w03.c"
    form = {"path": path, "verdict": "accepted", "scope": "global"}
    assert alice.post(f"/scans/{world.acme.scan_id}/decisions", form | {"csrf": alice.csrf()}).status == 403
    assert dave.post(f"/scans/{world.acme.scan_id}/decisions", form | {"csrf": dave.csrf()}).status == 303
    [d] = world.es.client.decisions.for_contents([_sha(world.acme, path)], "acme")
    assert (d.scope, d.by) == ("global", "dave")


def test_decisions_from_the_desk_apply_to_the_suppliers_next_drop(world: World) -> None:
    """Every file decided from the pages (a selection, then everything matching the filter); the next
    drop comes back with those decisions applied and only what changed to review."""
    alice = world.desk.sign_in("alice")
    url = f"/scans/{world.acme.scan_id}/decisions"
    first = alice.post(
        url, {"csrf": alice.csrf(), "path": ["widget-1.0-acme/acme/board.c"], "verdict": "accepted"}
    )
    assert first.status == 303 and "done=1-accepted" in first.location
    rest = alice.post(
        url, {"csrf": alice.csrf(), "select": "matching", "verdict": "accepted", "note": "1.0 audit"}
    )
    assert rest.status == 303
    left = alice.get(f"/api/scans/{world.acme.scan_id}/review").json()
    assert left["total"] == 0, left["rows"]  # nothing left to decide in this drop
    # the CLI sees them: they are the decisions it writes
    assert {d.by for d in world.es.client.decisions.of_scope("supplier", "acme")} == {"alice"}

    second, changed, new = second_drop(first_drop())
    m2 = scan_and_wait(world.es, make_tar(world.tmp / "acme-widget-1.1-gpl.tar.gz", second), "acme").manifest
    assert review_set(m2) == changed | new
    cleared = {f["path"]: f["decision"] for f in m2["files"] if f.get("decision")}
    assert cleared["widget-1.1-acme/acme/board.c"]["by"] == "alice"
    page = alice.get(f"/scans/{m2['scan_id']}")
    assert page.status == 200 and f'id="review-count">{len(changed | new)}' in page.body
    assert world.desk.sign_in("bob").get(f"/scans/{m2['scan_id']}").status == 404


def _sha(scanned: Scanned, path: str) -> str:
    digest: str = next(f["sha256"] for f in scanned.manifest["files"] if f["path"] == path)
    return digest


def test_two_decisions_in_one_second_count_in_the_order_they_were_taken(world: World) -> None:
    """A reviewer who changes their mind within the same second (needs action, then accepted): the desk
    shows the later decision, as the decisions table keeps it. Twenty contents, so that an order left to
    chance cannot pass."""
    desk = routes.backend().desk
    at = "2026-01-01T00:00:00+00:00"
    subjects = [f"sha256:{hashlib.sha256(str(i).encode()).hexdigest()}" for i in range(20)]
    for subject in subjects:
        first = Decision(subject, "supplier", "acme", "needs-action", "alice", at, scan_id="s-same-second")
        desk.record([first])
        desk.record([replace(first, verdict="accepted")])
    last: dict[str, str] = {}
    for d in desk.taken_in("s-same-second"):  # oldest first
        last[d.subject] = d.verdict
    assert last == dict.fromkeys(subjects, "accepted")
    assert [d.verdict for d in desk.history_of(subjects[0].removeprefix("sha256:"))] == [
        "needs-action",
        "accepted",
    ]


# ------------------------------------------------------------------ the desk index
def test_triage_writes_the_desk_index_beside_the_manifest_with_its_etag(world: World) -> None:
    s3, bucket = world.es.client.s3, world.es.names.results_bucket
    acme = world.acme
    etag = s3.head_object(Bucket=bucket, Key=manifest_key("acme", acme.scan_id))["ETag"]
    index_key, files_key = desk_index_keys("acme", acme.scan_id)
    index = Index.parse(s3.get_object(Bucket=bucket, Key=index_key)["Body"].read())
    assert index.manifest_etag == etag
    assert [r.path for r in index.rows] == sorted(review_set(acme.manifest))
    assert s3.head_object(Bucket=bucket, Key=files_key)["ContentLength"] > 0


def test_a_manifest_written_again_gets_a_new_index_on_its_first_request(world: World) -> None:
    """As firmware_check rewrites a manifest: the index of the old one is not served."""
    s3, bucket = world.es.client.s3, world.es.names.results_bucket
    scanned = world.globex
    key = manifest_key("globex", scanned.scan_id)
    m = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    path = modified(scanned)
    f = next(f for f in m["files"] if f["path"] == path)
    f["in_binary"] = True
    etag = s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(m).encode())["ETag"]
    bob = world.desk.sign_in("bob")
    page = bob.get(f"/scans/{scanned.scan_id}/file", path=path)
    assert page.status == 200 and 'id="in-binary">in the firmware binary: yes' in page.body
    index_key, _ = desk_index_keys("globex", scanned.scan_id)
    assert Index.parse(s3.get_object(Bucket=bucket, Key=index_key)["Body"].read()).manifest_etag == etag

"""The review desk's HTTP API and pages, as Powertools' APIGatewayHttpResolver routes.

Every route but ``PUBLIC_ROUTES`` sits behind the HTTP API's JWT authorizer (template.yaml; locally
dropscan.local.http_api plays it), and every one of them checks here, from the claims, that the user may see
the supplier it touches: another supplier's scan answers 404 exactly as a scan that does not exist.
State changes (decisions) also pass :func:`dropscan.web.access.check_state_change`, and a first
sign-in's new password :func:`dropscan.web.access.check_new_password`. Every response
carries a strict Content-Security-Policy (:func:`handle`).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError

from dropscan.audit import hunk_decisions
from dropscan.audit.decision_rules import DecisionError, choose, in_review_class, record
from dropscan.models import VERDICTS, Decision
from dropscan.reports import view
from dropscan.web import render, review
from dropscan.web.access import (
    Forbidden,
    User,
    challenge_csrf_token,
    check_new_password,
    check_state_change,
    csrf_token,
    user_of,
)

if TYPE_CHECKING:
    from dropscan.store.desk import Desk, ScanEntry
    from dropscan.web.index import Index

#: the routes the HTTP API lets through without a token (template.yaml's WebFunction events say the same)
PUBLIC_ROUTES = (
    ("GET", "/"),
    ("GET", "/static/{name}"),
    ("POST", "/auth/signin"),
    ("POST", "/auth/new-password"),  # a first sign-in: the challenge's session is the credential
    ("POST", "/auth/refresh"),  # the ID token may have expired: the refresh token is the credential
    ("POST", "/auth/signout"),  # the access token is the credential
)

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
HTML = "text/html; charset=utf-8"
JSON = "application/json"
SCAN_ID = re.compile(r"^s-[0-9a-f]{24}$")
LINK_SECONDS = 300  # the reports' presigned links: short-lived, made afresh with each page
HUNKS_SHOWN = 200
#: what a single hunk may be decided as (a hunk is kept or not; rejecting is for a whole file)
HUNK_VERDICTS = ("accepted", "needs-action")
ORIGINS = {
    "upstream": "backport: every change is upstream's",
    "vendor": "vendor change",
    "mixed": "mixed: some changes are upstream's",
}


class Unauthorized(Exception):
    """No user in the request: the authorizer did not run (a route outside the API's protection)."""


@dataclass
class Backend:
    """What the routes read and write through, built once per process from the environment."""

    desk: Desk
    sign_in: Callable[[str, str], Any]  # (name, password) -> identity.Tokens | identity.NewPasswordRequired
    new_password: Callable[[str, str, str], Any]  # (name, challenge session, password) -> identity.Tokens
    renew: Callable[[str], Any]  # refresh token -> dropscan.store.identity.Tokens
    sign_out: Callable[[str], None]  # access token -> the session's tokens revoked

    @classmethod
    def from_env(cls) -> Backend:
        from dropscan.settings import get_settings
        from dropscan.store import identity
        from dropscan.store.desk import Desk
        from dropscan.store.services import current_services

        services = current_services()
        s = services.settings
        desk = Desk(
            services.s3,
            services.dynamodb,
            results_bucket=s.results_bucket,
            scans=services.scans,
            decisions_table=s.decisions_table,
        )
        cognito = identity.client(get_settings().region, s.endpoint_url, signed=False)
        client_id = os.environ.get("USER_POOL_CLIENT_ID", "")
        return cls(
            desk=desk,
            sign_in=lambda u, p: identity.sign_in(cognito, client_id, u, p),
            new_password=lambda u, session, p: identity.set_new_password(cognito, client_id, u, session, p),
            renew=lambda token: identity.refresh(cognito, client_id, token),
            sign_out=lambda token: identity.sign_out(cognito, token),
        )


_backend: Backend | None = None
_backend_lock = threading.Lock()


def backend() -> Backend:
    global _backend
    with _backend_lock:
        if _backend is None:
            _backend = Backend.from_env()
        return _backend


def use_backend(b: Backend | None) -> None:
    """Set the backend (tests and the local server build theirs); None: from the environment again."""
    global _backend
    with _backend_lock:
        _backend = b


app = APIGatewayHttpResolver()


# ------------------------------------------------------------------ request helpers
def _user() -> User:
    ctx = app.current_event.request_context
    claims = ctx.authorizer.jwt_claim if ctx.authorizer else None
    user = user_of(claims or {})
    if user is None:
        raise Unauthorized
    return user


def _params() -> dict[str, str]:
    raw = app.current_event.raw_query_string or ""
    return {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}


def _form() -> dict[str, list[str]]:
    body = app.current_event.decoded_body or ""
    return parse_qs(body, keep_blank_values=True, max_num_fields=200_000)


def _html(body: str, status: int = 200) -> Response[str]:
    return Response(status_code=status, content_type=HTML, body=body)


def _json(data: Any, status: int = 200) -> Response[str]:
    return Response(status_code=status, content_type=JSON, body=json.dumps(data, default=str))


def _see(location: str) -> Response[str]:
    return Response(status_code=303, content_type=HTML, body="", headers={"Location": location})


def _not_found(user: User | None, what: str = "Not found") -> Response[str]:
    msg = "There is nothing here, or nothing you may see."
    body = render.page(
        "error.html", title=what, message=msg, user=user, csrf=csrf_token(user) if user else ""
    )
    return _html(body, 404)


class Gone(NotFoundError):
    """Not there, or not for this user: the same answer."""


def _scan_for(user: User, scan_id: str) -> ScanEntry:
    if not SCAN_ID.match(scan_id):
        raise Gone
    entry = backend().desk.scan(scan_id)
    if entry is None or not user.can_read(entry.supplier):
        raise Gone
    return entry


def _index(entry: ScanEntry) -> Index:
    """The scan's desk index; Gone before its manifest is written."""
    found = backend().desk.index(entry.supplier, entry.scan_id)
    if found is None:
        raise Gone
    return found


def _current_rows(entry: ScanEntry, index: Index) -> list[review.Row]:
    taken = backend().desk.taken_in(entry.scan_id)
    return review.overlay(index.rows, taken, entry.supplier)


# ------------------------------------------------------------------ public
@app.get("/")
def signin_page() -> Response[str]:
    return _html(render.page("signin.html"))


@app.get("/static/<name>")
def static(name: str) -> Response[str]:
    found = render.static(name)
    if found is None:
        return Response(status_code=404, content_type="text/plain", body="not found")
    ctype, text = found
    return Response(status_code=200, content_type=ctype, body=text)


@app.post("/auth/signin")
def signin() -> Response[str]:
    """The tokens of a sign-in; for a user whose password is still the temporary one, no token but the
    state ``new-password-required`` with the challenge's session and its CSRF token."""
    from dropscan.store.identity import NewPasswordRequired, SignInError

    form = {k: v[0] for k, v in _form().items()}
    try:
        answer = backend().sign_in(form.get("username", "").strip(), form.get("password", ""))
    except SignInError as e:
        return _json({"message": str(e)}, 401)
    if isinstance(answer, NewPasswordRequired):
        return _json(
            {
                "state": "new-password-required",
                "message": "Your password was a temporary one: choose your own to sign in.",
                "username": answer.username,
                "session": answer.session,
                "csrf": challenge_csrf_token(answer.username, answer.session),
            }
        )
    return _json(_session(answer))


@app.post("/auth/new-password")
def new_password() -> Response[str]:
    """A first sign-in's own password (the challenge's session, the CSRF token of the sign-in's answer,
    the password twice): signed in as by /auth/signin, the temporary password gone."""
    from dropscan.store.identity import PasswordRefused, SignInError

    form = {k: v[0] for k, v in _form().items()}
    username, session = form.get("username", "").strip(), form.get("session", "")
    token = form.get("csrf") or _header("x-csrf-token")
    try:
        check_new_password(username, session, token, app.current_event.headers or {}, _host())
    except Forbidden as e:
        return _json({"message": str(e)}, 403)
    password = form.get("new_password", "")
    if "confirm" in form and form["confirm"] != password:
        return _json({"message": "the two passwords differ: type the same one twice"}, 400)
    try:
        tokens = backend().new_password(username, session, password)
    except PasswordRefused as e:
        return _json({"message": str(e)}, 400)
    except SignInError as e:
        return _json({"message": str(e)}, 401)
    return _json(_session(tokens))


def _session(tokens: Any) -> dict[str, Any]:
    out = {
        "state": "signed-in",
        "id_token": tokens.id_token,
        "access_token": tokens.access_token,
        "expires_in": tokens.expires_in,
    }
    if tokens.refresh_token:
        out["refresh_token"] = tokens.refresh_token
    return out


@app.post("/auth/refresh")
def refresh() -> Response[str]:
    """A new ID token for a session whose refresh token still holds (REFRESH_TOKEN_AUTH)."""
    from dropscan.store.identity import SignInError

    form = {k: v[0] for k, v in _form().items()}
    try:
        tokens = backend().renew(form.get("refresh_token", ""))
    except SignInError as e:
        return _json({"message": str(e)}, 401)
    return _json(_session(tokens))


@app.post("/auth/signout")
def signout() -> Response[str]:
    """Revoke the session's tokens (GlobalSignOut): its refresh token renews nothing any more."""
    form = {k: v[0] for k, v in _form().items()}
    backend().sign_out(form.get("access_token", ""))
    return _json({"signed_out": True})


# ------------------------------------------------------------------ pages
def _supplier_view(name: str) -> dict[str, Any]:
    scans = backend().desk.scans_of(name)
    products: dict[str, list[Any]] = defaultdict(list)
    for e in scans:
        products[e.product or e.drop].append(e)
    return {"name": name, "scans": scans, "products": sorted(products.items())}


@app.get("/desk")
def home() -> Response[str]:
    user = _user()
    suppliers = [_supplier_view(s) for s in user.suppliers]
    return _html(
        render.page("home.html", title="Suppliers", user=user, csrf=csrf_token(user), suppliers=suppliers)
    )


@app.get("/suppliers/<name>")
def supplier(name: str) -> Response[str]:
    user = _user()
    if not user.can_read(name):
        raise Gone
    s = _supplier_view(name)
    return _html(render.page("supplier.html", title=name, user=user, csrf=csrf_token(user), s=s))


_NOTICES = {
    "none": "Nothing was checked: no decision recorded.",
    "hunk-accepted": "Recorded: the hunk accepted, under your name.",
    "hunk-needs-action": "Recorded: the hunk needs action, under your name.",
}


def _notice(params: Mapping[str, str]) -> str:
    done = params.get("done", "")
    if done in _NOTICES:
        return _NOTICES[done]
    n, _, verdict = done.partition("-")
    if n.isdigit() and verdict in VERDICTS:
        s = "s" if int(n) != 1 else ""
        return f"Recorded: {verdict} on {int(n):,} distinct content{s}, under your name."
    return ""


@app.get("/scans/<scan_id>")
def scan_page(scan_id: str) -> Response[str]:
    user = _user()
    entry = _scan_for(user, scan_id)
    index = backend().desk.index(entry.supplier, entry.scan_id)
    if index is None:
        message = (
            f"{entry.drop} is still being scanned ({entry.status}); its review set comes with its manifest."
        )
        return _html(
            render.page("error.html", title=entry.drop, message=message, user=user, csrf=csrf_token(user))
        )
    m = index.head
    params = _params()
    q = review.Query.parse(params)
    pg = review.page(_current_rows(entry, index), q, orders=index.orders)
    desk = backend().desk
    keys = dict(m.get("reports") or {})
    from dropscan.keys import manifest_key

    keys["manifest"] = manifest_key(entry.supplier, entry.scan_id)
    body = render.page(
        "scan.html",
        title=view.drop_name(m),
        user=user,
        csrf=csrf_token(user),
        m=m,
        scan_id=scan_id,
        drop=view.drop_name(m),
        summary=m.get("summary") or {},
        flags=(m.get("summary") or {}).get("flags") or {},
        delta=m.get("delta"),
        links=desk.links(keys, LINK_SECONDS),
        link_minutes=LINK_SECONDS // 60,
        q=q,
        page=pg,
        here=lambda **ch: render.url(f"/scans/{scan_id}", q.params(**ch)),
        group_param=q.group,
        states_order=review.STATES,
        groups_order=review.GROUPS,
        components=m.get("components") or [],
        flag_kinds=m.get("flag_kinds") or [],
        can_decide=user.can_decide(entry.supplier),
        notice=_notice(params),
    )
    return _html(body)


def _history(user: User, entry: ScanEntry, sha256: str) -> list[dict[str, Any]]:
    """Earlier decisions on this content that the user may know of: the desk's history, and the
    decisions in force (the CLI's among them), newest first. A global decision taken on another
    supplier's drop is shown without saying where."""
    desk = backend().desk
    history = desk.history_of(sha256)
    # the decisions in force that the desk's history lacks: the CLI's
    found = history + [d for d in desk.decisions_for([sha256], entry.supplier) if d not in history]
    out = []
    for d in sorted(found, key=lambda d: d.at, reverse=True):
        visible = user.can_read(d.supplier)
        if not visible and d.scope != "global":
            continue
        where = f"{d.supplier}: {d.path}" if visible else "another supplier's drop"
        label = "every supplier" if d.scope == "global" else f"supplier {d.supplier}"
        out.append(
            {
                "at": d.at,
                "by": d.by,
                "verdict": d.verdict,
                "scope_label": label,
                "where": where,
                "note": d.note,
            }
        )
    return out


@app.get("/scans/<scan_id>/file")
def file_page(scan_id: str) -> Response[str]:
    from dropscan.reports import diffs

    user = _user()
    entry = _scan_for(user, scan_id)
    index = _index(entry)
    m = index.head
    params = _params()
    path = params.get("path", "")
    line = backend().desk.file_line(entry.supplier, entry.scan_id, index, path)
    if line is None:
        raise Gone
    f = line["f"]
    ev = view.evidence(f)
    commits_of = line.get("commits") or {}
    cited = dict.fromkeys(str(h["commit"]) for h in (ev or {}).get("hunks") or [] if h.get("commit"))
    commits = [
        {
            "id": c,
            "subject": str((commits_of.get(c) or {}).get("subject") or ""),
            "release": (commits_of.get(c) or {}).get("release"),
        }
        for c in cited
    ]
    history = _history(user, entry, str(f["sha256"]))
    in_force = choose(backend().desk.decisions_for([f["sha256"]], entry.supplier), entry.supplier)
    state = ""
    if in_review_class(f):
        row = review.rows({"files": [f], "flags": line.get("flags") or []})[0]
        d = in_force.get(str(f["sha256"]))
        state = d.verdict if d and d.at > row.at else row.state
    hunks = _hunks(user, entry, f)
    # where a reviewer working through the review set goes from here, as the drop's page stands now
    upcoming = review.next_undecided(_current_rows(entry, index), path)
    origin_label = ORIGINS.get(str((ev or {}).get("origin")), "")
    body = render.page(
        "file.html",
        title=path,
        user=user,
        csrf=csrf_token(user),
        m=m,
        scan_id=scan_id,
        drop=view.drop_name(m),
        f=f,
        component=str(f.get("component") or "(top level)"),
        copies=int(line.get("copies") or 1),
        flags=line.get("flags") or [],
        licences=[view.finding_label(lic) for lic in view.licence_findings(f)],
        ev=ev,
        base=view.base_label((ev or {}).get("base")),
        origin_label=origin_label,
        commits=commits,
        diff=render.trusted(diffs.body(path, ev, diffs.Budget())) if ev else "",
        decisions=history,
        hunks=hunks,
        state=state,
        upcoming=upcoming,
        then_next=params.get("then") == "next",
        decided=params.get("decided", "") if params.get("done") else "",
        can_decide=user.can_decide(entry.supplier) and in_review_class(f),
        notice=_notice(params),
    )
    return _html(body)


def _hunks(user: User, entry: ScanEntry, f: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The file's hunks to review: each with its place, origin, the decision in force and its history
    on the desk (newest first); ``fp`` empty for a hunk past a patch cut short (not decidable alone)."""
    todo = hunk_decisions.reviewed(f)
    if not todo:
        return []
    keys = hunk_decisions.fingerprints(f)
    desk = backend().desk
    subjects = [hunk_decisions.subject(fp) for fp in keys.values()]
    in_force = hunk_decisions.choose(desk.hunk_decisions(subjects, entry.supplier), entry.supplier)
    out = []
    for i in todo[:HUNKS_SHOWN]:
        h = f["evidence"]["hunks"][i]
        fp = keys.get(i, "")
        d = in_force.get(fp) if fp else None
        seen = desk.history_of_subject(hunk_decisions.subject(fp)) if fp else []
        history = [
            x
            for x in seen
            if user.can_read(x.supplier) and (x.scope == "global" or x.supplier == entry.supplier)
        ]
        out.append(
            {
                "i": i,
                "fp": fp,
                "place": f"-{h.get('old_start')},{h.get('old_lines')} "
                f"+{h.get('new_start')},{h.get('new_lines')}",
                "origin": str(h.get("origin")),
                "state": d.verdict if d else "open",
                "decision": d,
                "history": sorted(history, key=lambda x: x.at, reverse=True),
            }
        )
    return out


# ------------------------------------------------------------------ decisions
def _decide(
    user: User, scan_id: str, form: Mapping[str, list[str]], token: str
) -> tuple[ScanEntry, int, str]:
    """Record the decisions a form (or a JSON call) asks for; returns (scan, contents decided, verdict)."""
    from dropscan.store.scans import now

    entry = _scan_for(user, scan_id)
    check_state_change(user, token, app.current_event.headers or {}, _host())
    if not user.can_decide(entry.supplier):
        raise Forbidden("your role may read this supplier's findings, not decide on them")
    one = {k: v[0] for k, v in form.items() if v}
    verdict, scope = one.get("verdict", ""), one.get("scope", "supplier")
    if scope not in user.scopes():
        raise Forbidden("deciding for every supplier needs the global-decisions group")
    index = _index(entry)
    paths = list(dict.fromkeys(form.get("path", [])))
    if one.get("select") == "matching":
        q = review.Query.parse({k[2:]: v for k, v in one.items() if k.startswith("f_")} | {"page": "1"})
        paths = [r.path for r in review.matching(_current_rows(entry, index), q)]
    if not paths:
        return entry, 0, verdict
    decided = record(
        index.decision_manifest(),
        paths=paths,
        verdict=verdict,
        by=user.name,
        at=now(),
        note=one.get("note", "")[:2000],
        scope=scope,
    )
    backend().desk.record(decided)
    return entry, len(decided), verdict


def _host() -> str:
    ev = app.current_event
    headers = {k.lower(): v for k, v in (ev.headers or {}).items()}
    return str(headers.get("host") or ev.request_context.domain_name or "")


def _decide_hunk(user: User, scan_id: str, form: Mapping[str, str], token: str) -> tuple[str, str]:
    """Record a decision on one hunk of a file (and, when it was the last hunk to accept, on the file);
    returns (the file's path, the verdict)."""
    from dropscan.store.scans import now

    entry = _scan_for(user, scan_id)
    check_state_change(user, token, app.current_event.headers or {}, _host())
    if not user.can_decide(entry.supplier):
        raise Forbidden("your role may read this supplier's findings, not decide on them")
    verdict, scope = form.get("verdict", ""), form.get("scope", "supplier")
    if scope not in user.scopes():
        raise Forbidden("deciding for every supplier needs the global-decisions group")
    if verdict not in HUNK_VERDICTS:
        raise DecisionError(f"a hunk is {' or '.join(HUNK_VERDICTS)}, not {verdict!r}")
    index = _index(entry)
    path = form.get("path", "")
    line = backend().desk.file_line(entry.supplier, entry.scan_id, index, path)
    if line is None or not in_review_class(line["f"]):
        raise Gone
    f = line["f"]
    keys = hunk_decisions.fingerprints(f)
    try:
        fp = keys[int(form.get("hunk", ""))]
    except (ValueError, KeyError):
        raise DecisionError("no such hunk to review in this file") from None
    at = now()
    d = Decision(
        subject=hunk_decisions.subject(fp),
        scope=scope,
        supplier=entry.supplier,
        verdict=verdict,
        by=user.name,
        at=at,
        note=form.get("note", "")[:2000],
        scan_id=entry.scan_id,
        path=path,
    )
    desk = backend().desk
    desk.record([d])
    if verdict == "accepted":
        subjects = [hunk_decisions.subject(x) for x in keys.values()]
        chosen = hunk_decisions.choose(desk.hunk_decisions(subjects, entry.supplier), entry.supplier)
        if hunk_decisions.all_accepted(f, chosen):
            whole = record(
                index.decision_manifest(),
                paths=[path],
                verdict="accepted",
                by=user.name,
                at=at,
                note=hunk_decisions.NOTE,
                scope="supplier",
            )
            desk.record(whole)
    return path, verdict


@app.post("/scans/<scan_id>/hunks")
def decide_hunk(scan_id: str) -> Response[str]:
    user = _user()
    form = {k: v[0] for k, v in _form().items() if v}
    try:
        path, verdict = _decide_hunk(user, scan_id, form, form.get("csrf") or _header("x-csrf-token"))
    except DecisionError as e:
        return _html(
            render.page("error.html", title="Not recorded", message=str(e), user=user, csrf=csrf_token(user)),
            400,
        )
    return _see(f"/scans/{scan_id}/file?path={quote(path, safe='')}&done=hunk-{verdict}")


@app.post("/scans/<scan_id>/decisions")
def decide(scan_id: str) -> Response[str]:
    user = _user()
    form = _form()
    token = (form.get("csrf") or [""])[0] or _header("x-csrf-token")
    try:
        entry, n, verdict = _decide(user, scan_id, form, token)
    except DecisionError as e:
        return _html(
            render.page("error.html", title="Not recorded", message=str(e), user=user, csrf=csrf_token(user)),
            400,
        )
    back = (form.get("back") or [""])[0]
    done = f"{n}-{verdict}" if n else "none"
    if back == "file" and form.get("path"):
        path = form["path"][0]
        if (form.get("then") or [""])[0] == "next":  # on to the next undecided file, saying what was done
            upcoming = review.next_undecided(_current_rows(entry, _index(entry)), path)
            there = {"path": upcoming.path or path, "done": done, "then": "next"}
            return _see(render.url(f"/scans/{scan_id}/file", there | {"decided": path}))
        return _see(f"/scans/{scan_id}/file?path={quote(path, safe='')}&done={done}")
    kept = {k[2:]: v[0] for k, v in form.items() if k.startswith("f_") and v}
    return _see(render.url(f"/scans/{scan_id}", kept | {"done": done}))


def _header(name: str) -> str:
    return str({k.lower(): v for k, v in (app.current_event.headers or {}).items()}.get(name, ""))


# ------------------------------------------------------------------ the same as JSON
@app.get("/api/me")
def api_me() -> Response[str]:
    user = _user()
    return _json(
        {
            "name": user.name,
            "reviews": sorted(user.reviews),
            "reads": sorted(user.reads),
            "scopes": user.scopes(),
            "csrf": csrf_token(user),
        }
    )


@app.get("/api/suppliers/<name>/scans")
def api_scans(name: str) -> Response[str]:
    user = _user()
    if not user.can_read(name):
        raise Gone
    return _json([e.__dict__ for e in backend().desk.scans_of(name)])


@app.get("/api/scans/<scan_id>/review")
def api_review(scan_id: str) -> Response[str]:
    user = _user()
    entry = _scan_for(user, scan_id)
    index = _index(entry)
    pg = review.page(_current_rows(entry, index), review.Query.parse(_params()), orders=index.orders)
    return _json(
        {
            "total": pg.total,
            "page": pg.page,
            "pages": pg.pages,
            "groups": pg.groups,
            "states": pg.states,
            "rows": [_row(r) for r in pg.rows],
        }
    )


def _row(r: review.Row) -> dict[str, Any]:
    return {k: getattr(r, k) for k in review.Row.__slots__}


@app.post("/api/scans/<scan_id>/decisions")
def api_decide(scan_id: str) -> Response[str]:
    user = _user()
    try:
        data = json.loads(app.current_event.decoded_body or "{}")
    except ValueError:
        return _json({"message": "the body is not JSON"}, 400)
    if not isinstance(data, dict):
        return _json({"message": "expected an object"}, 400)
    form = {k: [str(v)] for k, v in data.items() if k in ("verdict", "note", "scope", "select")}
    form["path"] = [str(p) for p in data.get("paths") or []]
    try:
        _, n, verdict = _decide(user, scan_id, form, _header("x-csrf-token"))
    except DecisionError as e:
        return _json({"message": str(e)}, 400)
    return _json({"decided": n, "verdict": verdict})


# ------------------------------------------------------------------ errors
def _gone(_: Exception) -> Response[str]:
    try:
        user: User | None = _user()
    except Unauthorized:
        user = None
    if app.current_event.path.startswith("/api/"):
        return _json({"message": "not found"}, 404)
    return _not_found(user)


def _unauthorized(_: Exception) -> Response[str]:
    return _json({"message": "Unauthorized"}, 401)


def _forbidden(e: Exception) -> Response[str]:
    if app.current_event.path.startswith("/api/"):
        return _json({"message": str(e)}, 403)
    return _html(render.page("error.html", title="Not allowed", message=str(e)), 403)


# registered by call: Powertools' decorators are untyped
app.not_found(_gone)
app.exception_handler(NotFoundError)(_gone)
app.exception_handler(Unauthorized)(_unauthorized)
app.exception_handler(Forbidden)(_forbidden)


def handle(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """Resolve one API Gateway (HTTP API, payload 2.0) event; every answer with the security headers."""
    result: dict[str, Any] = app.resolve(dict(event), context)
    result.setdefault("headers", {}).update(SECURITY_HEADERS)
    return result


@cache
def public_paths() -> frozenset[tuple[str, str]]:
    return frozenset(PUBLIC_ROUTES)

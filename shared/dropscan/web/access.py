"""Who the signed-in user is and what they may see and do, from the claims API Gateway's JWT authorizer
passed on (``requestContext.authorizer.jwt.claims``); and the check every state change passes.

Groups of the user pool map to suppliers: ``review-<supplier>`` reads and decides on that supplier's
drops, ``supplier-<supplier>`` reads them only (a supplier looking at its own findings), and
``global-decisions`` may also decide for every supplier's drops at once (scope ``global``). Nothing
else is visible: a scan of another supplier answers 404, as if it did not exist.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

REVIEW_PREFIX = "review-"
SUPPLIER_PREFIX = "supplier-"
GLOBAL_GROUP = "global-decisions"


class Forbidden(Exception):
    """A state change refused: no valid CSRF token, another site's origin, or a read-only role."""


@dataclass(frozen=True)
class User:
    name: str  # cognito:username: what decisions are attributed to
    sub: str
    session: str  # the sign-in this token belongs to (origin_jti, else jti): keys the CSRF token
    reviews: frozenset[str]  # suppliers whose drops the user reads and decides on
    reads: frozenset[str]  # suppliers whose drops the user only reads
    decides_globally: bool = False
    email: str = ""

    @property
    def suppliers(self) -> list[str]:
        return sorted(self.reviews | self.reads)

    def can_read(self, supplier: str) -> bool:
        return supplier in self.reviews or supplier in self.reads

    def can_decide(self, supplier: str) -> bool:
        return supplier in self.reviews

    def scopes(self) -> list[str]:
        return ["supplier", "global"] if self.decides_globally else ["supplier"]


def groups_of(claims: Mapping[str, Any]) -> list[str]:
    """``cognito:groups`` as a list: API Gateway passes an array claim as the text ``[a b]``."""
    raw = claims.get("cognito:groups")
    if raw is None:
        return []
    if isinstance(raw, list):
        return [str(g) for g in raw]
    text = str(raw).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [g.strip().strip('"') for g in text.replace(",", " ").split() if g.strip()]


def user_of(claims: Mapping[str, Any]) -> User | None:
    """The user these claims name; None without a subject (no authorizer ran: nobody signed in)."""
    sub = str(claims.get("sub") or "")
    if not sub:
        return None
    groups = groups_of(claims)
    return User(
        name=str(claims.get("cognito:username") or claims.get("username") or sub),
        sub=sub,
        session=str(claims.get("origin_jti") or claims.get("jti") or sub),
        reviews=frozenset(g[len(REVIEW_PREFIX) :] for g in groups if g.startswith(REVIEW_PREFIX)),
        reads=frozenset(g[len(SUPPLIER_PREFIX) :] for g in groups if g.startswith(SUPPLIER_PREFIX)),
        decides_globally=GLOBAL_GROUP in groups,
        email=str(claims.get("email") or ""),
    )


# ------------------------------------------------------------------ cross-site request forgery
def csrf_token(user: User) -> str:
    """A token for this user's session, put in every form and checked on every state change. The
    session id comes from inside the bearer token, so another site can neither read nor forge it."""
    return hmac.new(
        user.session.encode(), b"dropscan-desk-csrf\0" + user.sub.encode(), hashlib.sha256
    ).hexdigest()


def check_state_change(user: User, token: str, headers: Mapping[str, str], host: str) -> None:
    """Refuse (:class:`Forbidden`) a state-changing request without this session's CSRF token, or sent
    by another site (``Origin`` or ``Sec-Fetch-Site`` say so)."""
    _check_same_site(headers, host)
    _check_token(token, csrf_token(user))


def challenge_csrf_token(username: str, session: str) -> str:
    """The CSRF token of a first sign-in's new-password form, before there is any ID token: keyed by the
    challenge's session, which only the browser that signed in with the temporary password was given."""
    return hmac.new(
        session.encode(), b"dropscan-desk-new-password\0" + username.encode(), hashlib.sha256
    ).hexdigest()


def check_new_password(
    username: str, session: str, token: str, headers: Mapping[str, str], host: str
) -> None:
    """The same refusals as :func:`check_state_change` for the new-password request."""
    _check_same_site(headers, host)
    _check_token(token, challenge_csrf_token(username, session) if session else "")


def _check_same_site(headers: Mapping[str, str], host: str) -> None:
    lowered = {k.lower(): v for k, v in headers.items()}
    origin = lowered.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc.lower() != host.lower():
        raise Forbidden(f"a request from another site ({origin})")
    if origin == "null" or lowered.get("sec-fetch-site") == "cross-site":
        raise Forbidden("a request from another site")


def _check_token(token: str, expected: str) -> None:
    if not token or not expected or not hmac.compare_digest(token, expected):
        raise Forbidden("this form has expired or did not come from the desk: reload the page")

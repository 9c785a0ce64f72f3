"""``dropscan users``: the review desk's users (docs/web.md). A user's groups say whose drops they see:
``--group SUPPLIER`` makes them a reviewer of that supplier's drops (group ``review-SUPPLIER``),
``--read-only SUPPLIER`` lets them read that supplier's findings only (``supplier-SUPPLIER``), and
``--global`` lets them decide for every supplier at once (``global-decisions``).

A user gets a temporary password (made and printed once, or ``--temporary-password``): their first
sign-in asks them to choose their own, as Cognito does with a user an administrator made. ``--password``
sets a permanent one instead (``--permanent`` makes the printed one permanent): for scripts and demos
that sign in without a person at the keyboard."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from typing import Any

from dropscan.keys import parse_drop_key
from dropscan.web.access import GLOBAL_GROUP, REVIEW_PREFIX, SUPPLIER_PREFIX

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"


def _fail(message: str) -> int:
    print(f"dropscan: error: {message}", file=sys.stderr)
    return 2


def _supplier_ok(name: str) -> bool:
    return parse_drop_key(f"drops/{name}/x") == (name, "x")


def new_password() -> str:
    """Meets the pool's policy (12+ characters, upper, lower, digit)."""
    return "Dk-" + secrets.token_urlsafe(12) + "a7Q"


def cmd_users(a: argparse.Namespace) -> int:
    from dropscan.store import identity

    endpoint = None if a.stack else (a.endpoint_url or DEFAULT_ENDPOINT)
    stack = a.stack or "dropscan-local"
    try:
        cognito, pool, _ = identity.pool_of(stack, endpoint)
    except Exception as e:  # no stack there: say where we looked
        where = f"--stack {a.stack}" if a.stack else f"{endpoint} (is `dropscan up` running?)"
        return _fail(f"no review desk at {where}: {e}")
    if a.users_command == "list":
        users = cognito.list_users(UserPoolId=pool).get("Users", [])
        rows = [
            {"name": u["Username"], "groups": identity.groups_of(cognito, pool, u["Username"])} for u in users
        ]
        print(json.dumps(rows, indent=1))
        return 0
    bad = [s for s in [*a.group, *a.read_only] if not _supplier_ok(s)]
    if bad:
        return _fail(f"not a supplier name: {', '.join(bad)}")
    if not a.group and not a.read_only:
        return _fail("name the suppliers: --group SUPPLIER (review) or --read-only SUPPLIER")
    groups = [REVIEW_PREFIX + s for s in a.group] + [SUPPLIER_PREFIX + s for s in a.read_only]
    if a.global_decisions:
        groups.append(GLOBAL_GROUP)
    given = a.password or a.temporary_password
    password = given or new_password()
    temporary = not (a.password or a.permanent)
    try:
        identity.add_user(cognito, pool, a.name, password, groups, temporary=temporary)
    except cognito.exceptions.InvalidPasswordException as e:
        return _fail(f"the password does not meet the pool's policy ({identity.POLICY}): {e}")
    out: dict[str, Any] = {"user": a.name, "groups": identity.groups_of(cognito, pool, a.name)}
    if not given:
        out["password"] = password
    out["temporary"] = temporary  # true: the first sign-in asks for the user's own password
    print(json.dumps(out))
    return 0


def add_user_commands(sub: Any) -> None:
    u = sub.add_parser("users", help="the review desk's users: add one to suppliers' groups, list them")
    us = u.add_subparsers(dest="users_command", required=True)
    p = us.add_parser(
        "add",
        help="create a user (or add groups to one) with a temporary password: their own is chosen at sign-in",
    )
    p.add_argument("name")
    p.add_argument("--group", action="append", default=[], metavar="SUPPLIER", help="reviews this supplier")
    p.add_argument("--read-only", action="append", default=[], metavar="SUPPLIER", help="reads its findings")
    p.add_argument("--global", dest="global_decisions", action="store_true", help="may decide for all")
    pw = p.add_mutually_exclusive_group()
    pw.add_argument("--temporary-password", metavar="P", help="default: a new one, printed once")
    pw.add_argument("--password", metavar="P", help="a permanent password: no change asked at sign-in")
    pw.add_argument("--permanent", action="store_true", help="the printed password is permanent")
    lst = us.add_parser("list", help="every user and their groups")
    for q in (p, lst):
        g = q.add_mutually_exclusive_group()
        g.add_argument("--endpoint-url", help=f"a running `dropscan up` (default {DEFAULT_ENDPOINT})")
        g.add_argument("--stack", help="the deployed stack of this name")
    u.set_defaults(func=cmd_users)

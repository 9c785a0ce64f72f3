"""``dropscan users``: the review desk's users (docs/web.md). A user's groups say whose drops they see:
``--group SUPPLIER`` makes them a reviewer of that supplier's drops (group ``review-SUPPLIER``),
``--read-only SUPPLIER`` lets them read that supplier's findings only (``supplier-SUPPLIER``), and
``--global`` lets them decide for every supplier at once (``global-decisions``)."""

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
    password = a.password or new_password()
    try:
        identity.add_user(cognito, pool, a.name, password, groups)
    except cognito.exceptions.InvalidPasswordException as e:
        return _fail(f"the password does not meet the pool's policy: {e}")
    out: dict[str, Any] = {"user": a.name, "groups": identity.groups_of(cognito, pool, a.name)}
    if not a.password:
        out["password"] = password
    print(json.dumps(out))
    return 0


def add_user_commands(sub: Any) -> None:
    u = sub.add_parser("users", help="the review desk's users: add one to suppliers' groups, list them")
    us = u.add_subparsers(dest="users_command", required=True)
    p = us.add_parser("add", help="create a user (or add groups to one) with a permanent password")
    p.add_argument("name")
    p.add_argument("--group", action="append", default=[], metavar="SUPPLIER", help="reviews this supplier")
    p.add_argument("--read-only", action="append", default=[], metavar="SUPPLIER", help="reads its findings")
    p.add_argument("--global", dest="global_decisions", action="store_true", help="may decide for all")
    p.add_argument("--password", help="default: a new one, printed once")
    lst = us.add_parser("list", help="every user and their groups")
    for q in (p, lst):
        g = q.add_mutually_exclusive_group()
        g.add_argument("--endpoint-url", help=f"a running `dropscan up` (default {DEFAULT_ENDPOINT})")
        g.add_argument("--stack", help="the deployed stack of this name")
    u.set_defaults(func=cmd_users)

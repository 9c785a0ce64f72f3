"""The review desk's sessions on moto's Cognito, with the clock stepped (no sleeps): an ID token past
its expiry is refused, the session's refresh token renews it (REFRESH_TOKEN_AUTH), and a sign-out
revokes the refresh token (GlobalSignOut), after which nothing renews."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from unittest import mock

import moto.cognitoidp.models as cognito_models
import pytest

from dropscan.local.embedded import embedded

from helpers.desk import DeskClient

HOUR = 3600


class Clock:
    """Wall time plus a step: what moto issues tokens by and what the authorizer checks them by."""

    def __init__(self) -> None:
        self.step = 0.0

    def time(self) -> float:
        return time.time() + self.step


@pytest.fixture(scope="module")
def stepped() -> Iterator[tuple[DeskClient, Clock]]:
    clock = Clock()
    with embedded() as es, mock.patch.object(cognito_models, "time", SimpleNamespace(time=clock.time)):
        desk = DeskClient(es)
        desk.api.authorizer = replace(desk.api.authorizer, now=clock.time)
        desk.add_user("alice", "review-acme")
        yield desk, clock


def test_an_expired_id_token_is_renewed_by_the_refresh_token(stepped: tuple[DeskClient, Clock]) -> None:
    desk, clock = stepped
    alice = desk.sign_in("alice")
    assert alice.refresh_token and alice.get("/desk").status == 200
    old = alice.token
    clock.step += HOUR + 60  # past the ID token's hour
    assert alice.get("/desk").status == 401
    renewed = alice.renew()
    assert renewed.status == 200 and "refresh_token" not in renewed.json()
    assert alice.token != old
    me = alice.get("/api/me")
    assert me.status == 200 and me.json()["name"] == "alice"  # the same user, signed in still
    # the renewed token is the same sign-in: the CSRF token of its pages still holds
    assert me.json()["csrf"] == alice.csrf()


def test_a_sign_out_revokes_the_refresh_token(stepped: tuple[DeskClient, Clock]) -> None:
    desk, clock = stepped
    alice = desk.sign_in("alice")
    assert alice.sign_out().status == 200
    assert alice.renew().status == 401
    clock.step += HOUR + 60
    assert alice.get("/desk").status == 401  # and the ID token of that session has expired


def test_a_renewal_without_a_refresh_token_or_with_a_made_up_one_signs_nobody_in(
    stepped: tuple[DeskClient, Clock],
) -> None:
    desk, _ = stepped
    assert desk.form("/auth/refresh", {}).status == 401
    assert desk.form("/auth/refresh", {"refresh_token": "not-a-token"}).status == 401

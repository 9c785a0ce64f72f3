"""A scan's read of the decisions table beside its own work (``meanwhile``): the same decisions as a
plain read, every call counted, the caller's work run once and while the reads are in flight, on
threads (AWS) and in a forked child (the embedded stack's ``forked_reads``)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dropscan.models import Decision, content_subject
from dropscan.store.decisions import DecisionStore

from helpers.tables import create_table

AT = "2026-01-01T00:00:00+00:00"


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "DecisionsTable", "decisions")
        yield client


def digests(n: int, salt: str = "") -> list[str]:
    return [hashlib.sha256(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


class _Held:
    """A DynamoDB client whose BatchGetItem calls say which process makes them (a line to ``said``)
    and then wait for a byte from ``go``: reads that are not in flight while the caller's work runs
    never get one, and the test hangs (pytest-timeout) instead of passing."""

    def __init__(self, client: Any, said: int, go: int) -> None:
        self._client, self._said, self._go = client, said, go

    def batch_get_item(self, **kwargs: Any) -> Any:
        os.write(self._said, f"{os.getpid()}\n".encode())
        os.read(self._go, 1)
        return self._client.batch_get_item(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.mark.parametrize("forked", [False, True], ids=["threads", "forked"])
def test_decisions_read_beside_the_callers_work_are_those_of_a_plain_read(
    dynamodb: Any, forked: bool
) -> None:
    # Given 120 decided contents (the supplier's own, and 20 global ones) and 30 never decided
    decided = digests(120)
    DecisionStore(dynamodb, "decisions").put(
        [Decision(content_subject(d), "supplier", "acme", "accepted", "alice", AT) for d in decided]
        + [Decision(content_subject(d), "global", "", "needs-action", "bob", AT) for d in decided[:20]]
    )
    asked = decided + digests(30, salt="new")
    plain = DecisionStore(dynamodb, "decisions").for_contents(asked, "acme")
    # When a store reads them while the caller's work waits for a call to be under way, then lets
    # the calls go on
    said_r, said_w = os.pipe()
    go_r, go_w = os.pipe()
    client = _Held(dynamodb, said_w, go_r)
    store = DecisionStore(client, "decisions", concurrency=2, forked_reads=forked)  # type: ignore[arg-type]
    seen: list[str] = []

    def work() -> None:
        seen.append(os.read(said_r, 64).decode().split()[0])  # blocks until a call has begun
        os.write(go_w, b"x" * 3)

    try:
        found = store.for_contents(asked, "acme", meanwhile=work)
    finally:
        for fd in (said_r, said_w, go_r, go_w):
            os.close(fd)
    # Then it finds the same 140 decisions in the same 3 calls of 100 keys, and the work ran once,
    # in this process, while calls were made (by a child, when forked)
    key = lambda d: (d.subject, d.scope_key)  # noqa: E731
    assert sorted(found, key=key) == sorted(plain, key=key) and len(found) == 140
    assert (store.stats.batch_get_calls, store.stats.keys_requested) == (3, 300)
    assert len(seen) == 1
    assert (seen[0] != str(os.getpid())) is forked


@pytest.mark.parametrize("forked", [False, True], ids=["threads", "forked"])
def test_the_callers_work_runs_without_digests_and_its_failure_is_raised(dynamodb: Any, forked: bool) -> None:
    store = DecisionStore(dynamodb, "decisions", forked_reads=forked)
    ran: list[int] = []
    assert store.for_contents([], "acme", meanwhile=lambda: ran.append(1)) == [] and ran == [1]
    assert store.stats.batch_get_calls == 0

    def broken() -> None:
        raise OSError("the file index could not be written")

    with pytest.raises(OSError, match="file index"):
        store.for_contents(digests(60), "acme", meanwhile=broken)

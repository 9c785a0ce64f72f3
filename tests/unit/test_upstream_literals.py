"""Upstream releases' literals in the upstream table (dropscan.store.upstream_literals), on moto."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dropscan.store.releases import Releases
from dropscan.store.upstream_literals import LITERAL_PREFIX, LITERALS_LEASE, UpstreamLiterals, literal_key

from helpers.tables import create_table


@pytest.fixture
def store() -> Iterator[UpstreamLiterals]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "UpstreamTable", "upstream")
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="upstream-bucket")
        yield UpstreamLiterals(client, "upstream", Releases(s3, "upstream-bucket"), concurrency=2)


def test_a_literal_common_to_releases_is_one_item_naming_them_all(store: UpstreamLiterals) -> None:
    assert store.record("busybox", "1.35.0", ["shared message text", "only in 1.35.0 here"]) == 2
    assert store.record("busybox", "1.36.1", ["shared message text", "only in 1.36.1 here"]) == 2
    items = [i for i in store.client.scan(TableName="upstream")["Items"] if i["pk"]["S"] != LITERALS_LEASE]
    assert len(items) == 3 and all(i["pk"]["S"].startswith(LITERAL_PREFIX) for i in items)
    assert store.holding(["shared message text", "only in 1.36.1 here", "never recorded"]) == {
        "shared message text": frozenset({"busybox@1.35.0", "busybox@1.36.1"}),
        "only in 1.36.1 here": frozenset({"busybox@1.36.1"}),
    }


def test_recording_a_release_again_writes_nothing(store: UpstreamLiterals) -> None:
    store.record("zlib", "1.3", ["invalid distance too far back"])
    assert store.record("zlib", "1.3", ["invalid distance too far back"]) == 0
    key = literal_key("invalid distance too far back")
    item = store.client.get_item(TableName="upstream", Key={"pk": {"S": key}})["Item"]
    assert item["r"]["SS"] == ["zlib@1.3"]


def test_what_a_release_recorded_is_read_from_its_ingest_report(store: UpstreamLiterals) -> None:
    assert store.releases is not None
    report: dict[str, Any] = {"license": {"license": "Zlib"}, "literals": {"recorded": 1200}}
    store.releases.put_report("zlib", "1.3", report)
    store.releases.put_report("old", "1.0", {"license": {"license": "MIT"}})  # before literals
    facts = store.release("zlib", "1.3")
    assert facts is not None and (facts.recorded, facts.license) == (1200, "Zlib")
    assert store.release("old", "1.0") is None and store.release("none", "1") is None


def test_two_ingests_at_once_keep_both_releases_on_a_literal_they_share(store: UpstreamLiterals) -> None:
    from concurrent.futures import ThreadPoolExecutor

    shared = [f"a message both packages carry {i}" for i in range(60)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda p: store.record(p, "1.0", shared), ["one", "two"]))
    assert set(store.holding(shared).values()) == {frozenset({"one@1.0", "two@1.0"})}

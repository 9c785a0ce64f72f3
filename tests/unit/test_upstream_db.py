"""The upstream table's digest items: the two-attribute layout, and the earlier one still read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dropscan.models import Trust
from dropscan.upstream_db import FileDigests, UpstreamDB, VersionRange

A, B, K = "a" * 64, "b" * 64, "c" * 64


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="upstream",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def items(client: Any) -> dict[str, dict[str, Any]]:
    return {i["pk"]["S"]: i for i in client.scan(TableName="upstream")["Items"]}


def test_a_digest_item_is_its_key_and_one_json_value(dynamodb: Any) -> None:
    db = UpstreamDB(dynamodb, "upstream")
    db.add_release("foo", "1.0", [FileDigests(A, K, A)])
    stored = items(dynamodb)
    assert set(stored[A]) == {"pk", "v"}
    # v repeats the key: a lookup reads v alone
    assert json.loads(stored[A]["v"]["S"]) == {"d": A, "f": ["raw", "ws"], "p": {"foo": ["1.0"]}, "kw": K}
    assert json.loads(stored[K]["v"]["S"]) == {"d": K, "f": ["kw"], "p": {"foo": ["1.0"]}}
    db.add_release("foo", "2.0", [FileDigests(A, A, A)])
    info = db.lookup([A, B])
    assert set(info) == {A}
    assert info[A].packages == {"foo": VersionRange("1.0", "2.0")}
    assert db.is_known(A) and not db.is_known(K) and not db.is_known(B)


def test_items_of_the_earlier_layout_are_read_and_rewritten_on_the_next_merge(dynamodb: Any) -> None:
    dynamodb.put_item(
        TableName="upstream",
        Item={
            "pk": {"S": A},
            "forms": {"SS": ["raw"]},
            "pkgs": {"M": {"foo": {"M": {"lo": {"S": "0.9"}, "hi": {"S": "1.0"}}}}},
        },
    )
    db = UpstreamDB(dynamodb, "upstream")
    assert db.lookup([A])[A].packages == {"foo": VersionRange("0.9", "1.0")}
    assert db.is_known(A)
    # nothing new to say of A, but it is in the old layout: rewritten once, then left alone
    assert db.merge_digests({A: ({"raw"}, {"foo": VersionRange("1.0", "1.0")})}) == 1
    assert set(items(dynamodb)[A]) == {"pk", "v"}
    assert db.lookup([A])[A].packages == {"foo": VersionRange("0.9", "1.0")}
    assert db.merge_digests({A: ({"raw"}, {"foo": VersionRange("1.0", "1.0")})}) == 0


def test_items_whose_value_lacks_the_key_are_read_whole_and_rewritten_on_the_next_merge(
    dynamodb: Any,
) -> None:
    # as written before v held the key (its text has a "d" in it, but no key "d")
    old = {"f": ["raw"], "p": {"foo": ["1.0"]}, "kw": "d" * 64}
    dynamodb.put_item(TableName="upstream", Item={"pk": {"S": A}, "v": {"S": json.dumps(old)}})
    dynamodb.put_item(
        TableName="upstream", Item={"pk": {"S": K}, "v": {"S": json.dumps({"d": K, "f": ["kw"], "p": {}})}}
    )
    db = UpstreamDB(dynamodb, "upstream")
    found = db.lookup([A, K, B])
    assert found[A].packages == {"foo": VersionRange("1.0", "1.0")}
    assert set(found) == {A, K}
    assert db.stats.batch_get_calls == 2  # projected, then whole
    assert db.merge_digests({A: ({"raw"}, {"foo": VersionRange("1.0", "1.0")})}) == 1
    assert json.loads(items(dynamodb)[A]["v"]["S"])["d"] == A
    calls = db.stats.batch_get_calls
    assert set(db.lookup([A, K, B])) == {A, K}
    assert db.stats.batch_get_calls == calls + 1  # every item holds its key now: one read


def test_packages_are_listed_from_the_index_or_by_a_scan_of_an_older_table(dynamodb: Any) -> None:
    db = UpstreamDB(dynamodb, "upstream")
    db.add_release("foo", "1.0", [FileDigests(A, A, A)])
    db.set_trust("bar", Trust.LOW)
    assert sorted(db.packages()) == ["bar", "foo"]
    assert set(items(dynamodb)["packages"]["packages"]["SS"]) == {"bar", "foo"}
    dynamodb.delete_item(TableName="upstream", Key={"pk": {"S": "packages"}})  # as written before the index
    assert sorted(db.packages()) == ["bar", "foo"]
    assert db.packages()["bar"].trust is Trust.LOW

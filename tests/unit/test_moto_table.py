"""The embedded stack's own storage (``dropscan.local.moto_table``): a database loaded straight into
moto's table model is the database the API would have written, and read back it is what a Scan reads."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dropscan.local.deploy import REGION
from dropscan.local.moto_table import MotoBatchTable, moto_items
from dropscan.models import FileDigests, VersionRange
from dropscan.store.dump import _scan_items
from dropscan.store.upstream import UpstreamDB
from dropscan.upstream_rules import contributions_of

from helpers.tables import create_table


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, "UpstreamTable", "by-api")
        create_table(client, "UpstreamTable", "by-model")
        yield client


def _release(n: int, version: str) -> dict[str, Any]:
    files = [FileDigests(*(hashlib.sha256(f"{i}/{f}".encode()).hexdigest() for f in "skw")) for i in range(n)]
    return contributions_of(files, "busybox", VersionRange(version, version))


def test_a_merge_written_into_the_model_reads_back_as_the_api_written_one(dynamodb: Any) -> None:
    # Given the same merges, one through BatchWriteItem and one into moto's table model
    by_api = UpstreamDB(dynamodb, "by-api")
    by_model = UpstreamDB(dynamodb, "by-model", batch=MotoBatchTable(dynamodb, "by-model", concurrency=1))
    for version in ("1.0", "1.1"):
        for db in (by_api, by_model):
            db.merge(_release(300, version))
    # Then both tables hold the same items, read through the API
    api_items = {i["pk"]["S"]: i for i in _scan_items(by_api)}
    model_items = {i["pk"]["S"]: i for i in _scan_items(by_model)}
    digests = [k for k in api_items if len(k) == 64]
    assert len(digests) == 900
    assert {k: api_items[k] for k in digests} == {k: model_items[k] for k in digests}
    assert by_model.lookup(digests[:5]) == by_api.lookup(digests[:5])
    # and the model's own listing is what a Scan returns, item for item
    assert sorted(moto_items("by-model"), key=lambda i: i["pk"]["S"]) == sorted(
        _scan_items(by_model), key=lambda i: i["pk"]["S"]
    )
    # and the writes were counted as a merge's are
    assert by_model.stats.as_dict()["items_written"] == by_api.stats.as_dict()["items_written"]

"""Cutting a zip by its central directory: ranges that cover its members once, in order, or no split."""

from __future__ import annotations

import io
import itertools
import os
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from dropscan.archive import walk, zipsplit
from dropscan.store.objects import RangedObject

from helpers import bombs


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="drops")
        yield client


def zip_of(sizes: list[int]) -> bytes:
    return bombs.zip_bytes({f"d/f{i:03d}.bin": os.urandom(n) for i, n in enumerate(sizes)}, level=1)


class Stream:
    """Read-only, not seekable: as the body of a ranged GET."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)


def test_the_ranges_walk_to_the_members_of_the_whole_zip() -> None:
    data = zip_of([3000] * 12 + [0, 10])
    ranges = zipsplit.plan(io.BytesIO(data), 10_000)
    assert ranges is not None and len(ranges) == 4
    walked = [
        (r.path, r.sha256)
        for z in ranges
        for r in walk(zipsplit.Terminated(Stream(data[z.start : z.end])), "x")
    ]
    assert walked == [(r.path, r.sha256) for r in walk(io.BytesIO(data), "x")]
    assert [z.members_before for z in ranges] == [0, 4, 8, 12]
    assert [z.bytes_before for z in ranges] == [0, 12_000, 24_000, 36_000]


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=30), st.integers(1, 20_000))
def test_ranges_cover_the_members_once_in_order(sizes: list[int], part: int) -> None:
    offsets = [sum(sizes[:i]) + 40 * i for i in range(len(sizes))]
    directory = offsets[-1] + sizes[-1] + 40
    ranges = zipsplit.cut(list(zip(offsets, sizes, strict=True)), directory, part)
    assert ranges is not None
    assert ranges[0].start == 0 and ranges[-1].end == directory
    assert all(a.end == b.start for a, b in itertools.pairwise(ranges))
    assert sum(r.entries for r in ranges) == len(sizes)
    # each range ends at the first member boundary at or past the part size
    assert all(r.end - r.start >= part for r in ranges[:-1])
    assert all(r.entries == 1 or offsets[r.members_before + r.entries - 1] - r.start < part for r in ranges)


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([(100, 1), (200, 1)], "data before the first member"),
        ([(0, 1), (300, 1), (200, 1)], "local headers out of order"),
        ([(0, 1), (0, 1)], "two members at one offset"),
        ([(0, 1), (5000, 1)], "a member past the central directory"),
        ([], "no members"),
    ],
)
def test_a_directory_that_cannot_be_trusted_is_not_cut(entries: list[tuple[int, int]], why: str) -> None:
    assert zipsplit.cut(entries, 1000, 100) is None, why


def test_a_self_extractor_and_a_non_zip_are_not_split() -> None:
    data = zip_of([1000, 1000])
    assert zipsplit.plan(io.BytesIO(b"#!/bin/sh\nexit 0\n" + data), 100) is None
    assert zipsplit.plan(io.BytesIO(b"not a zip at all" * 100), 100) is None
    assert zipsplit.plan(io.BytesIO(data[:-10]), 100) is None  # the end record cut off


def test_the_ranged_view_reads_the_directory_in_a_few_requests(s3: Any) -> None:
    data = zip_of([100] * 500)
    s3.put_object(Bucket="drops", Key="k.zip", Body=data)
    view = RangedObject(s3, "drops", "k.zip", None, len(data))
    ranges = zipsplit.plan(view, 10_000)
    assert ranges is not None and sum(r.entries for r in ranges) == 500
    assert view.requests <= 4  # the end records, the zip64 locator, the whole directory at once
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert ranges[-1].end == zf.start_dir  # type: ignore[attr-defined]

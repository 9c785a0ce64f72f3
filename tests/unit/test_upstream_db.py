"""The upstream table's digest items: their layout, the earlier one still read, the writer lease."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from dropscan.archive import ArchiveReadError
from dropscan.models import DigestInfo, FileDigests, Trust, VersionRange, info_to_json
from dropscan.store.lease import WRITER_LEASE, LeaseBusy, LeaseLost, WriterLease
from dropscan.store.upstream import FORMS, RELEASE_PAGE, UpstreamDB, _ItemEncoder

from helpers.tables import create_table

A, B, K = "a" * 64, "b" * 64, "c" * 64


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "UpstreamTable", "upstream")
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


# ---------------------------------------------------------------- the writer lease
def digests_of(n: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]


def test_merges_at_once_keep_every_package_range(dynamodb: Any) -> None:
    # Given four packages that share 300 files (licence texts, say), ingested at the same moment
    shared_files = [FileDigests(d, d, d) for d in digests_of(300)]
    barrier = threading.Barrier(4)

    def ingest(package: str) -> None:
        db = UpstreamDB(dynamodb, "upstream", concurrency=2)
        barrier.wait()
        for version in ("1.0", "2.0"):
            db.add_release(package, version, shared_files)

    # When they all merge at once
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(ingest, ["p0", "p1", "p2", "p3"]))

    # Then every digest holds all four ranges: no merge wrote over another's
    found = UpstreamDB(dynamodb, "upstream").lookup(digests_of(300))
    assert len(found) == 300
    want = {p: VersionRange("1.0", "2.0") for p in ("p0", "p1", "p2", "p3")}
    assert all(info.packages == want for info in found.values())


def test_a_merge_waits_for_the_lease_and_gives_up_with_lease_busy(dynamodb: Any) -> None:
    holder = WriterLease(dynamodb, "upstream", lease_s=60)
    assert holder.try_acquire()
    db = UpstreamDB(dynamodb, "upstream", lease_wait_s=0.3)
    with pytest.raises(LeaseBusy):
        db.add_release("foo", "1.0", [FileDigests(A, A, A)])
    assert db.lookup([A]) == {}
    holder.release()
    db.add_release("foo", "1.0", [FileDigests(A, A, A)])
    assert set(db.lookup([A])) == {A}


def test_a_lease_left_by_a_dead_writer_is_taken_once_it_runs_out(dynamodb: Any) -> None:
    dead = WriterLease(dynamodb, "upstream", lease_s=0.2)
    assert dead.try_acquire()  # and never renewed nor released
    assert not WriterLease(dynamodb, "upstream").try_acquire()
    time.sleep(0.3)
    db = UpstreamDB(dynamodb, "upstream", lease_wait_s=5)
    db.add_release("foo", "1.0", [FileDigests(A, A, A)])
    assert set(db.lookup([A])) == {A}
    # the dead writer finds out at its next renewal and must stop writing
    assert not dead.renew()
    with pytest.raises(LeaseLost):
        dead.check()


def test_a_table_never_written_is_merged_without_reading_it_first(dynamodb: Any) -> None:
    db = UpstreamDB(dynamodb, "upstream")
    db.add_release("foo", "1.0", [FileDigests(A, K, A)])
    assert db.stats.batch_get_calls == 0
    db.add_release("bar", "1.0", [FileDigests(A, A, A)])
    assert db.stats.batch_get_calls == 1  # the second merge reads what the first wrote
    assert db.lookup([A])[A].packages == {
        "foo": VersionRange("1.0", "1.0"),
        "bar": VersionRange("1.0", "1.0"),
    }


def test_a_table_written_before_the_lease_existed_is_read_before_merging(dynamodb: Any) -> None:
    UpstreamDB(dynamodb, "upstream").add_release("foo", "1.0", [FileDigests(A, A, A)])
    dynamodb.delete_item(TableName="upstream", Key={"pk": {"S": WRITER_LEASE}})  # as an older table
    db = UpstreamDB(dynamodb, "upstream")
    db.add_release("bar", "1.0", [FileDigests(A, A, A)])
    assert db.stats.batch_get_calls == 1
    assert set(db.lookup([A])[A].packages) == {"foo", "bar"}


def _walk_breaking_after(files: list[FileDigests]) -> Iterator[FileDigests]:
    yield from files
    raise ArchiveReadError("truncated xz input")


def test_a_release_whose_walk_breaks_is_taken_back_whole(dynamodb: Any) -> None:
    # Given a table that holds foo 1.0
    db = UpstreamDB(dynamodb, "upstream")
    db.add_release("foo", "1.0", [FileDigests(A, A, A)])
    before = items(dynamodb)
    # When bar 1.0 is merged from a walk that writes several pages, then breaks
    more = [FileDigests(d, d, d) for d in digests_of(2 * RELEASE_PAGE + 10)]
    with pytest.raises(ArchiveReadError):
        db.merge_release("bar", "1.0", _walk_breaking_after([FileDigests(A, A, A), *more]))
    # Then every item is as it was: the shared one without bar, none of bar's own left
    assert db.stats.items_written > 2 * RELEASE_PAGE  # pages were written before the break
    after = items(dynamodb)
    assert {k: v for k, v in after.items() if k != WRITER_LEASE} == {
        k: v for k, v in before.items() if k != WRITER_LEASE
    }
    assert db.lookup([A])[A].packages == {"foo": VersionRange("1.0", "1.0")}


def test_pages_of_one_release_keep_what_earlier_pages_said(dynamodb: Any) -> None:
    # a digest first met as another file's whitespace form, then as a raw file of its own
    db = UpstreamDB(dynamodb, "upstream")
    filler = [FileDigests(d, d, d) for d in digests_of(RELEASE_PAGE - 1)]
    db.merge_release("foo", "1.0", [FileDigests(A, A, K), *filler, FileDigests(K, K, K)])
    stored = json.loads(items(dynamodb)[K]["v"]["S"])
    assert stored["f"] == ["kw", "raw", "ws"]
    assert json.loads(items(dynamodb)[A]["v"]["S"])["ws"] == K  # page one's note on A kept


class _PidLog:
    """A DynamoDB client that notes which process made each BatchGetItem call (in a file: a forked
    child's memory does not come back)."""

    def __init__(self, client: Any, log: Path) -> None:
        self._client, self._log = client, log

    def batch_get_item(self, **kwargs: Any) -> Any:
        with self._log.open("a") as f:
            f.write(f"{os.getpid()}\n")
        return self._client.batch_get_item(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_forked_reads_find_what_threaded_reads_find_and_count_every_call(
    dynamodb: Any, tmp_path: Path
) -> None:
    # Given 750 digests of foo 1.0, and 50 the table never saw
    known = digests_of(750)
    UpstreamDB(dynamodb, "upstream").add_release("foo", "1.0", [FileDigests(d, d, d) for d in known])
    asked = known + [hashlib.sha256(f"unknown {i}".encode()).hexdigest() for i in range(50)]
    # When one view reads them on threads and another half in a child forked at the call
    threaded = UpstreamDB(dynamodb, "upstream", concurrency=4)
    forked = UpstreamDB(_PidLog(dynamodb, tmp_path / "pids"), "upstream", forked_reads=True)  # type: ignore[arg-type]
    # Then both find the same 750, with the same ranges, in 8 calls each
    assert forked.lookup(asked) == threaded.lookup(asked)
    assert len(forked.lookup(asked)) == 750
    assert forked.stats.batch_get_calls == threaded.stats.batch_get_calls * 2 == 16
    assert forked.stats.keys_requested == 1600
    # and the calls were made by two processes, this one and its child
    pids = (tmp_path / "pids").read_text().split()
    assert str(os.getpid()) in pids and len(set(pids)) == 3  # two lookups: a child each


def test_a_forked_read_sees_every_write_made_before_it(dynamodb: Any) -> None:
    # the child is forked at each call, so it never reads a table older than the call
    db = UpstreamDB(dynamodb, "upstream", forked_reads=True)
    first, second = digests_of(400), [hashlib.sha256(f"later {i}".encode()).hexdigest() for i in range(400)]
    db.add_release("foo", "1.0", [FileDigests(d, d, d) for d in first])
    assert set(db.lookup(first + second)) == set(first)
    db.add_release("foo", "2.0", [FileDigests(d, d, d) for d in second])
    found = db.lookup(first + second)
    assert set(found) == set(first + second)
    assert found[second[0]].packages == {"foo": VersionRange("2.0", "2.0")}


@given(
    forms=st.frozensets(st.sampled_from(FORMS), min_size=1),
    ranges=st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.tuples(st.text(max_size=6), st.text(max_size=6)),
        min_size=1,
        max_size=3,
    ),
    more=st.dictionaries(st.sampled_from(["kw", "ws"]), st.sampled_from([A, B, K])),
)
def test_a_merge_writes_each_value_as_json_dumps_would(
    forms: frozenset[str], ranges: dict[str, tuple[str, str]], more: dict[str, str]
) -> None:
    # the merge's encoder memoises parts of the JSON; the item must not differ by a byte
    info = DigestInfo(forms, {p: VersionRange(lo, hi) for p, (lo, hi) in ranges.items()})
    value = json.dumps({"d": A, **info_to_json(info), **more}, separators=(",", ":"))
    encoder = _ItemEncoder()
    for _ in range(2):  # made, then from memory
        assert encoder.item(A, info, more) == {"pk": {"S": A}, "v": {"S": value}}

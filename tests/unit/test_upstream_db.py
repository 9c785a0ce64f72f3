"""The upstream table's digest items: their layout, the earlier one, bounded items, shard leases."""

from __future__ import annotations

import hashlib
import json
import os
import threading
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
from dropscan.models import DigestInfo, FileDigests, Trust, VersionRange, earlier_provenance
from dropscan.store.lease import WRITER_LEASE, LeaseBusy, LeaseLost, WriterLease
from dropscan.store.upstream import UpstreamDB
from dropscan.upstream_rules import FORMS, PACKAGES_PER_ITEM, contributions_of, info_of, layout, shard_of

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


# ---------------------------------------------------------------- shard leases
def digests_of(n: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]


class AtomicCalls:
    """A client whose calls run one at a time, as each DynamoDB call is atomic: moto checks a
    condition and applies the update without a lock, so two threads can both pass one condition.
    Merges still interleave between calls."""

    def __init__(self, client: Any) -> None:
        self._client, self._lock = client, threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name == "exceptions":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


def shard_lease(client: Any, digest: str, **kwargs: Any) -> WriterLease:
    return WriterLease(client, "upstream", key=f"{WRITER_LEASE}#{shard_of(digest)}", **kwargs)


def test_merges_at_once_keep_every_package_range(dynamodb: Any) -> None:
    # Given four packages that share 300 files (licence texts, say), ingested at the same moment;
    # leases and waits far longer than any machine takes: the outcome must not depend on its speed
    shared_files = [FileDigests(d, d, d) for d in digests_of(300)]
    barrier = threading.Barrier(4)
    atomic = AtomicCalls(dynamodb)

    def ingest(package: str) -> None:
        db = UpstreamDB(atomic, "upstream", concurrency=2, lease_s=3600, lease_wait_s=3600)  # type: ignore[arg-type]
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


def test_a_merge_passes_over_a_taken_shard_and_comes_back_to_it(dynamodb: Any) -> None:
    # Given a shard another merge holds
    files = [FileDigests(d, d, d) for d in digests_of(200)]
    held = shard_lease(dynamodb, files[0].sha256, lease_s=3600)
    assert held.try_acquire()
    done: list[int] = []

    def on_shard(shard: int) -> None:
        done.append(shard)
        if len(done) == len({shard_of(f.sha256) for f in files}) - 1:
            held.release()  # the other merge finishes once this one did every other shard

    # When a release touching every shard is merged
    db = UpstreamDB(dynamodb, "upstream", lease_wait_s=3600)
    db.merge(contributions_of(files, "foo", VersionRange("1.0", "1.0")), on_shard=on_shard)
    # Then it did the free shards first and the taken one last, and wrote every digest
    assert done[-1] == shard_of(files[0].sha256)
    assert len(db.lookup([f.sha256 for f in files])) == 200


def test_a_merge_gives_up_with_lease_busy_when_a_shard_stays_taken(dynamodb: Any) -> None:
    holder = shard_lease(dynamodb, A, lease_s=3600)
    assert holder.try_acquire()
    db = UpstreamDB(dynamodb, "upstream", lease_wait_s=0.0)
    with pytest.raises(LeaseBusy):
        db.add_release("foo", "1.0", [FileDigests(A, A, A)])
    assert db.lookup([A]) == {}
    holder.release()
    db.add_release("foo", "1.0", [FileDigests(A, A, A)])
    assert set(db.lookup([A])) == {A}


def test_a_lease_left_by_a_dead_writer_is_taken_once_it_runs_out(dynamodb: Any) -> None:
    now = [1000.0]  # the leases' clock, stepped by the test
    dead = shard_lease(dynamodb, A, lease_s=60, clock=lambda: now[0])
    assert dead.try_acquire()  # and never renewed nor released
    assert not shard_lease(dynamodb, A, clock=lambda: now[0]).try_acquire()
    now[0] += 61
    db = UpstreamDB(dynamodb, "upstream", lease_wait_s=0.0, clock=lambda: now[0])
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
    assert db.stats.batch_get_calls == 1  # the second merge reads what the first wrote (one shard)
    assert db.lookup([A])[A].packages == {
        "foo": VersionRange("1.0", "1.0"),
        "bar": VersionRange("1.0", "1.0"),
    }


def test_a_table_written_before_the_shard_leases_is_read_before_merging(dynamodb: Any) -> None:
    value = json.dumps({"d": A, "f": ["raw"], "p": {"foo": ["1.0"]}})
    dynamodb.put_item(TableName="upstream", Item={"pk": {"S": A}, "v": {"S": value}})  # as an older table
    db = UpstreamDB(dynamodb, "upstream")
    db.add_release("bar", "1.0", [FileDigests(A, A, A)])
    assert db.stats.batch_get_calls == 1
    assert set(db.lookup([A])[A].packages) == {"foo", "bar"}


def _walk_breaking_after(files: list[FileDigests]) -> Iterator[FileDigests]:
    yield from files
    raise ArchiveReadError("truncated xz input")


def test_a_release_whose_walk_breaks_leaves_no_trace(dynamodb: Any) -> None:
    # Given a table that holds foo 1.0
    db = UpstreamDB(dynamodb, "upstream")
    db.add_release("foo", "1.0", [FileDigests(A, A, A)])
    before = {k: v for k, v in items(dynamodb).items() if not k.startswith("lease#")}
    # When bar 1.0 is merged from a walk of thousands of files that breaks at its end
    more = [FileDigests(d, d, d) for d in digests_of(4010)]
    with pytest.raises(ArchiveReadError):
        db.merge_release("bar", "1.0", _walk_breaking_after([FileDigests(A, A, A), *more]))
    # Then nothing was written: the walk is read to its end before the first write
    after = {k: v for k, v in items(dynamodb).items() if not k.startswith("lease#")}
    assert after == before
    assert db.lookup([A])[A].packages == {"foo": VersionRange("1.0", "1.0")}


def test_a_digest_met_in_two_forms_keeps_both(dynamodb: Any) -> None:
    # a digest first met as another file's whitespace form, then as a raw file of its own
    db = UpstreamDB(dynamodb, "upstream")
    filler = [FileDigests(d, d, d) for d in digests_of(100)]
    db.merge_release("foo", "1.0", [FileDigests(A, A, K), *filler, FileDigests(K, K, K)])
    stored = json.loads(items(dynamodb)[K]["v"]["S"])
    assert stored["f"] == ["kw", "raw", "ws"]
    assert json.loads(items(dynamodb)[A]["v"]["S"])["ws"] == K


# ---------------------------------------------------------------- bounded items
def test_a_digest_of_many_packages_spills_into_bounded_overflow_items(dynamodb: Any) -> None:
    # Given a licence text held by 3.5 items' worth of packages, ingested one package at a time
    db = UpstreamDB(dynamodb, "upstream")
    names = [f"package-with-a-long-name-{i:04d}" for i in range(PACKAGES_PER_ITEM * 3 + 5)]
    for name in names:
        db.merge_release(name, "1.0.0-long-version-string", [FileDigests(A, A, A)])
    stored = items(dynamodb)
    # Then the head holds the first PACKAGES_PER_ITEM and counts three overflow items, each bounded
    head = json.loads(stored[A]["v"]["S"])
    assert len(head["p"]) == PACKAGES_PER_ITEM and head["o"] == 3
    mine = {k: v for k, v in stored.items() if k.startswith(A)}
    assert sorted(mine) == [A, f"{A}#1", f"{A}#2", f"{A}#3"]
    assert max(len(v["v"]["S"]) for v in mine.values()) < 100 * PACKAGES_PER_ITEM
    # and a lookup reads them all: every package, each once
    found = db.lookup([A, B])[A]
    assert sorted(found.packages) == sorted(names)
    # and a package already in an overflow item is widened there, not added again
    db.merge_release(names[-1], "2.0", [FileDigests(A, A, A)])
    assert db.lookup([A])[A].packages[names[-1]] == VersionRange("1.0.0-long-version-string", "2.0")
    assert sorted(k for k in items(dynamodb) if k.startswith(A)) == sorted(mine)


def test_provenance_keeps_the_earliest_commit_whoever_writes_first(dynamodb: Any) -> None:
    late = {"c": "b" * 40, "t": "2020-01-01T00:00:00Z", "s": "later", "p": ["x/new.c"]}
    early = {"c": "a" * 40, "t": "2010-01-01T00:00:00Z", "s": "first", "p": ["x/old.c"], "r": "1_0"}
    db = UpstreamDB(dynamodb, "upstream")
    db.merge(contributions_of([FileDigests(A, A, A)], "foo", None, history=late))
    db.merge(contributions_of([FileDigests(A, A, A)], "foo", None, history=early))
    info = db.lookup([A])[A]
    assert info.packages == {} and info.names == {"foo"}
    assert info.history["foo"]["c"] == "a" * 40 and info.history["foo"]["r"] == "1_0"
    assert info.history["foo"]["p"] == ["x/new.c", "x/old.c"]
    written = db.stats.items_written
    db.merge(contributions_of([FileDigests(A, A, A)], "foo", None, history=late))
    assert db.stats.items_written == written  # nothing new: nothing written


@pytest.mark.parametrize("note_first", [False, True])
def test_a_first_release_tag_alone_is_noted_on_the_provenance_written_before(
    dynamodb: Any, note_first: bool
) -> None:
    # Given a history blob's provenance, and a later run's note that a new tag is its first release
    # (that run walked no commit bringing it: only the tag)
    prov = {"c": "a" * 40, "t": "2010-01-01T00:00:00Z", "s": "first", "p": ["x/old.c"]}
    note = {"r": "1_2"}
    db = UpstreamDB(dynamodb, "upstream")
    for history in (note, prov) if note_first else (prov, note):
        db.merge(contributions_of([FileDigests(A, A, A)], "foo", None, history=history))
    # Then, in either order, the provenance is the commit's, with the tag
    assert db.lookup([A])[A].history["foo"] == {**prov, "r": "1_2"}


@given(
    st.lists(
        st.fixed_dictionaries(
            {"c": st.sampled_from(["a" * 40, "b" * 40]), "t": st.sampled_from(["2001", "2002"])},
            optional={"r": st.sampled_from(["1_0", "1_1"]), "p": st.lists(st.sampled_from("wxyz"))},
        )
        | st.fixed_dictionaries({"r": st.sampled_from(["1_0", "1_1", "2_0"])}),
        min_size=2,
        max_size=2,
    )
)
def test_merging_provenances_is_commutative(pair: list[dict[str, Any]]) -> None:
    a, b = pair
    assert earlier_provenance(a, b) == earlier_provenance(b, a)


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
        max_size=PACKAGES_PER_ITEM * 2 + 3,
    ),
    more=st.dictionaries(st.sampled_from(["kw", "ws"]), st.sampled_from([A, B, K])),
)
def test_an_items_layout_reads_back_as_what_was_merged(
    forms: frozenset[str], ranges: dict[str, tuple[str, str]], more: dict[str, str]
) -> None:
    info = DigestInfo(forms, {p: VersionRange(lo, hi) for p, (lo, hi) in ranges.items()})
    values = [json.loads(v) for v in layout(A, info, more, [])]
    assert len(values) == 1 + (len(ranges) - 1) // PACKAGES_PER_ITEM
    assert all(len(v["p"]) <= PACKAGES_PER_ITEM for v in values)
    back = info_of(values[0], values[1:])
    assert back == info
    assert {k: values[0][k] for k in more} == more

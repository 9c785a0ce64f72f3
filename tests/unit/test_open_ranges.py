"""Open upper ends of version ranges (issue 23): a release ingested in version order writes about its new
and departed digests, and every reader still sees ranges that cover each registered release holding a
digest (exactly so when releases come in version order)."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from dropscan.models import FileDigests, VersionRange, version_key
from dropscan.store.dump import export_db, import_db
from dropscan.store.lease import WriterLease
from dropscan.store.upstream import PACKAGE_LEASE, OpenMode, UpstreamDB

from helpers.tables import create_table


def _d(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


@contextmanager
def table() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "UpstreamTable", "upstream")
        yield client


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with table() as client:
        yield client


class Upstream:
    """Releases as the ingest stage writes them: the path list is saved first (here: kept), then the
    digests go in through ``write_release`` (or, ``closed``, as every ingest did before: ``merge_release``),
    then the release is registered."""

    def __init__(self, client: Any, *, closed: bool = False) -> None:
        self.db = UpstreamDB(client, "upstream", lease_s=3600, lease_wait_s=3600)
        self.closed = closed
        self.path_lists: dict[tuple[str, str], set[str]] = {}
        self.modes: list[OpenMode] = []

    def previous(self, package: str, version: str) -> set[str] | None:
        return self.path_lists.get((package, version))

    def ingest(self, package: str, version: str, files: list[FileDigests]) -> int:
        self.path_lists[(package, version)] = {f.sha256 for f in files}
        if self.closed:
            written = self.db.merge_release(package, version, files)
        else:
            wrote = self.db.write_release(
                package, version, files, previous=lambda v: self.previous(package, v)
            )
            self.modes.append(wrote.mode)
            written = wrote.items
        self.db.register(package, version, None)
        return written


def true_hulls(releases: Mapping[str, list[FileDigests]], registered: set[str]) -> dict[str, VersionRange]:
    """digest (every form) -> the lowest and highest registered release holding it."""
    holders: dict[str, list[str]] = {}
    for version in registered:
        for digest in {d for f in releases[version] for d in (f.sha256, f.kw, f.ws)}:
            holders.setdefault(digest, []).append(version)
    return {d: VersionRange(min(vs, key=version_key), max(vs, key=version_key)) for d, vs in holders.items()}


def covers(got: VersionRange, want: VersionRange) -> bool:
    return version_key(got.lo) <= version_key(want.lo) and version_key(got.hi) >= version_key(want.hi)


def raw_ranges(client: Any) -> dict[str, Any]:
    return {
        i["pk"]["S"]: json.loads(i["v"]["S"])["p"]
        for i in client.scan(TableName="upstream")["Items"]
        if "v" in i and len(i["pk"]["S"]) == 64
    }


# ---------------------------------------------------------------- in version order
FILES, STEP, RELEASES = 300, 20, 6


def synthetic(r: int) -> list[FileDigests]:
    """Release r: file i holds the content of the last release that changed it (STEP files a release)."""
    out = []
    for i in range(FILES):
        last = max((k for k in range(1, r + 1) if k * STEP <= i < (k + 1) * STEP), default=0)
        d = _d(i, last)
        out.append(FileDigests(d, d, d))
    return out


def test_releases_in_version_order_write_their_new_and_departed_digests(dynamodb: Any) -> None:
    # Given six releases, each changing 20 of 300 files
    versions = [f"1.{r}" for r in range(RELEASES)]
    releases = {v: synthetic(r) for r, v in enumerate(versions)}
    up = Upstream(dynamodb)
    written, read = [], []
    # When they are ingested one at a time, in version order
    for v in versions:
        before = up.db.stats.keys_requested
        written.append(up.ingest("linux", v, releases[v]))
        read.append(up.db.stats.keys_requested - before)
    # Then the first writes its files, each later one its 20 new digests and closes the 20 that left
    assert up.modes == [OpenMode.OPEN] * RELEASES
    assert written == [FILES] + [2 * STEP] * (RELEASES - 1)
    # and reads no more than that: the new digests, and the departed ones twice (their normal forms, then
    # the merge that closes them); the files the open release holds are not read again
    assert read == [0] + [3 * STEP] * (RELEASES - 1)
    # and every range a lookup gives is the exact hull of the releases holding the digest
    want = true_hulls(releases, set(versions))
    found = up.db.lookup(want)
    assert {d: info.packages["linux"] for d, info in found.items()} == want
    # and the newest release's digests are the open ones, whatever their stored upper end
    stored = raw_ranges(dynamodb)
    newest = {f.sha256 for f in releases[versions[-1]]}
    assert {d for d, p in stored.items() if p["linux"][-1] == 1} == newest


def test_the_closed_mode_writes_the_whole_release_each_time(dynamodb: Any) -> None:
    # the comparison the design is for: before open ranges, every unchanged digest's hi moved
    versions = [f"1.{r}" for r in range(3)]
    up = Upstream(dynamodb, closed=True)
    written = [up.ingest("linux", v, synthetic(r)) for r, v in enumerate(versions)]
    assert written == [FILES, FILES, FILES]


def test_reingesting_the_open_release_writes_nothing_and_an_older_one_only_its_changes(
    dynamodb: Any,
) -> None:
    up = Upstream(dynamodb)
    for r in range(3):
        up.ingest("linux", f"1.{r}", synthetic(r))
    assert up.ingest("linux", "1.2", synthetic(2)) == 0
    assert up.modes[-1:] == [OpenMode.NOT_ABOVE]
    # 1.1 again: each digest already says it (closed ranges reach 1.1, open ones reach the open release)
    assert up.ingest("linux", "1.1", synthetic(1)) == 0
    want = true_hulls({f"1.{r}": synthetic(r) for r in range(3)}, {"1.0", "1.1", "1.2"})
    assert {d: i.packages["linux"] for d, i in up.db.lookup(want).items()} == want


def test_normal_forms_of_a_departed_file_are_closed_too(dynamodb: Any) -> None:
    # Given a file whose keyword and whitespace forms differ from its bytes, and a kw form it shares
    # with a file that stays
    a, a_kw, a_ws, b = _d("a"), _d("a kw"), _d("a ws"), _d("b")
    up = Upstream(dynamodb)
    up.ingest("p", "1.0", [FileDigests(a, a_kw, a_ws), FileDigests(b, a_kw, b)])
    # When 1.1 lacks the file (b stays, and with it the shared kw form)
    up.ingest("p", "1.1", [FileDigests(b, a_kw, b)])
    up.ingest("p", "1.2", [FileDigests(b, a_kw, b)])
    # Then its raw and ws forms end at 1.0, and the shared kw form goes on
    found = up.db.lookup([a, a_kw, a_ws, b])
    assert found[a].packages["p"] == VersionRange("1.0", "1.0")
    assert found[a_ws].packages["p"] == VersionRange("1.0", "1.0")
    assert found[a_kw].packages["p"] == VersionRange("1.0", "1.2")
    assert found[b].packages["p"] == VersionRange("1.0", "1.2")
    assert raw_ranges(dynamodb)[a_ws] == {"p": ["1.0"]}  # closed


def test_a_busy_package_lease_means_the_closed_mode_at_once(dynamodb: Any) -> None:
    # Given 1.0 ingested, and the package lease held by another ingest for an hour
    up = Upstream(dynamodb)
    up.ingest("p", "1.0", synthetic(0))
    holder = WriterLease(dynamodb, "upstream", 3600, key=PACKAGE_LEASE + "p")
    assert holder.try_acquire()
    # When 1.1 is ingested: it does not wait (the lease would outlive any test), it merges closed
    written = up.ingest("p", "1.1", synthetic(1))
    assert up.modes[-1:] == [OpenMode.BUSY]
    assert written == FILES  # as before open ranges: every digest's hi moves to 1.1
    hulls = true_hulls({"1.0": synthetic(0), "1.1": synthetic(1)}, {"1.0", "1.1"})
    found = up.db.lookup(hulls)
    assert all(covers(found[d].packages["p"], h) for d, h in hulls.items())
    # and once the lease is free, the next release is open again and the ranges exact
    holder.release()
    up.ingest("p", "1.2", synthetic(2))
    assert up.modes[-1:] == [OpenMode.OPEN]
    hulls = true_hulls({f"1.{r}": synthetic(r) for r in range(3)}, {"1.0", "1.1", "1.2"})
    found = up.db.lookup(hulls)
    assert {d: i.packages["p"] for d, i in found.items()} == hulls


def test_a_lookup_reads_the_package_items_once_after_the_digests(dynamodb: Any) -> None:
    up = Upstream(dynamodb)
    up.ingest("p", "1.0", synthetic(0))
    up.ingest("q", "2.0", synthetic(0)[:10])
    reader = UpstreamDB(dynamodb, "upstream")
    found = reader.lookup(f.sha256 for f in synthetic(0))
    assert len(found) == FILES
    # three pages of digests, then one BatchGet of the two packages with open ranges
    assert (reader.stats.batch_get_calls, reader.stats.keys_requested) == (4, FILES + 2)
    # a table without open ranges reads no package item
    closed = Upstream(dynamodb, closed=True)
    closed.ingest("r", "1.0", [FileDigests(_d("r"), _d("r"), _d("r"))])
    other = UpstreamDB(dynamodb, "upstream")
    other.lookup([_d("r")])
    assert other.stats.batch_get_calls == 1


# ---------------------------------------------------------------- a crash between steps
class Crash(RuntimeError):
    pass


@pytest.mark.parametrize("step", ["after_merge", "after_close"])
def test_a_crash_between_steps_leaves_ranges_that_cover_and_a_retry_ends_exact(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    # Given 1.0 and 1.1 ingested in order
    up = Upstream(dynamodb)
    releases = {f"1.{r}": synthetic(r) for r in range(3)}
    up.ingest("p", "1.0", releases["1.0"])
    up.ingest("p", "1.1", releases["1.1"])
    # When the ingest of 1.2 dies after its open merge (before closing) or after closing (before
    # the open release moves), unregistered
    target = "_departed" if step == "after_merge" else "_set_open_release"

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise Crash(step)

    monkeypatch.setattr(UpstreamDB, target, crash)
    with pytest.raises(Crash):
        up.ingest("p", "1.2", releases["1.2"])
    monkeypatch.undo()
    # Then every registered release is still covered, and 1.0/1.1's ranges are exact
    hulls = true_hulls(releases, {"1.0", "1.1"})
    found = up.db.lookup(hulls)
    assert {d: i.packages["p"] for d, i in found.items()} == hulls
    # and the lease was let go: the retry takes the open mode and ends in the exact hulls
    up.ingest("p", "1.2", releases["1.2"])
    assert up.modes[-1:] == [OpenMode.OPEN]
    hulls = true_hulls(releases, set(releases))
    found = up.db.lookup(hulls)
    assert {d: i.packages["p"] for d, i in found.items()} == hulls


# ---------------------------------------------------------------- any order
CONTENTS = 8
VERSIONS = [f"1.{n}" for n in range(6)]


@st.composite
def histories(draw: st.DrawFn) -> tuple[dict[str, list[FileDigests]], list[tuple[str, bool]]]:
    """Releases over a few contents (normal forms shared between some), and a sequence of ingests:
    any order, re-ingests, some while another ingest holds the package lease."""
    kw = [_d("kw", draw(st.integers(0, 3))) if draw(st.booleans()) else _d("c", i) for i in range(CONTENTS)]
    ws = [_d("ws", draw(st.integers(0, 2))) if draw(st.booleans()) else _d("c", i) for i in range(CONTENTS)]
    files = [FileDigests(_d("c", i), kw[i], ws[i]) for i in range(CONTENTS)]
    releases = {
        v: [files[i] for i in sorted(draw(st.sets(st.integers(0, CONTENTS - 1), min_size=1)))]
        for v in VERSIONS
    }
    in_order = draw(st.booleans())
    chosen = draw(st.lists(st.sampled_from(VERSIONS), min_size=1, max_size=8))
    order = sorted(set(chosen), key=version_key) if in_order else chosen
    busy = [draw(st.booleans()) and not in_order for _ in order]
    return releases, list(zip(order, busy, strict=True))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_effective_ranges_always_cover_and_in_order_equal_the_closed_tables(
    history: tuple[dict[str, list[FileDigests]], list[tuple[str, bool]]],
) -> None:
    releases, steps = history
    with table() as client:
        up, closed = Upstream(client), Upstream(client, closed=True)
        registered: set[str] = set()
        for version, busy in steps:
            holder = WriterLease(client, "upstream", 3600, key=PACKAGE_LEASE + "p")
            if busy:
                assert holder.try_acquire()
            up.ingest("p", version, releases[version])
            closed.ingest("q", version, releases[version])  # the same, all in the closed mode
            if busy:
                holder.release()
            registered.add(version)
            hulls = true_hulls(releases, registered)
            found = up.db.lookup(hulls)
            # Then every digest's range covers every registered release holding it
            assert set(found) == set(hulls)
            assert all(covers(found[d].packages["p"], h) for d, h in hulls.items())
            # and the closed table says exactly the true hull
            assert {d: i.packages["q"] for d, i in found.items()} == hulls
        if [v for v, _ in steps] == sorted(registered, key=version_key) and not any(b for _, b in steps):
            # in version order, one at a time: open ranges say exactly what the closed ones say
            assert all(found[d].packages["p"] == found[d].packages["q"] for d in found)


# ---------------------------------------------------------------- a dump keeps the open ranges
def test_a_database_loaded_from_its_dump_goes_on_writing_only_the_changes(dynamodb: Any) -> None:
    """The embedded stack saves its database as a dump at exit and loads it at the next start: the
    package's open release and its open ranges come back with it (else every release ingested in a
    later run would rewrite all its digests)."""
    versions = [f"1.{r}" for r in range(4)]
    releases = {v: synthetic(r) for r, v in enumerate(versions)}
    up = Upstream(dynamodb)
    for v in versions[:3]:
        up.ingest("linux", v, releases[v])
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="dump")
    dump = io.BytesIO()
    export_db(up.db, s3, "dump", dump)
    # When it is loaded into an empty table and the next release comes
    create_table(dynamodb, "UpstreamTable", "upstream2")
    loaded = Upstream(dynamodb)
    loaded.db = UpstreamDB(dynamodb, "upstream2", lease_s=3600, lease_wait_s=3600)
    loaded.path_lists = up.path_lists
    dump.seek(0)
    import_db(loaded.db, s3, "dump", dump)
    assert loaded.db.open_releases(["linux"]) == {"linux": "1.2"}
    written = loaded.ingest("linux", "1.3", releases["1.3"])
    # Then it is written in the open mode, its new and departed digests only, and every range is exact
    assert (loaded.modes, written) == ([OpenMode.OPEN], 2 * STEP)
    want = true_hulls(releases, set(versions))
    assert {d: i.packages["linux"] for d, i in loaded.db.lookup(want).items()} == want
    # and a dump loaded into a table that knows the package already leaves that package's state alone
    dump.seek(0)
    import_db(up.db, s3, "dump", dump)
    assert up.db.open_releases(["linux"]) == {"linux": "1.2"}

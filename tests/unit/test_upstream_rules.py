"""The upstream table's pure rules, without a table: ranges as stored, effective ends of open ranges,
merges of contributions, and the open mode of releases ingested in version order."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from dropscan.models import DigestInfo, FileDigests, VersionRange, version_key
from dropscan.upstream_rules import (
    SHARDS,
    Contribution,
    StoredDigest,
    contributions_of,
    effective,
    info_of,
    layout,
    merged,
    merged_range,
    opened_release,
    opens_above,
    parse_range,
    range_value,
    rewritten,
    shard_of,
    stored_of,
)


def _d(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


versions = st.builds(lambda a, b: f"{a}.{b}", st.integers(0, 3), st.integers(0, 12))


@st.composite
def ranges(draw: st.DrawFn) -> VersionRange:
    a, b = sorted((draw(versions), draw(versions)), key=version_key)
    return VersionRange(a, b)


def covers(got: VersionRange, want: VersionRange) -> bool:
    return version_key(got.lo) <= version_key(want.lo) and version_key(got.hi) >= version_key(want.hi)


def later(a: str, b: str) -> str:
    return max(a, b, key=version_key)


def hull(a: VersionRange, b: VersionRange) -> VersionRange:
    return a.widen(b.lo).widen(b.hi)


# ---------------------------------------------------------------- ranges as stored
@given(rng=ranges(), is_open=st.booleans())
def test_a_range_reads_back_as_stored_open_or_closed(rng: VersionRange, is_open: bool) -> None:
    assert parse_range(range_value(rng, is_open)) == (rng, is_open)


@given(digest=st.text(max_size=70))
def test_every_key_falls_in_a_shard(digest: str) -> None:
    assert 0 <= shard_of(digest) < SHARDS


@given(
    packages=st.dictionaries(st.sampled_from("pqrs"), ranges(), min_size=1),
    opened=st.sets(st.sampled_from("pqrs")),
    tops=st.dictionaries(st.sampled_from("pqrs"), versions),
)
def test_an_open_range_ends_at_the_later_of_its_hi_and_its_open_release(
    packages: dict[str, VersionRange], opened: set[str], tops: dict[str, str]
) -> None:
    info = DigestInfo(frozenset({"raw"}), packages)
    seen = effective(info, opened, tops)
    for p, rng in packages.items():
        want = VersionRange(rng.lo, later(rng.hi, tops[p])) if p in opened and p in tops else rng
        assert seen.packages[p] == want
    # and a reader of the stored items sees the same
    values = [json.loads(v) for v in layout(_d("x"), info, {}, [], opened)]
    assert info_of(values[0], values[1:], tops) == seen
    assert stored_of(values[0], values[1:]) == (info, opened & set(packages))


# ---------------------------------------------------------------- merges
@given(prev=ranges(), rng=ranges(), was_open=st.booleans(), opens=st.booleans(), top=st.none() | versions)
def test_a_merged_range_covers_what_it_was_and_stays_open_once_open(
    prev: VersionRange, rng: VersionRange, was_open: bool, opens: bool, top: str | None
) -> None:
    got, is_open = merged_range(prev, was_open, rng, opens, top)
    assert covers(got, prev)
    assert is_open == (was_open or opens)
    assert version_key(got.lo) <= version_key(rng.lo)
    if not is_open:
        assert got == hull(prev, rng)  # closed onto closed: exactly the hull
    elif not opens:  # closed onto open: covered up to the open release the merge knew
        end = later(got.hi, top) if top is not None else got.hi
        assert covers(VersionRange(got.lo, end), rng)


contribution_ranges = st.dictionaries(st.sampled_from("pqr"), ranges(), min_size=1)


@given(first=contribution_ranges, second=contribution_ranges)
def test_closed_merges_are_commutative_and_idempotent(
    first: dict[str, VersionRange], second: dict[str, VersionRange]
) -> None:
    a, b = Contribution({"raw"}, dict(first)), Contribution({"kw"}, dict(second))
    ab = merged(merged(None, set(), a)[0], set(), b)
    ba = merged(merged(None, set(), b)[0], set(), a)
    assert ab == ba
    assert ab[0].forms == {"raw", "kw"}
    for p in set(first) | set(second):
        want = hull(first[p], second[p]) if p in first and p in second else first.get(p) or second[p]
        assert ab[0].packages[p] == want
    assert merged(ab[0], ab[1], a) == ab


def stored(values: list[tuple[str, str]]) -> StoredDigest:
    parsed = [json.loads(v) for _, v in values]
    return StoredDigest(parsed[0], parsed[1:], current=True)


@given(
    packages=st.lists(st.text("abc", min_size=1, max_size=4), min_size=1, max_size=40, unique=True),
    rng=ranges(),
    is_open=st.booleans(),
)
def test_a_merge_of_what_an_item_holds_writes_nothing(
    packages: list[str], rng: VersionRange, is_open: bool
) -> None:
    digest = _d("x")
    new = Contribution({"raw"}, dict.fromkeys(packages, rng), opened=set(packages) if is_open else set())
    first = rewritten(digest, None, new, {})
    assert first and first[0][0] == digest
    assert [k for k, _ in first[1:]] == [f"{digest}#{k}" for k in range(1, len(first))]
    # Then merging it again (same forms, ranges, openness) rewrites no item
    assert rewritten(digest, stored(first), new, {}) == []
    # and a close of a digest the table lacks makes no item
    assert rewritten(digest, None, Contribution(close={"p": "1.0"}), {}) == []


def test_an_item_of_the_earlier_layout_is_rewritten_even_when_nothing_changes() -> None:
    digest = _d("x")
    new = Contribution({"raw"}, {"p": VersionRange("1.0", "1.0")})
    old = stored(rewritten(digest, None, new, {}))
    old.current = False
    assert [k for k, _ in rewritten(digest, old, new, {})] == [digest]


# ---------------------------------------------------------------- the open mode, in version order
@given(version=versions, top=st.none() | versions, registered=st.lists(versions, max_size=6))
def test_a_version_opens_above_the_open_release_or_else_above_every_registered_one(
    version: str, top: str | None, registered: list[str]
) -> None:
    got = opens_above(version, top, registered)
    if top is not None:  # the open release decides, whatever else is registered
        assert got == (version_key(version) > version_key(top)) == opens_above(version, top, [])
    else:
        assert got == (not registered or version_key(version) > max(map(version_key, registered)))


class Table:
    """Digest items held in a dict, merged by the rules alone: what UpstreamDB writes, without DynamoDB."""

    def __init__(self) -> None:
        self.items: dict[str, StoredDigest] = {}
        self.top: str | None = None
        self.registered: list[str] = []
        self.held: set[str] = set()  # the open release's raw SHA-256s (its path list)

    def merge(self, contributions: dict[str, Contribution]) -> int:
        tops = {"p": self.top} if self.top is not None else {}
        written = 0
        for digest, c in contributions.items():
            values = rewritten(digest, self.items.get(digest), c, tops)
            if values:
                self.items[digest] = stored(values)
                written += len(values)
        return written

    def ingest(self, version: str, files: list[FileDigests]) -> None:
        """An ingest in open mode when the rules allow it, as ``UpstreamDB.write_release`` does."""
        if opens_above(version, self.top, self.registered):
            self.merge(opened_release(files, "p", version, self.held))
            if self.top is not None:
                now = {d for f in files for d in (f.sha256, f.kw, f.ws)}
                gone = self.held - {f.sha256 for f in files}
                heads = [self.items[g].head or {} for g in gone]
                forms = set(gone) | {str(head[k]) for head in heads for k in ("kw", "ws") if k in head}
                self.merge({d: Contribution(close={"p": self.top}) for d in forms - now})
            self.top, self.held = version, {f.sha256 for f in files}
        else:
            self.merge(contributions_of(files, "p", VersionRange(version, version)))
        self.registered.append(version)

    def lookup(self) -> dict[str, VersionRange]:
        tops = {"p": self.top} if self.top is not None else {}
        return {d: item.info(tops).packages["p"] for d, item in self.items.items()}


@st.composite
def releases(draw: st.DrawFn) -> list[tuple[str, list[FileDigests]]]:
    """Releases in version order over a few contents, some sharing normal forms."""
    n = 6
    kw = [_d("kw", draw(st.integers(0, 2))) if draw(st.booleans()) else _d("c", i) for i in range(n)]
    ws = [_d("ws", draw(st.integers(0, 2))) if draw(st.booleans()) else _d("c", i) for i in range(n)]
    files = [FileDigests(_d("c", i), kw[i], ws[i]) for i in range(n)]
    chosen = sorted(draw(st.sets(versions, min_size=1, max_size=6)), key=version_key)
    return [(v, [files[i] for i in sorted(draw(st.sets(st.integers(0, n - 1), min_size=1)))]) for v in chosen]


@given(releases())
def test_releases_in_version_order_end_in_the_true_hull_of_every_digest(
    history: list[tuple[str, list[FileDigests]]],
) -> None:
    table = Table()
    holders: dict[str, list[str]] = {}
    for version, files in history:
        table.ingest(version, files)
        for d in {d for f in files for d in (f.sha256, f.kw, f.ws)}:
            holders.setdefault(d, []).append(version)
        hulls = {d: VersionRange(vs[0], vs[-1]) for d, vs in holders.items()}
        # Then after each release, every digest's effective range is exactly its holders' hull
        assert table.lookup() == hulls

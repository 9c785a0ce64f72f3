"""The upstream-hash database: digest items and package items in one DynamoDB table.

A digest item (``pk`` = hex SHA-256) says which normalised forms produced the digest (``raw``, ``kw``,
``ws``) and, per package, the lowest and highest release holding it and, for a package ingested from
git with its history, where the content comes from (``h``: first commit, date, subject, paths, first
release tag). It keeps all that in one JSON string attribute ``v`` beside its key (moto's response
serializer costs per attribute value: one value reads 2-3 times as fast as a nested map). The earlier
layout (``forms`` set + ``pkgs`` map) is still read, and rewritten whenever a merge touches it.

**Bounded items.** A digest item holds at most :data:`PACKAGES_PER_ITEM` packages; the others go to
overflow items ``<digest>#1``, ``<digest>#2`` ... of as many each, and the head counts them (``o``). An
item is thus at most about 6 KB however many packages share the content (the empty file, a licence
text); a lookup reads the overflow items of the few heads that have any.

**Shard leases.** Merging is read, widen, write: two writers merging the same digest at once (two
packages share their licence texts) would each write back what they read plus their own range, and one
would be lost. BatchWriteItem takes no conditions, and per-item conditional writes run at a twelfth of
its rate on moto (129 puts/s against 1,580 items/s, measured here), so the digest items are split in
:data:`SHARDS` shards by their first byte, and a merge holds one shard's lease (``lease#digests#<n>``)
while it reads, widens and writes that shard's items, then lets it go: no lease is held for a whole
release, merges of many releases at once interleave shard by shard, and lookups never wait.

**Open ranges.** A package's range on a digest can be *open* (stored ``[lo, hi, 1]``, or ``[lo, 1]``
when lo = hi): its effective upper end is the later of ``hi`` and the package item's ``open_release``.
An archive release ingested above the package's open release, while the package lease is free, merges
its digests open and closes only the digests of the open release that it lacks (:meth:`UpstreamDB.
write_release`): releases ingested one at a time in version order then write about their new and
departed digests instead of their whole content. Readers (:meth:`UpstreamDB.lookup`, dumps) only ever
see effective, closed ranges.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import orjson
from pynamodb.attributes import JSONAttribute, MapAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.models import Model

from dropscan.models import (
    DigestInfo,
    FileDigests,
    PackageInfo,
    Provenance,
    Trust,
    VersionRange,
    earlier_provenance,
    info_from_json,
    info_to_json,
    version_key,
)
from dropscan.store.batch import BatchTable, CallStats
from dropscan.store.lease import WRITER_LEASE, LeaseBusy, LeaseLost, WriterLease

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PACKAGE_PREFIX = "package#"
# one item naming every package, so that listing them reads two items rather than scanning the table
PACKAGE_INDEX = "packages"
FORMS = ("raw", "kw", "ws")


class DigestItem(Model):
    class Meta:
        table_name = "upstream"  # never used for I/O: batches go through BatchTable

    pk = UnicodeAttribute(hash_key=True)
    # {"f": [forms], "p": {package: [lo] or [lo, hi]}, "kw"/"ws": digest where a raw file's differs}
    v = JSONAttribute(null=True)
    # the earlier layout, read but no longer written
    forms = UnicodeSetAttribute(null=True)
    pkgs = MapAttribute[str, Any](null=True)  # package -> {"lo": version, "hi": version}


class PackageItem(Model):
    class Meta:
        table_name = "upstream"

    pk = UnicodeAttribute(hash_key=True)
    name = UnicodeAttribute()
    trust = UnicodeAttribute(default=Trust.HIGH.value)
    versions = UnicodeSetAttribute(null=True)
    # the release whose digests hold open ranges (see the module's docstring); only ever raised
    open_release = UnicodeAttribute(null=True)


def digest_from_raw(raw: dict[str, Any]) -> tuple[str, DigestInfo, bool]:
    """(digest, info, whether the item is in the current layout) of a raw digest item.

    A lookup asks for ``v`` alone (see :data:`LOOKUP_PROJECTION`), so the digest is read from it;
    KeyError when the item holds its digest nowhere (``pk`` not read, and ``v`` older than ``d``).
    """
    value = raw.get("v")
    if value is not None:  # the hot path of every lookup: no model object per item
        parsed = orjson.loads(value["S"])
        digest = parsed["d"] if "d" in parsed else raw["pk"]["S"]
        return digest, info_from_json(parsed), "d" in parsed
    if "pk" not in raw:  # the earlier layout is only ever read whole
        raise KeyError("pk")
    item = DigestItem.from_raw_data(raw)
    pkgs = item.pkgs.as_dict() if item.pkgs is not None else {}
    return (
        item.pk,
        DigestInfo(
            forms=frozenset(item.forms or ()),
            packages={p: VersionRange(str(r["lo"]), str(r["hi"])) for p, r in pkgs.items()},
        ),
        False,
    )


#: what a lookup reads of a digest item: ``v``, which repeats the key, because moto's response
#: serializer costs per attribute value (one instead of two: 8,700 keys/s instead of 6,000). ``forms``
#: is there to see items of the earlier layout, which are then read again whole.
LOOKUP_PROJECTION = {"ProjectionExpression": "#v, #f", "ExpressionAttributeNames": {"#v": "v", "#f": "forms"}}


def _package_from_raw(raw: dict[str, Any]) -> PackageInfo:
    item = PackageItem.from_raw_data(raw)
    return PackageInfo(item.name, Trust(item.trust), tuple(sorted(item.versions or (), key=version_key)))


#: what :meth:`UpstreamDB.open_releases` reads of a package item
_OPEN_PROJECTION = {
    "ProjectionExpression": "#n, #o",
    "ExpressionAttributeNames": {"#n": "name", "#o": "open_release"},
}

#: packages a digest item holds before the next go to an overflow item
PACKAGES_PER_ITEM = 16
#: shards of the digest items, each with its writer lease
SHARDS = 32
#: an item that is not a digest item: it tells whether the table held no digest when merges began
LAYOUT = "meta#layout"

Digests = Mapping[str, tuple[set[str], Mapping[str, VersionRange]]]

#: the lease of one package's open release: ``lease#package#<name>``
PACKAGE_LEASE = "lease#package#"


class OpenMode(StrEnum):
    """How a release was written (:meth:`UpstreamDB.write_release`)."""

    OPEN = "open"
    BUSY = "closed: the package lease was taken"
    NOT_ABOVE = "closed: not above the open release"
    NO_PATH_LIST = "closed: the open release has no path list"


@dataclass(frozen=True, slots=True)
class ReleaseWritten:
    items: int  # items written
    mode: OpenMode
    departed: int = 0  # digests of the open release it lacked, closed (open mode)


@dataclass
class Contribution:
    """What one merge says of one digest: forms, release ranges, provenance, other forms' digests."""

    forms: set[str] = field(default_factory=set)
    ranges: dict[str, VersionRange] = field(default_factory=dict)
    history: dict[str, Provenance] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)  # "kw"/"ws" -> digest, where they differ
    opened: set[str] = field(default_factory=set)  # packages whose range here is open (open mode)
    # package -> the open release a digest it left was last in: its open range ends there
    close: dict[str, str] = field(default_factory=dict)

    def says_anything(self) -> bool:
        """Whether it would make an item of a digest the table lacks (a close alone does not)."""
        return bool(self.forms or self.ranges or self.history)

    def add_range(self, package: str, rng: VersionRange) -> None:
        prev = self.ranges.get(package)
        self.ranges[package] = prev.widen(rng.lo).widen(rng.hi) if prev else rng

    def add_history(self, package: str, prov: Provenance) -> None:
        merged = earlier_provenance(self.history.get(package), prov)
        if merged is not None:
            self.history[package] = merged


def release_entries(files: Iterable[FileDigests]) -> dict[str, dict[str, Any]]:
    """digest -> {"forms": set, "kw": .., "ws": ..} for the files of one release."""
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        raw = out.setdefault(f.sha256, {"forms": set()})
        raw["forms"].add("raw")
        if f.kw != f.sha256:
            raw["kw"] = f.kw
        if f.ws != f.sha256:
            raw["ws"] = f.ws
        out.setdefault(f.kw, {"forms": set()})["forms"].add("kw")
        out.setdefault(f.ws, {"forms": set()})["forms"].add("ws")
    return out


def contributions_of(
    files: Iterable[FileDigests],
    package: str,
    rng: VersionRange | None,
    into: dict[str, Contribution] | None = None,
    history: Provenance | None = None,
) -> dict[str, Contribution]:
    """The contributions of ``files`` of ``package`` (in ``rng``; None: its history only), added to
    ``into``; ``history`` is the provenance of the raw digests."""
    out = into if into is not None else {}
    for f in files:
        for digest, form in ((f.sha256, "raw"), (f.kw, "kw"), (f.ws, "ws")):
            c = out.get(digest)
            if c is None:
                c = out[digest] = Contribution()
            c.forms.add(form)
            if rng is not None:
                c.add_range(package, rng)
            if form == "raw":
                if f.kw != f.sha256:
                    c.extra["kw"] = f.kw
                if f.ws != f.sha256:
                    c.extra["ws"] = f.ws
            if history is not None:  # a normal form carries its raw file's provenance
                c.add_history(package, history)
    return out


def shard_of(digest: str) -> int:
    try:
        return int(digest[:2], 16) % SHARDS
    except ValueError:  # not hex: keys of other items never come here, but a bad digest must not crash
        return sum(digest.encode()) % SHARDS


@dataclass
class _Stored:
    """A digest as stored: its head and overflow items' values, and what it knows merged."""

    head: dict[str, Any] | None  # the head's parsed ``v`` (None: absent)
    pages: list[dict[str, Any]]  # the overflow items' parsed ``v``, in order
    current: bool  # in the current layout (else rewritten on the next merge)

    def info(self, open_releases: Mapping[str, str] | None = None) -> DigestInfo:
        return info_of(self.head or {}, self.pages, open_releases)

    def stored(self) -> tuple[DigestInfo, set[str]]:
        return stored_of(self.head or {}, self.pages)

    def open_packages(self) -> set[str]:
        """Packages with an open range on this digest (cheap: no range is parsed otherwise)."""
        return {
            p
            for value in (self.head or {}, *self.pages)
            for p, r in value.get("p", {}).items()
            if r and not isinstance(r[-1], str)
        }


#: the last element of an open range as stored (``[lo, hi, 1]``); a closed one is ``[lo]`` or ``[lo, hi]``
OPEN = 1


def parse_range(stored: list[Any]) -> tuple[VersionRange, bool]:
    """(stored range, whether it is open) of a range as an item holds it (non-empty)."""
    is_open = not isinstance(stored[-1], str)
    versions = stored[:-1] if is_open else stored
    return VersionRange(versions[0], versions[-1]), is_open


def range_value(rng: VersionRange, is_open: bool) -> list[Any]:
    return [*rng.as_list(), OPEN] if is_open else rng.as_list()


def _later(a: str, b: str) -> str:
    return max(a, b, key=version_key)


def stored_of(head: Mapping[str, Any], pages: Iterable[Mapping[str, Any]]) -> tuple[DigestInfo, set[str]]:
    """(the digest's info as stored, its packages with an open range): what merges work on."""
    ranges: dict[str, VersionRange] = {}
    opened: set[str] = set()
    history: dict[str, Provenance] = {}
    for value in (head, *pages):
        for p, r in value.get("p", {}).items():
            if r:
                ranges[p], is_open = parse_range(r)
                if is_open:
                    opened.add(p)
        history.update(value.get("h") or {})
    return DigestInfo(frozenset(head.get("f", ())), ranges, history), opened


def effective(info: DigestInfo, opened: Iterable[str], open_releases: Mapping[str, str]) -> DigestInfo:
    """``info`` with each open range ended at the later of its ``hi`` and its package's open release."""
    ranges = dict(info.packages)
    for p in opened:
        top = open_releases.get(p)
        if top is not None and p in ranges:
            ranges[p] = VersionRange(ranges[p].lo, _later(ranges[p].hi, top))
    return DigestInfo(info.forms, ranges, info.history)


def info_of(
    head: Mapping[str, Any],
    pages: Iterable[Mapping[str, Any]],
    open_releases: Mapping[str, str] | None = None,
) -> DigestInfo:
    """What readers see of a digest: closed, effective ranges (``open_releases``: package -> its open
    release; an open range of a package without one ends at its ``hi``)."""
    info, opened = stored_of(head, pages)
    return effective(info, opened, open_releases or {}) if opened else info


def _merged_range(
    prev: VersionRange, was_open: bool, rng: VersionRange, opens: bool, top: str | None
) -> tuple[VersionRange, bool]:
    """A stored range widened by a contribution (``opens``: made in open mode; ``top``: the package's
    open release as the merge knows it, which only ever rises, so a stale one is merely cautious)."""
    if opens:
        if was_open and version_key(prev.lo) <= version_key(rng.lo):
            return prev, True  # its upper end follows the open release: nothing to write
        return prev.widen(rng.lo).widen(rng.hi), True
    if was_open:
        # closed onto open: ``hi`` need not rise to a version the open release already covers (a
        # re-ingest of the open release writes nothing); the close later takes ``hi`` to that release
        ceiling = prev.hi if top is None else _later(prev.hi, top)
        hi = prev.hi if version_key(rng.hi) <= version_key(ceiling) else _later(prev.hi, rng.hi)
        lo = min(prev.lo, rng.lo, key=version_key)
        return VersionRange(lo, hi), True
    return prev.widen(rng.lo).widen(rng.hi), False


def _merged(
    old: DigestInfo | None,
    old_open: set[str],
    new: Contribution,
    open_releases: Mapping[str, str] | None = None,
) -> tuple[DigestInfo, set[str]]:
    forms = set(new.forms) | set(old.forms if old else ())
    ranges = dict(old.packages) if old else {}
    opened = set(old_open)
    for pkg, rng in new.ranges.items():
        prev = ranges.get(pkg)
        if prev is None:
            ranges[pkg] = rng
            if pkg in new.opened:
                opened.add(pkg)
            continue
        top = (open_releases or {}).get(pkg)
        ranges[pkg], is_open = _merged_range(prev, pkg in opened, rng, pkg in new.opened, top)
        if is_open:
            opened.add(pkg)
    for pkg, at in new.close.items():
        if pkg in opened and pkg in ranges:  # it left the open release: its range ends there
            opened.discard(pkg)
            ranges[pkg] = VersionRange(ranges[pkg].lo, _later(ranges[pkg].hi, at))
    history = {p: dict(h) for p, h in (old.history if old else {}).items()}
    for pkg, prov in new.history.items():
        merged = earlier_provenance(history.get(pkg), prov)
        if merged is not None:
            history[pkg] = dict(merged)
    return DigestInfo(frozenset(forms), ranges, history), opened


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _layout(
    digest: str,
    info: DigestInfo,
    extra: Mapping[str, str],
    old_order: list[str],
    opened: Iterable[str] = (),
) -> list[str]:
    """The item values (head first) of ``info`` (``opened``: packages whose range is open): packages
    keep the item they were in (``old_order``, head's then each page's), new ones fill the head, then
    the pages, :data:`PACKAGES_PER_ITEM` each."""
    opened = set(opened)
    names = sorted(info.names)
    known = [n for n in old_order if n in info.names]
    order = known + [n for n in names if n not in set(known)]
    groups = [order[i : i + PACKAGES_PER_ITEM] for i in range(0, len(order), PACKAGES_PER_ITEM)] or [[]]

    def part(group: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "p": {p: range_value(info.packages[p], p in opened) for p in sorted(group) if p in info.packages}
        }
        hist = {p: dict(info.history[p]) for p in sorted(group) if p in info.history}
        if hist:
            out["h"] = hist
        return out

    head = {"d": digest, "f": sorted(info.forms), **part(groups[0]), **dict(sorted(extra.items()))}
    if len(groups) > 1:
        head["o"] = len(groups) - 1
    return [_dumps(head)] + [_dumps({"d": digest, **part(g)}) for g in groups[1:]]


def _order_of(stored: _Stored | None) -> list[str]:
    if stored is None or stored.head is None:
        return []
    out: list[str] = []
    for value in (stored.head, *stored.pages):
        out.extend(sorted(set(value.get("p", {})) | set(value.get("h") or {})))
    return out


def head_of(raw: dict[str, Any]) -> tuple[str, dict[str, Any], bool]:
    """(digest, head value as the current layout writes it, whether the item is in that layout)."""
    digest, info, current = digest_from_raw(raw)
    value = orjson.loads(raw["v"]["S"]) if "v" in raw else info_to_json(info)
    value["d"] = digest
    return digest, value, current


def _not_a_digest(key: str) -> bool:
    return key.startswith(("lease#", "meta#", PACKAGE_PREFIX)) or key == PACKAGE_INDEX


class UpstreamDB:
    """Everything the stages ask of the upstream table, and nothing about how DynamoDB does it."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        *,
        concurrency: int = 4,
        stats: CallStats | None = None,
        forked_reads: bool = False,
        lease_s: float = 60.0,
        lease_wait_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        batch: BatchTable | None = None,
    ) -> None:
        """``lease_s``: how long a shard lease outlives a writer that stopped renewing it;
        ``lease_wait_s``: how long a merge waits for a shard another merge holds (then LeaseBusy: the
        message comes back later); ``clock``: the leases' clock; ``forked_reads``: see :class:`BatchTable`;
        ``batch``: the table's batch reads and writes, if not BatchGetItem/BatchWriteItem on ``client``.
        """
        self.client = client
        self.table = table
        self.batch = batch or BatchTable(
            client, table, concurrency=concurrency, stats=stats, forked_reads=forked_reads
        )
        self.lease_s = lease_s
        self.lease_wait_s = lease_wait_s
        self.clock = clock
        self._born_empty: bool | None = None

    @property
    def stats(self) -> CallStats:
        return self.batch.stats

    # -------------------------------------------------------------- reads
    def lookup(self, digests: Iterable[str]) -> dict[str, DigestInfo]:
        """The known digests among ``digests`` (deduplicated: one key per digest, 100 a call), with
        effective ranges: the package items of the packages holding an open range are read once, after
        the digests (an open release read later is only ever later: a range may over-cover, never less).
        """
        found = self._read(sorted(set(digests)), projected=True)
        opened = {p for st in found.values() for p in st.open_packages()}
        tops = self.open_releases(opened) if opened else {}
        return {d: st.info(tops) for d, st in found.items()}

    def open_releases(self, names: Iterable[str]) -> dict[str, str]:
        """package -> its open release, for those of the named packages that have one (one BatchGet
        per 100 names)."""
        keys = [{"pk": {"S": PACKAGE_PREFIX + n}} for n in sorted(set(names))]
        raws = self.batch.get_many(keys, projection=_OPEN_PROJECTION)
        return {r["name"]["S"]: r["open_release"]["S"] for r in raws if "open_release" in r}

    def _read(self, digests: list[str], *, projected: bool = False) -> dict[str, _Stored]:
        """The stored heads of ``digests`` and their overflow items (absent digests left out)."""
        keys = [{"pk": {"S": d}} for d in digests]
        heads: dict[str, _Stored] = {}
        raws: list[dict[str, Any]] | None = None
        if projected:
            try:
                raws = self.batch.get_many(keys, projection=LOOKUP_PROJECTION)
                parsed = [(raw, head_of(raw)) for raw in raws]
            except KeyError:  # a table written before ``v`` held the key: its items can only be read whole
                raws = None
        if raws is None:
            parsed = [(raw, head_of(raw)) for raw in self.batch.get_many(keys)]
        for _, (digest, head, current) in parsed:
            heads[digest] = _Stored(head, [], current)
        paged = {d: int(st.head.get("o", 0)) for d, st in heads.items() if st.head}
        paged = {d: n for d, n in paged.items() if n}
        if paged:
            page_keys = [{"pk": {"S": f"{d}#{k}"}} for d, n in paged.items() for k in range(1, n + 1)]
            found = {raw["pk"]["S"]: json.loads(raw["v"]["S"]) for raw in self.batch.get_many(page_keys)}
            for d, n in paged.items():
                heads[d].pages = [found[f"{d}#{k}"] for k in range(1, n + 1) if f"{d}#{k}" in found]
        return heads

    def packages(self, names: Iterable[str] | None = None) -> dict[str, PackageInfo]:
        """Package items by name: the named ones, or all of them."""
        if names is None:
            index = self.client.get_item(TableName=self.table, Key={"pk": {"S": PACKAGE_INDEX}}).get("Item")
            names = index["packages"]["SS"] if index else self._scan_package_names()
        raws = self.batch.get_many([{"pk": {"S": PACKAGE_PREFIX + n}} for n in sorted(set(names))])
        infos = [_package_from_raw(r) for r in raws]
        return {p.name: p for p in infos}

    def _scan_package_names(self) -> list[str]:
        """For a table written before the package index: its package items, by a Scan."""
        names: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "begins_with(pk, :p)",
            "ExpressionAttributeValues": {":p": {"S": PACKAGE_PREFIX}},
            "ProjectionExpression": "pk",
        }
        while True:
            resp = self.client.scan(**kwargs)
            names.extend(i["pk"]["S"][len(PACKAGE_PREFIX) :] for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return names
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def _index(self, package: str) -> None:
        self.client.update_item(
            TableName=self.table,
            Key={"pk": {"S": PACKAGE_INDEX}},
            UpdateExpression="ADD packages :n",
            ExpressionAttributeValues={":n": {"SS": [package]}},
        )

    def is_known(self, sha256: str) -> bool:
        item = self.client.get_item(TableName=self.table, Key={"pk": {"S": sha256}}).get("Item")
        return item is not None and "raw" in head_of(item)[1].get("f", ())

    # -------------------------------------------------------------- writes
    def add_release(
        self,
        package: str,
        version: str,
        files: Iterable[FileDigests],
        trust: Trust | None = None,
        *,
        previous: Callable[[str], Iterable[str] | None] | None = None,
    ) -> int:
        """Merge one release's digests into the table and register it; returns how many items were written.

        Idempotent: items already holding the release (forms and range) are not rewritten.
        ``trust`` sets the package's trust; None keeps it (``high`` for a new package). ``previous``:
        the raw SHA-256s of a release of the package (see :meth:`write_release`); None: closed mode.
        """
        if previous is None:
            written = self.merge_release(package, version, files)
        else:
            written = self.write_release(package, version, files, previous=previous).items
        self.register(package, version, trust)
        return written

    def write_release(
        self,
        package: str,
        version: str,
        files: Iterable[FileDigests],
        *,
        previous: Callable[[str], Iterable[str] | None],
    ) -> ReleaseWritten:
        """Merge one release's digests, in open mode if it can (see the module's docstring), else as
        :meth:`merge_release`; the release is not registered (see :meth:`register`).

        Open mode: the package lease is free at the first try (never waited for) and ``version`` sorts
        above the package's open release (without one: above every registered version). Under that
        lease: 1. the digests are merged with open ranges; 2. the digests of the open release (all
        forms) that this one lacks are closed at it; 3. the package's open release becomes
        ``version``. ``previous(v)`` gives the raw SHA-256s of release ``v`` (its path list; None if it
        has none, and then the closed mode is taken). Each step leaves the table correct if the next
        never comes: an open range over-covers until a later open-mode ingest closes it.
        """
        listed = list(files)
        contributions = contributions_of(listed, package, VersionRange(version, version))

        def opening(top: str | None, held: set[str]) -> dict[str, Contribution]:
            # only the files the open release does not hold: every digest (in every form) of a file it
            # holds is open from a lower version already, so merging it again would read it to write
            # nothing; reads, like writes, are then about the new and the departed digests
            fresh = contributions_of(
                [f for f in listed if f.sha256 not in held], package, VersionRange(version, version)
            )
            for c in fresh.values():
                c.opened.add(package)
            return fresh

        return self._write(package, version, contributions, listed, previous, opening)

    def write_releases(
        self,
        package: str,
        contributions: dict[str, Contribution],
        newest: str,
        newest_files: Iterable[FileDigests],
        *,
        previous: Callable[[str], Iterable[str] | None],
        on_shard: Callable[[int], None] | None = None,
    ) -> ReleaseWritten:
        """Merge the contributions of several releases at once (ingest-git's new tags, each digest's
        range over the tags holding it), in open mode if it can, as :meth:`write_release` does for one;
        ``newest`` is the highest of them, ``newest_files`` its files. The releases are not registered.

        In open mode the digests ``newest`` holds are opened, those of the open release it lacks closed
        at that release, and ``newest`` becomes the open release: a later run's new tag writes about its
        changes, not every digest whose range it extends."""
        files = list(newest_files)
        # the forms a file gives its own raw digest: a contribution saying more came from another file
        own = {
            f.sha256: {"raw"} | {k for k, d in (("kw", f.kw), ("ws", f.ws)) if d == f.sha256} for f in files
        }
        now = {d for f in files for d in (f.sha256, f.kw, f.ws)}

        def opening(top: str | None, held: set[str]) -> dict[str, Contribution]:
            # the digests ``newest`` holds, opened; those its open release held from a lower version,
            # with nothing else to say, left alone
            fresh: dict[str, Contribution] = {}
            for digest, c in contributions.items():
                rng = c.ranges.get(package)
                if (
                    top is not None
                    and digest in held
                    and digest in now
                    and rng is not None
                    and version_key(rng.lo) > version_key(top)
                    and not c.history
                    and c.forms <= own.get(digest, set())
                ):
                    continue  # open from a release at or below the open one: nothing to say
                if digest in now and rng is not None:
                    c.opened.add(package)
                fresh[digest] = c
            return fresh

        return self._write(package, newest, contributions, files, previous, opening, on_shard)

    def _write(
        self,
        package: str,
        version: str,
        contributions: dict[str, Contribution],
        files: list[FileDigests],
        previous: Callable[[str], Iterable[str] | None],
        opening: Callable[[str | None, set[str]], dict[str, Contribution]],
        on_shard: Callable[[int], None] | None = None,
    ) -> ReleaseWritten:
        """``contributions`` merged in open mode if it can (``version`` the release that becomes the open
        one, ``files`` its files, ``opening(top, held)`` what step 1 merges), else closed."""
        lease = WriterLease(
            self.client, self.table, self.lease_s, key=PACKAGE_LEASE + package, clock=self.clock
        )
        if not lease.try_acquire():  # another ingest of the package is at it: never wait
            tops = self.open_releases([package])
            return ReleaseWritten(
                self.merge(contributions, open_releases=tops, on_shard=on_shard), OpenMode.BUSY
            )
        closed: OpenMode | None = None
        with lease.renewing():
            top, versions = self._package_state(package)
            tops = {package: top} if top is not None else {}
            above = top is None and all(version_key(version) > version_key(v) for v in versions)
            if not (above or (top is not None and version_key(version) > version_key(top))):
                closed = OpenMode.NOT_ABOVE
            elif (held := previous(top) if top is not None else ()) is None:
                closed = OpenMode.NO_PATH_LIST  # the open release has no path list to close by
            else:
                kept = set(held)
                fresh = opening(top, kept)
                return self._write_open(package, version, files, fresh, top, kept, lease, on_shard)
        # the closed mode, with the package lease let go: an ingest above this one may take it
        return ReleaseWritten(self.merge(contributions, open_releases=tops, on_shard=on_shard), closed)

    def _write_open(
        self,
        package: str,
        version: str,
        files: list[FileDigests],
        fresh: dict[str, Contribution],
        top: str | None,
        held: set[str],
        lease: WriterLease,
        on_shard: Callable[[int], None] | None,
    ) -> ReleaseWritten:
        """The three steps of the open mode, under the package ``lease`` (see :meth:`write_release`)."""
        tops = {package: top} if top is not None else {}
        written = self.merge(fresh, open_releases=tops, guard=lease.check, on_shard=on_shard)  # 1. open
        raw_now = {f.sha256 for f in files}
        now = {d for f in files for d in (f.sha256, f.kw, f.ws)}
        departed = self._departed(held, raw_now, now) if top is not None else set()
        if top is not None and departed:  # 2. close what left the open release, at it
            closing = {d: Contribution(close={package: top}) for d in departed}
            written += self.merge(closing, open_releases=tops, guard=lease.check)
        lease.check()
        self._set_open_release(package, version, top)  # 3. this release is the open one
        return ReleaseWritten(written, OpenMode.OPEN, departed=len(departed))

    def _package_state(self, package: str) -> tuple[str | None, list[str]]:
        """(open release, registered versions) of a package, read consistently."""
        item = self.client.get_item(
            TableName=self.table, Key={"pk": {"S": PACKAGE_PREFIX + package}}, ConsistentRead=True
        ).get("Item")
        if item is None:
            return None, []
        top = item.get("open_release", {}).get("S")
        return top, list(item.get("versions", {}).get("SS", []))

    def _departed(self, held: set[str], raw_now: set[str], now: set[str]) -> set[str]:
        """The digests, in every form, of the open release's files that the new release lacks.

        A file the new release keeps has its normal forms in it too (same bytes, same forms); a file it
        lacks has them read from its raw item's ``kw``/``ws``: a read per departed file only.
        ``raw_now``: the new release's raw SHA-256s; ``now``: its digests in every form.
        """
        gone = sorted(held - raw_now)
        forms = set(gone)
        for st in self._read(gone, projected=True).values():
            forms.update(str(st.head[k]) for k in ("kw", "ws") if st.head and k in st.head)
        return forms - now

    def adopt_open_release(self, package: str, version: str) -> bool:
        """A package new to this table takes the open release it had in the table a dump came from
        (:mod:`dropscan.store.dump`), once the dump's digests, open ranges included, are merged; False:
        it has one already (the table's own state wins)."""
        try:
            self._set_open_release(package, version, None)
        except LeaseLost:
            return False
        return True

    def _set_open_release(self, package: str, version: str, top: str | None) -> None:
        """Step 3: the open release rises to ``version``, only from the one this ingest read (so it
        never falls, even under a writer whose lease ran out unseen)."""
        condition = "attribute_not_exists(#o)" if top is None else "#o = :top"
        values: dict[str, Any] = {":v": {"S": version}, ":n": {"S": package}, ":t": {"S": Trust.HIGH.value}}
        if top is not None:
            values[":top"] = {"S": top}
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": {"S": PACKAGE_PREFIX + package}},
                UpdateExpression="SET #o = :v, #n = :n, trust = if_not_exists(trust, :t)",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#o": "open_release", "#n": "name"},
                ExpressionAttributeValues=values,
            )
        except self.client.exceptions.ConditionalCheckFailedException as e:
            raise LeaseLost(f"the open release of {package} moved under this ingest") from e

    def merge_release(self, package: str, version: str, files: Iterable[FileDigests]) -> int:
        """Merge one release's digests; returns the items written. The release is not registered (see
        :meth:`register`).

        ``files`` is read to its end before anything is written: if it raises (an archive that could
        not be read), the table is left as it was.
        """
        return self.merge(contributions_of(files, package, VersionRange(version, version)))

    def merge_digests(self, digests: Digests, *, extra: Mapping[str, dict[str, str]] | None = None) -> int:
        """Widen forms and version ranges of ``digests``; write only the items that change."""
        contributions: dict[str, Contribution] = {}
        for digest, (forms, ranges) in digests.items():
            c = contributions[digest] = Contribution(set(forms), dict(ranges))
            c.extra.update((extra or {}).get(digest, {}))
        return self.merge(contributions)

    def merge(
        self,
        contributions: Mapping[str, Contribution],
        *,
        on_shard: Callable[[int], None] | None = None,
        open_releases: Mapping[str, str] | None = None,
        guard: Callable[[], None] | None = None,
    ) -> int:
        """Merge ``contributions`` shard by shard, each under its lease; returns the items written.

        Shards another merge holds are passed over and come back later; a merge waits (sleeping) only
        when every shard it still needs is taken, and gives up with LeaseBusy after ``lease_wait_s`` of
        no progress. ``on_shard`` is told each shard as it is done (checkpoints, tests).
        ``open_releases``: package -> open release, as far as the caller knows (a closed range merged
        onto an open one then writes nothing that release covers); ``guard``: called before each page
        is written (a package lease's check).
        """
        by_shard: dict[int, dict[str, Contribution]] = {}
        for digest, c in contributions.items():
            by_shard.setdefault(shard_of(digest), {})[digest] = c
        pending = sorted(by_shard)
        written = 0
        waited_since: float | None = None
        attempt = 0
        while pending:
            progressed = False
            for shard in list(pending):
                lease = WriterLease(
                    self.client, self.table, self.lease_s, key=f"{WRITER_LEASE}#{shard}", clock=self.clock
                )
                if not lease.try_acquire():
                    continue
                with lease.renewing():
                    written += self._merge_shard(lease, by_shard[shard], open_releases or {}, guard)
                pending.remove(shard)
                progressed = True
                if on_shard is not None:
                    on_shard(shard)
            if not pending:
                break
            if progressed:
                waited_since, attempt = None, 0
                continue
            now = time.monotonic()
            waited_since = waited_since or now
            if now - waited_since > self.lease_wait_s:
                raise LeaseBusy(
                    f"{len(pending)} shards of {self.table} stayed taken for {self.lease_wait_s:.0f} s"
                )
            time.sleep(min(1.0, 0.02 * 2**attempt))
            attempt += 1
        return written

    def _merge_shard(
        self,
        lease: WriterLease,
        contributions: Mapping[str, Contribution],
        open_releases: Mapping[str, str],
        guard: Callable[[], None] | None = None,
    ) -> int:
        """Read, widen and write one shard's digests under its lease; only the items that change."""
        digests = sorted(contributions)
        fresh = lease.fresh and self.born_empty()
        stored = {} if fresh else self._read(digests)
        changed: list[dict[str, Any]] = []
        for digest in digests:
            new = contributions[digest]
            old = stored.get(digest)
            if old is None and not new.says_anything():
                continue  # a close of a digest the table lacks
            old_info, old_open = old.stored() if old is not None else (None, set())
            info, opened = _merged(old_info, old_open, new, open_releases)
            extra: dict[str, str] = {
                k: str(old.head[k]) for k in ("kw", "ws") if old is not None and old.head and k in old.head
            }
            extra.update(new.extra)
            values = _layout(digest, info, extra, _order_of(old), opened)
            before = (
                [_dumps(old.head)] + [_dumps(p) for p in old.pages] if old is not None and old.head else []
            )
            if old is not None and old.current and values == before:
                continue
            keys = [digest] + [f"{digest}#{k}" for k in range(1, len(values))]
            changed.extend({"pk": {"S": k}, "v": {"S": v}} for k, v in zip(keys, values, strict=True))

        def check() -> None:
            lease.check()
            if guard is not None:
                guard()

        check()
        if changed:
            lease.mark_written()
            self.batch.put_many(changed, before_page=check)
        return len(changed)

    def born_empty(self) -> bool:
        """Whether the table held no digest item when merges began (recorded once, in :data:`LAYOUT`):
        a shard whose lease never saw a write then holds nothing, and a merge into it reads nothing."""
        if self._born_empty is None:
            item = self.client.get_item(
                TableName=self.table, Key={"pk": {"S": LAYOUT}}, ConsistentRead=True
            ).get("Item")
            if item is None:
                resp = self.client.scan(TableName=self.table, Limit=50, ProjectionExpression="pk")
                empty = "LastEvaluatedKey" not in resp and all(
                    _not_a_digest(i["pk"]["S"]) for i in resp.get("Items", [])
                )
                try:
                    self.client.put_item(
                        TableName=self.table,
                        Item={
                            "pk": {"S": LAYOUT},
                            "born_empty": {"BOOL": empty},
                            "shards": {"N": str(SHARDS)},
                        },
                        ConditionExpression="attribute_not_exists(pk)",
                    )
                except self.client.exceptions.ConditionalCheckFailedException:
                    item = self.client.get_item(
                        TableName=self.table, Key={"pk": {"S": LAYOUT}}, ConsistentRead=True
                    )["Item"]
            self._born_empty = bool(item["born_empty"]["BOOL"]) if item is not None else empty
        return self._born_empty

    def register(self, package: str, versions: str | Iterable[str], trust: Trust | None) -> None:
        """Record a version (or several, in one write) of ``package``; ``trust`` None keeps the
        package's trust (high when new)."""
        listed = [versions] if isinstance(versions, str) else sorted(set(versions))
        # ADD on a string set is idempotent, so a re-ingest leaves the item as it was
        trust_expr = "trust = :t" if trust else "trust = if_not_exists(trust, :t)"
        self.client.update_item(
            TableName=self.table,
            Key={"pk": {"S": PACKAGE_PREFIX + package}},
            UpdateExpression=f"SET #n = :n, {trust_expr} ADD versions :v",
            ExpressionAttributeNames={"#n": "name"},
            ExpressionAttributeValues={
                ":n": {"S": package},
                ":t": {"S": (trust or Trust.HIGH).value},
                ":v": {"SS": listed},
            },
        )
        self._index(package)

    def stats_summary(self) -> dict[str, Any]:
        """Counts for ``dropscan db stats``."""
        packages = self.packages()
        resp = self.client.describe_table(TableName=self.table)["Table"]
        return {
            "table": self.table,
            "items": int(resp.get("ItemCount", 0)),
            "bytes": int(resp.get("TableSizeBytes", 0)),
            "packages": {
                p.name: {"trust": p.trust.value, "versions": list(p.versions)} for p in packages.values()
            },
        }

    def set_trust(self, package: str, trust: Trust) -> None:
        self.client.update_item(
            TableName=self.table,
            Key={"pk": {"S": PACKAGE_PREFIX + package}},
            UpdateExpression="SET #n = :n, trust = :t",
            ExpressionAttributeNames={"#n": "name"},
            ExpressionAttributeValues={":n": {"S": package}, ":t": {"S": trust.value}},
        )
        self._index(package)

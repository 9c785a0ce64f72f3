"""The upstream-hash database: digest items and package items in one DynamoDB table.

A digest item (``pk`` = hex SHA-256) says which normalised forms produced the digest (``raw``, ``kw``,
``ws``) and, per package, the lowest and highest release holding it: bounded whatever the number of
releases. Exact membership lives in the per-release path lists (``releases``). A package item
(``pk`` = ``package#<name>``) holds the package's trust and its ingested versions.

A digest item keeps all that in one JSON string attribute ``v`` beside its key: two attributes, not a
nested map of maps. That makes it about 120 bytes, and moto (whose response serializer costs per
attribute value) reads it 2-3 times as fast as the earlier layout (``forms`` set + ``pkgs`` map), which
is still read, and rewritten in the new layout whenever a merge touches it.

Merging is read, widen, write: two writers merging the same digest at once (two packages ingested
together share their licence texts) would each write back what it read plus its own range, and one
range would be lost. BatchWriteItem takes no conditions, and per-item conditional writes run at a
tenth of its rate on moto (TransactWriteItems copies the whole table per call there), so every merge
holds the table's writer lease (:class:`WriterLease`, one item): merges run one at a time, lookups never
wait.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from pynamodb.attributes import JSONAttribute, MapAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.models import Model

from dropscan.models import (
    DigestInfo,
    FileDigests,
    PackageInfo,
    Trust,
    VersionRange,
    info_from_json,
    version_key,
)
from dropscan.store.batch import BatchTable, CallStats
from dropscan.store.lease import WriterLease

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PACKAGE_PREFIX = "package#"
# one item naming every package, so that listing them reads two items rather than scanning the table
PACKAGE_INDEX = "packages"
FORMS = ("raw", "kw", "ws")
T = TypeVar("T")


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


def digest_from_raw(raw: dict[str, Any]) -> tuple[str, DigestInfo, bool]:
    """(digest, info, whether the item is in the current layout) of a raw digest item.

    A lookup asks for ``v`` alone (see :data:`LOOKUP_PROJECTION`), so the digest is read from it;
    KeyError when the item holds its digest nowhere (``pk`` not read, and ``v`` older than ``d``).
    """
    value = raw.get("v")
    if value is not None:  # the hot path of every lookup: no model object per item
        parsed = json.loads(value["S"])
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


def _widen(new: tuple[set[str], Mapping[str, VersionRange]], old: DigestInfo | None) -> DigestInfo:
    """``old`` with the forms and version ranges of ``new`` added."""
    forms, ranges = new
    packages = dict(old.packages) if old else {}
    for pkg, rng in ranges.items():
        prev = packages.get(pkg)
        packages[pkg] = prev.widen(rng.lo).widen(rng.hi) if prev else rng
    return DigestInfo(frozenset(forms) | (old.forms if old else frozenset()), packages)


#: files of a release merged at a time while its walk goes on: 80 BatchWriteItem calls a page
RELEASE_PAGE = 2000

Digests = Mapping[str, tuple[set[str], Mapping[str, VersionRange]]]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class _ItemEncoder:
    """Raw digest items, serialised by hand as digest_from_raw reads them (a pynamodb model costs 3x):
    ``v`` is json.dumps of ``{"d": digest, **info_to_json(info), **more}``, with the JSON of form sets and
    package ranges made once (a release's items share a handful of each; json.dumps per item was a fifth
    of a kernel ingest's own work beside moto's)."""

    def __init__(self) -> None:
        self._forms: dict[frozenset[str], str] = {}
        self._packages: dict[tuple[tuple[str, VersionRange], ...], str] = {}

    def item(self, digest: str, info: DigestInfo, more: Mapping[str, str]) -> dict[str, Any]:
        forms = self._forms.get(info.forms)
        if forms is None:
            forms = self._forms[info.forms] = _dumps(sorted(info.forms))
        ranges = tuple(sorted(info.packages.items()))
        packages = self._packages.get(ranges)
        if packages is None:
            packages = self._packages[ranges] = _dumps({p: r.as_list() for p, r in ranges})
        tail = "".join(f",{_dumps(k)}:{_dumps(v)}" for k, v in more.items()) if more else ""
        value = f'{{"d":{_dumps(digest)},"f":{forms},"p":{packages}{tail}}}'
        return {"pk": {"S": digest}, "v": {"S": value}}


class _PagedMerge:
    """One merge under the writer lease, page by page: what it wrote is remembered, so a later page
    neither reads it again nor loses it, and :meth:`undo` can put every item back as it was."""

    def __init__(self, db: UpstreamDB, lease: WriterLease) -> None:
        self.db = db
        self.lease = lease
        self.mine: dict[str, tuple[DigestInfo, dict[str, str]]] = {}  # as this merge left each digest
        self.before: dict[str, dict[str, Any] | None] = {}  # raw item before its first write (None: none)
        self.written = 0
        self._encode = _ItemEncoder()

    def add(self, digests: Digests, extra: Mapping[str, dict[str, str]]) -> None:
        """Widen ``digests``; write the items that change."""
        unseen = [d for d in digests if d not in self.mine]
        # a table no merge ever wrote to (a first ingest, a database loaded from a dump) has nothing to
        # read: 80,000 absent keys are 2.7 s of a kernel's ingest on moto
        raws = {} if self.lease.fresh or not unseen else self._read(unseen)
        changed: list[dict[str, Any]] = []
        for digest, new in digests.items():
            if digest in self.mine:
                old, current = self.mine[digest][0], True
            elif digest in raws:
                _, old, current = digest_from_raw(raws[digest])
            else:
                old, current = None, False
            info = _widen(new, old)
            more = {**self.mine.get(digest, (info, {}))[1], **extra.get(digest, {})}
            self.mine[digest] = (info, more)
            if old is not None and current and info == old:
                continue
            self.before.setdefault(digest, raws.get(digest))
            changed.append(self._encode.item(digest, info, more))
        self.lease.check()
        if changed:
            self.lease.mark_written()
            self.db.batch.put_many(changed, before_page=self.lease.check)
            self.written += len(changed)

    def _read(self, digests: list[str]) -> dict[str, dict[str, Any]]:
        """Whole raw items (with their key: :meth:`undo` may put them back)."""
        return {raw["pk"]["S"]: raw for raw in self.db.batch.get_many([{"pk": {"S": d}} for d in digests])}

    def undo(self) -> None:
        """Put back every item this merge wrote as it was before (still under the lease)."""
        self.db.batch.put_many([raw for raw in self.before.values() if raw is not None])
        self.db.batch.delete_many([{"pk": {"S": d}} for d, raw in self.before.items() if raw is None])


def _pages(items: Iterable[T], size: int) -> Iterator[list[T]]:
    page: list[T] = []
    for item in items:
        page.append(item)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page


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
    ) -> None:
        """``lease_s``: how long the writer lease outlives a writer that stopped renewing it;
        ``lease_wait_s``: how long a merge waits for it (then LeaseBusy: the message comes back later);
        ``forked_reads``: see :class:`BatchTable`.
        """
        self.client = client
        self.table = table
        self.batch = BatchTable(
            client, table, concurrency=concurrency, stats=stats, forked_reads=forked_reads
        )
        self.lease_s = lease_s
        self.lease_wait_s = lease_wait_s

    @property
    def stats(self) -> CallStats:
        return self.batch.stats

    # -------------------------------------------------------------- reads
    def lookup(self, digests: Iterable[str]) -> dict[str, DigestInfo]:
        """The known digests among ``digests`` (deduplicated: one key per digest, 100 a call)."""
        return {d: info for d, info, _ in self._lookup_raw(digests)}

    def _lookup_raw(self, digests: Iterable[str]) -> list[tuple[str, DigestInfo, bool]]:
        keys = [{"pk": {"S": d}} for d in sorted(set(digests))]
        try:
            return [digest_from_raw(raw) for raw in self.batch.get_many(keys, projection=LOOKUP_PROJECTION)]
        except KeyError:  # a table written before ``v`` held the key: its items can only be read whole
            return [digest_from_raw(raw) for raw in self.batch.get_many(keys)]

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
        return item is not None and "raw" in digest_from_raw(item)[1].forms

    # -------------------------------------------------------------- writes
    def add_release(
        self, package: str, version: str, files: Iterable[FileDigests], trust: Trust | None = None
    ) -> int:
        """Merge one release's digests into the table and register it; returns how many items were written.

        Idempotent: items already holding the release (forms and range) are not rewritten.
        ``trust`` sets the package's trust; None keeps it (``high`` for a new package).
        """
        written = self.merge_release(package, version, files)
        self.register(package, version, trust)
        return written

    def merge_release(self, package: str, version: str, files: Iterable[FileDigests]) -> int:
        """Merge one release's digests page by page, as ``files`` yields them; returns the items written.

        ``files`` may be an archive walk going on in another process: its pages are written while it
        reads on. If it raises, every item written is put back as it was and the error is raised: a
        release that could not be read leaves no trace. The release is not registered (see
        :meth:`register`).
        """
        here = {package: VersionRange(version, version)}
        with self._lease() as lease:
            merge = _PagedMerge(self, lease)
            try:
                for page in _pages(files, RELEASE_PAGE):
                    entries = release_entries(page)
                    merge.add(
                        {d: (e["forms"], here) for d, e in entries.items()},
                        {d: {k: e[k] for k in ("kw", "ws") if k in e} for d, e in entries.items()},
                    )
            except Exception:  # not a kill: Lambda's own end leaves no chance to undo either
                merge.undo()
                raise
        return merge.written

    def merge_digests(self, digests: Digests, *, extra: Mapping[str, dict[str, str]] | None = None) -> int:
        """Widen forms and version ranges of ``digests``; write only the items that change."""
        with self._lease() as lease:
            merge = _PagedMerge(self, lease)
            merge.add(digests, extra or {})
        return merge.written

    def _lease(self) -> AbstractContextManager[WriterLease]:
        """The writer lease, held from a merge's first read to its last write (see the module)."""
        return WriterLease(self.client, self.table, self.lease_s).held(wait_s=self.lease_wait_s)

    def register(self, package: str, version: str, trust: Trust | None) -> None:
        """Record ``version`` of ``package``; ``trust`` None keeps the package's trust (high when new)."""
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
                ":v": {"SS": [version]},
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

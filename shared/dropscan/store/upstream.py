"""The upstream-hash database: digest items and package items in one DynamoDB table.

What the items say and how merges widen them are the pure rules of :mod:`dropscan.upstream_rules`; the
items as DynamoDB holds them are :mod:`dropscan.store.upstream_items`; merges shard by shard under the
shards' writer leases are :mod:`dropscan.store.upstream_merge`. This module is what the stages ask of
the table: lookups, package items, and releases written in open or closed mode.

**Open ranges.** A package's range on a digest can be *open*: its effective upper end is the later of
``hi`` and the package item's ``open_release``. An archive release ingested above the package's open
release, while the package lease is free, merges its digests open and closes only the digests of the
open release that it lacks (:meth:`UpstreamDB.write_release`): releases ingested one at a time in
version order then write about their new and departed digests instead of their whole content. Readers
(:meth:`UpstreamDB.lookup`, dumps) only ever see effective, closed ranges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from dropscan.models import DigestInfo, FileDigests, PackageInfo, Trust, VersionRange
from dropscan.store.batch import BatchTable, CallStats
from dropscan.store.lease import LeaseLost, WriterLease
from dropscan.store.upstream_items import OPEN_PROJECTION, head_of, package_from_raw, read_digests
from dropscan.store.upstream_merge import ShardMerge
from dropscan.upstream_rules import (
    PACKAGE_INDEX,
    PACKAGE_PREFIX,
    Contribution,
    Digests,
    contributions_of,
    opened_release,
    opened_releases,
    opens_above,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

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
        self.clock = clock
        self.merges = ShardMerge(
            client, table, self.batch, lease_s=lease_s, lease_wait_s=lease_wait_s, clock=clock
        )

    @property
    def stats(self) -> CallStats:
        return self.batch.stats

    # -------------------------------------------------------------- reads
    def lookup(self, digests: Iterable[str]) -> dict[str, DigestInfo]:
        """The known digests among ``digests`` (deduplicated: one key per digest, 100 a call), with
        effective ranges: the package items of the packages holding an open range are read once, after
        the digests (an open release read later is only ever later: a range may over-cover, never less).
        """
        found = read_digests(self.batch, sorted(set(digests)), projected=True)
        opened = {p for st in found.values() for p in st.open_packages()}
        tops = self.open_releases(opened) if opened else {}
        return {d: st.info(tops) for d, st in found.items()}

    def open_releases(self, names: Iterable[str]) -> dict[str, str]:
        """package -> its open release, for those of the named packages that have one (one BatchGet
        per 100 names)."""
        keys = [{"pk": {"S": PACKAGE_PREFIX + n}} for n in sorted(set(names))]
        raws = self.batch.get_many(keys, projection=OPEN_PROJECTION)
        return {r["name"]["S"]: r["open_release"]["S"] for r in raws if "open_release" in r}

    def packages(self, names: Iterable[str] | None = None) -> dict[str, PackageInfo]:
        """Package items by name: the named ones, or all of them."""
        if names is None:
            index = self.client.get_item(TableName=self.table, Key={"pk": {"S": PACKAGE_INDEX}}).get("Item")
            names = index["packages"]["SS"] if index else self._scan_package_names()
        raws = self.batch.get_many([{"pk": {"S": PACKAGE_PREFIX + n}} for n in sorted(set(names))])
        infos = [package_from_raw(r) for r in raws]
        return {p.name: p for p in infos}

    def held(self) -> dict[str, PackageInfo]:
        """Every package item, the index item first, by BatchGetItem alone (all finalize may call); none
        in a table written before the package index."""
        index = self.batch.get_many([{"pk": {"S": PACKAGE_INDEX}}])
        return self.packages(index[0]["packages"]["SS"]) if index else {}

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
            return opened_release(listed, package, version, held)

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

        def opening(top: str | None, held: set[str]) -> dict[str, Contribution]:
            return opened_releases(contributions, package, top, held, files)

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
            if not opens_above(version, top, versions):
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
        for st in read_digests(self.batch, gone, projected=True).values():
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
        """Merge ``contributions`` shard by shard, each under its lease; returns the items written (see
        :meth:`ShardMerge.merge`: ``on_shard`` is told each shard as it is done, ``open_releases`` is
        package -> open release as far as the caller knows, ``guard`` is called before each page)."""
        return self.merges.merge(contributions, on_shard=on_shard, open_releases=open_releases, guard=guard)

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

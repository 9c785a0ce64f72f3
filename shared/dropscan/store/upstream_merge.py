"""Merges into the upstream table's digest items, shard by shard, each under the shard's writer lease.

Merging is read, widen, write: two writers merging the same digest at once (two packages share their
licence texts) would each write back what they read plus their own range, and one would be lost.
BatchWriteItem takes no conditions, and per-item conditional writes run at a twelfth of its rate on moto
(129 puts/s against 1,580 items/s, measured here), so the digest items are split in
:data:`~dropscan.upstream_rules.SHARDS` shards by their first byte, and a merge holds one shard's lease
(``lease#digests#<n>``) while it reads, widens and writes that shard's items, then lets it go: no lease
is held for a whole release, merges of many releases at once interleave shard by shard, and lookups
never wait. What a merge writes of each digest is :func:`dropscan.upstream_rules.rewritten`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dropscan.store.batch import BatchTable
from dropscan.store.lease import WRITER_LEASE, LeaseBusy, WriterLease
from dropscan.store.upstream_items import read_digests
from dropscan.upstream_rules import LAYOUT, SHARDS, Contribution, not_a_digest, rewritten, shard_of

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class ShardMerge:
    """The merges of one view of the upstream table (it remembers whether the table was born empty)."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        batch: BatchTable,
        *,
        lease_s: float,
        lease_wait_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.client = client
        self.table = table
        self.batch = batch
        self.lease_s = lease_s
        self.lease_wait_s = lease_wait_s
        self.clock = clock
        self._born_empty: bool | None = None

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
        stored = {} if fresh else read_digests(self.batch, digests)
        changed: list[dict[str, Any]] = [
            {"pk": {"S": k}, "v": {"S": v}}
            for digest in digests
            for k, v in rewritten(digest, stored.get(digest), contributions[digest], open_releases)
        ]

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
                    not_a_digest(i["pk"]["S"]) for i in resp.get("Items", [])
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

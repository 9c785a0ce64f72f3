"""The upstream table's writer lease: one merge writes at a time (see ``store.upstream`` for why)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# the writer lease's item; not a digest, so dumps and lookups never see it
WRITER_LEASE = "lease#digests"
_LEASE_KEY = {"pk": {"S": WRITER_LEASE}}


class LeaseBusy(RuntimeError):
    """Another writer held the lease for as long as this one would wait (retry later)."""


class LeaseLost(RuntimeError):
    """The lease ran out under this writer (it stalled past the lease time): stop writing, retry later."""


@dataclass
class WriterLease:
    """The upstream table's writer lease: held by one merge at a time, renewed while held.

    The item keeps ``owner`` and ``expires`` (epoch seconds) while held, and ``wrote`` once any merge
    has written a digest item: a merge into a table no merge ever wrote to needs to read nothing first.
    A writer that dies holding it (a Lambda timeout) blocks the others for at most ``lease_s``.
    """

    client: DynamoDBClient
    table: str
    lease_s: float = 60.0
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    fresh: bool = False  # no digest item was ever written: nothing to read before writing
    marked: bool = False  # the item says ``wrote`` already
    _lost: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)

    def try_acquire(self) -> bool:
        now = time.time()
        try:
            resp = self.client.update_item(
                TableName=self.table,
                Key=_LEASE_KEY,
                UpdateExpression="SET #o = :me, #e = :exp",
                ConditionExpression="attribute_not_exists(#o) OR #e < :now",
                ExpressionAttributeNames={"#o": "owner", "#e": "expires"},
                ExpressionAttributeValues={
                    ":me": {"S": self.owner},
                    ":exp": {"N": str(now + self.lease_s)},
                    ":now": {"N": str(now)},
                },
                ReturnValues="ALL_OLD",
            )
        except ClientError as e:
            if e.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        old = resp.get("Attributes") or {}
        self.marked = "wrote" in old
        # an item without ``wrote`` was made by a merge that wrote nothing, or by none (an older table)
        self.fresh = not self.marked and self._only_the_lease()
        return True

    def _only_the_lease(self) -> bool:
        """Whether the table holds nothing but this item (a table older than the lease may hold digests)."""
        resp = self.client.scan(TableName=self.table, Limit=2, ProjectionExpression="pk")
        items = resp.get("Items", [])
        return "LastEvaluatedKey" not in resp and all(i["pk"]["S"] == WRITER_LEASE for i in items)

    def _update(self, expression: str, values: dict[str, Any], *, names: dict[str, str]) -> bool:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=_LEASE_KEY,
                UpdateExpression=expression,
                ConditionExpression="#o = :me",
                ExpressionAttributeNames={"#o": "owner", **names},
                ExpressionAttributeValues={":me": {"S": self.owner}, **values},
            )
        except ClientError as e:
            if e.response["Error"]["Code"] == "ConditionalCheckFailedException":
                self._lost.set()
                return False
            raise
        return True

    def renew(self) -> bool:
        return self._update(
            "SET #e = :exp", {":exp": {"N": str(time.time() + self.lease_s)}}, names={"#e": "expires"}
        )

    def mark_written(self) -> None:
        """Said before the first digest item is written, so that a merge that dies half-way still counts."""
        if self.marked:
            return
        if not self._update("SET #w = :t", {":t": {"BOOL": True}}, names={"#w": "wrote"}):
            raise LeaseLost(f"the writer lease of {self.table} ran out")
        self.marked = True

    def check(self) -> None:
        if self._lost.is_set():
            raise LeaseLost(f"the writer lease of {self.table} ran out")

    def release(self) -> None:
        self._update("REMOVE #o, #e", {}, names={"#e": "expires"})

    @contextmanager
    def held(self, *, wait_s: float = 300.0) -> Iterator[WriterLease]:
        """Wait up to ``wait_s`` for the lease (LeaseBusy past that), renew it while the block runs."""
        deadline = time.monotonic() + wait_s
        attempt = 0
        while not self.try_acquire():
            if time.monotonic() > deadline:
                raise LeaseBusy(f"the writer lease of {self.table} stayed taken for {wait_s:.0f} s")
            time.sleep(min(2.0, 0.05 * 2**attempt))
            attempt += 1
        beat = threading.Thread(target=self._heartbeat, name="writer-lease", daemon=True)
        beat.start()
        try:
            yield self
        finally:
            self._stop.set()
            beat.join()
            if not self._lost.is_set():
                self.release()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            if not self.renew():
                return

"""Writer leases of the upstream table: one per shard of the digest items (see ``store.upstream``), each
held by one merge at a time for as long as it takes to read, widen and write that shard's items."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# the writer lease's item of the earlier design (one for the whole table); shard leases are
# ``lease#digests#<n>``. Not digests, so dumps and lookups never see them.
WRITER_LEASE = "lease#digests"


class LeaseBusy(RuntimeError):
    """Another writer held the lease for as long as this one would wait (retry later)."""


class LeaseLost(RuntimeError):
    """The lease ran out under this writer (it stalled past the lease time): stop writing, retry later."""


@dataclass
class WriterLease:
    """A writer lease (the item ``key``): held by one merge at a time, renewed while held.

    The item keeps ``owner`` and ``expires`` (epoch seconds by ``clock``) while held, and ``wrote`` once
    a merge has written a digest item under it: a shard no merge ever wrote to needs no read first.
    A writer that dies holding it (a Lambda timeout) blocks the others for at most ``lease_s``.
    """

    client: DynamoDBClient
    table: str
    lease_s: float = 60.0
    key: str = WRITER_LEASE
    clock: Callable[[], float] = time.time
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    fresh: bool = False  # no digest item was ever written: nothing to read before writing
    marked: bool = False  # the item says ``wrote`` already
    _lost: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def _key(self) -> dict[str, Any]:
        return {"pk": {"S": self.key}}

    def try_acquire(self) -> bool:
        now = self.clock()
        try:
            resp = self.client.update_item(
                TableName=self.table,
                Key=self._key,
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
        # without ``wrote``: no merge wrote under it (whether the table was empty then, the caller knows)
        self.fresh = not self.marked
        return True

    def _update(self, expression: str, values: dict[str, Any], *, names: dict[str, str]) -> bool:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self._key,
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
            "SET #e = :exp", {":exp": {"N": str(self.clock() + self.lease_s)}}, names={"#e": "expires"}
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
        with self.renewing():
            yield self

    @contextmanager
    def renewing(self) -> Iterator[WriterLease]:
        """Renew the lease (acquired) while the block runs, and let it go at the end."""
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

"""DynamoDB batch access with backoff, bounded concurrency and call accounting.

pynamodb models define the item schemas (see ``upstream_db`` and ``scans``); its own batch helpers
retry UnprocessedKeys in a tight loop and one call at a time, so the batch paths are here.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dropscan.forked import Forked, usable_cpus

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

BATCH_GET_LIMIT = 100
BATCH_WRITE_LIMIT = 25
MAX_ATTEMPTS = 10

RawItem = dict[str, Any]


class BatchError(RuntimeError):
    """A batch call still had unprocessed keys or items after every retry."""


@dataclass
class CallStats:
    """Counts of DynamoDB work, reported in manifests and benchmarks."""

    batch_get_calls: int = 0
    batch_write_calls: int = 0
    keys_requested: int = 0
    items_written: int = 0
    retries: int = 0
    consumed_rcu: float = 0.0
    consumed_wcu: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, value in deltas.items():
                setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, float]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


def _get_pages(
    get: Callable[[Sequence[RawItem]], list[RawItem]], pages: list[Sequence[RawItem]], stats: CallStats
) -> tuple[list[RawItem], dict[str, float]]:
    """(items, call counts) of ``pages``, in a forked child: its counts go back to the parent's stats."""
    before = stats.as_dict()
    items = [item for page in pages for item in get(page)]
    return items, {k: v - before[k] for k, v in stats.as_dict().items()}


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def _backoff(attempt: int) -> None:
    # full jitter; the first retry waits at most 50 ms
    time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))


def _consumed(resp: dict[str, Any]) -> float:
    return float(sum(c.get("CapacityUnits", 0.0) for c in resp.get("ConsumedCapacity", [])))


class BatchTable:
    """BatchGetItem/BatchWriteItem on one table, several calls in flight."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        *,
        concurrency: int = 4,
        stats: CallStats | None = None,
        forked_reads: bool = False,
    ) -> None:
        """``forked_reads``: for a table served inside this process (the embedded stack's moto), where
        threads wait on one GIL: :meth:`get_many` gives half its calls to a child forked at the call."""
        self.client = client
        self.table = table
        self.concurrency = concurrency
        self.stats = stats or CallStats()
        self.forked_reads = forked_reads

    def get_many(
        self,
        keys: Sequence[RawItem],
        *,
        projection: Mapping[str, Any] | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> list[RawItem]:
        """Every existing item among ``keys`` (each a raw key map); order not kept.

        ``projection``: ProjectionExpression (and ExpressionAttributeNames) of what to read of each.
        ``meanwhile``: the caller's own work, run here while the calls are in flight (see
        :meth:`_get_meanwhile`); it returns once both are done, and raises what either raised.
        """
        pages = list(_chunks(keys, BATCH_GET_LIMIT))
        get = functools.partial(self._get_page, projection=projection or {})
        if meanwhile is not None:
            return self._get_meanwhile(pages, get, meanwhile)
        if len(pages) > 1 and self.forked_reads and usable_cpus() > 1:
            return self._get_forked(pages, get)
        if len(pages) <= 1 or self.concurrency <= 1:
            return [item for page in pages for item in get(page)]
        with ThreadPoolExecutor(self.concurrency) as pool:
            return [item for found in pool.map(get, pages) for item in found]

    def _get_forked(
        self, pages: list[Sequence[RawItem]], get: Callable[[Sequence[RawItem]], list[RawItem]]
    ) -> list[RawItem]:
        """Half the pages read by a child forked now, the other half here, at once on two cores.

        The child reads the table as it was at the fork, a consistent snapshot taken during the call:
        what BatchGetItem promises (its reads are eventually consistent) and more. It never writes.
        """
        theirs, mine = pages[: len(pages) // 2], pages[len(pages) // 2 :]
        with Forked(_get_pages, get, theirs, self.stats) as child:
            found = [item for page in mine for item in get(page)]
            items, counts = child.result()
        self.stats.add(**counts)
        return found + items

    def _get_meanwhile(
        self,
        pages: list[Sequence[RawItem]],
        get: Callable[[Sequence[RawItem]], list[RawItem]],
        meanwhile: Callable[[], None],
    ) -> list[RawItem]:
        """Every page read beside ``meanwhile``: by a thread pool (on AWS the calls wait on the network
        while ``meanwhile`` runs), or, with ``forked_reads``, half of them by a child forked first (moto
        answers in this process, under its GIL) and the other half here once ``meanwhile`` is done."""
        if self.forked_reads and len(pages) > 1 and usable_cpus() > 1:
            theirs, mine = pages[: len(pages) // 2], pages[len(pages) // 2 :]
            with Forked(_get_pages, get, theirs, self.stats) as child:
                meanwhile()
                found = [item for page in mine for item in get(page)]
                items, counts = child.result()
            self.stats.add(**counts)
            return found + items
        with ThreadPoolExecutor(max(1, self.concurrency)) as pool:
            pending = [pool.submit(get, page) for page in pages]
            meanwhile()
            return [item for f in pending for item in f.result()]

    def _get_page(self, keys: Sequence[RawItem], projection: Mapping[str, Any]) -> list[RawItem]:
        found: list[RawItem] = []
        pending: list[RawItem] = list(keys)
        for attempt in range(MAX_ATTEMPTS):
            request: Any = {"Keys": pending, **projection}
            resp: dict[str, Any] = dict(
                self.client.batch_get_item(RequestItems={self.table: request}, ReturnConsumedCapacity="TOTAL")
            )
            self.stats.add(batch_get_calls=1, keys_requested=len(pending), consumed_rcu=_consumed(resp))
            found.extend(resp.get("Responses", {}).get(self.table, []))
            pending = resp.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", [])
            if not pending:
                return found
            self.stats.add(retries=1)
            _backoff(attempt)
        raise BatchError(f"{len(pending)} keys of {self.table} still unprocessed after {MAX_ATTEMPTS} tries")

    def put_many(self, items: Sequence[RawItem], *, before_page: Callable[[], None] | None = None) -> None:
        """Write ``items``; ``before_page`` runs before each page (a lease check: it raises to stop)."""
        pages = list(_chunks(items, BATCH_WRITE_LIMIT))
        put = functools.partial(self._put_page, before=before_page)
        if len(pages) <= 1 or self.concurrency <= 1:
            for page in pages:
                put(page)
            return
        with ThreadPoolExecutor(self.concurrency) as pool:
            list(pool.map(put, pages))

    def delete_many(self, keys: Sequence[RawItem]) -> None:
        for page in _chunks(keys, BATCH_WRITE_LIMIT):
            self._write_page([{"DeleteRequest": {"Key": key}} for key in page])

    def _put_page(self, items: Sequence[RawItem], before: Callable[[], None] | None = None) -> None:
        if before is not None:
            before()
        self._write_page([{"PutRequest": {"Item": item}} for item in items])

    def _write_page(self, requests: list[Any]) -> None:
        pending = requests
        for attempt in range(MAX_ATTEMPTS):
            resp: dict[str, Any] = dict(
                self.client.batch_write_item(
                    RequestItems={self.table: pending}, ReturnConsumedCapacity="TOTAL"
                )
            )
            self.stats.add(batch_write_calls=1, items_written=len(pending), consumed_wcu=_consumed(resp))
            pending = resp.get("UnprocessedItems", {}).get(self.table, [])
            if not pending:
                return
            self.stats.add(retries=1)
            _backoff(attempt)
        raise BatchError(f"{len(pending)} items of {self.table} still unwritten after {MAX_ATTEMPTS} tries")

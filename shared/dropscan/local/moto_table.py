"""The embedded stack's own storage: batches of writes into moto's table model, and its items out.

The CLI's batch writes to the embedded stack's upstream table (loading the data dir's database,
``ingest``, ``ingest-git``, ``db import``) go straight into moto's DynamoDB model rather than through
BatchWriteItem answered in this process: six times fewer seconds per item, the same items (moto's model
checks each as the API does, 400 KB included), and the same pages and counts in the run's statistics.
Saving reads the items back from the model, not through a point-in-time export. Everything else, and
everything the functions do, goes through boto3 (docs/design.md, "Local stack").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends

from dropscan.local.deploy import REGION
from dropscan.store.batch import BatchTable


def _table(name: str) -> Any:
    return dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION].get_table(name)


class MotoBatchTable(BatchTable):
    """A :class:`BatchTable` whose pages of writes go into moto's table model of the embedded stack."""

    def _write_page(self, requests: list[Any]) -> None:
        puts = [r["PutRequest"]["Item"] for r in requests if "PutRequest" in r]
        if len(puts) < len(requests):  # deletes are rare here: through the API, as the service does
            super()._write_page(requests)
            return
        table = _table(self.table)
        for item in puts:
            table.put_item(item)
        self.stats.add(batch_write_calls=1, items_written=len(puts))


def moto_items(table: str) -> Iterator[dict[str, Any]]:
    """Every item of the embedded stack's ``table``, as a Scan returns them (DynamoDB JSON)."""
    for item in list(_table(table).all_items()):
        yield item.to_json()["Attributes"]

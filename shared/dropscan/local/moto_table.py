"""The embedded stack's own persistence: its data dir's database into and out of moto's table model.

Loading a saved database and saving it are the local stack's storage, not calls the service makes:
they go straight to moto's DynamoDB model rather than through the API (six times fewer seconds per item
than BatchWriteItem answered in this process, and no point-in-time export to read back). Everything
the stages and the CLI ask of the table still goes through boto3 (docs/design.md, "Local stack").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends

from dropscan.local.stack import REGION
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

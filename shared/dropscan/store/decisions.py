"""The decisions table: auditors' decisions keyed by what they cover (``subject``) and ``scope``.

``subject`` is ``sha256:<hex>`` for a decision on a file's content; ``scope`` is ``global`` or
``supplier:<name>``. A scan reads, for each distinct digest of its review set, the two keys that can
apply (global and its own supplier's) with BatchGetItem: 50 digests a call, never another supplier's
key. Writes come from auditors (the CLI, with ComplianceRole), never from the functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dropscan.models import Decision, content_subject, scope_key
from dropscan.store.batch import BatchTable, CallStats, RawItem

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

BY_SCOPE = "by-scope"


def to_item(d: Decision) -> RawItem:
    """The key, the verdict (to filter on in the console), and the whole decision as one JSON string
    ``d``, which is all a scan reads (a projection): moto's response serializer costs per attribute
    value, and a kernel's 3,022 decisions as eleven attributes each took 7.6 s to read on the embedded
    stack."""
    return {
        "subject": {"S": d.subject},
        "scope": {"S": d.scope_key},
        "verdict": {"S": d.verdict},
        "d": {"S": json.dumps(d.to_json(), separators=(",", ":"))},
    }


def from_item(item: RawItem) -> Decision:
    return Decision.from_json(json.loads(item["d"]["S"]))


ONLY_D = {"ProjectionExpression": "d"}


def _key(subject: str, scope: str) -> RawItem:
    return {"subject": {"S": subject}, "scope": {"S": scope}}


class DecisionStore:
    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        *,
        concurrency: int = 1,
        stats: CallStats | None = None,
        forked_reads: bool = False,
    ) -> None:
        self.client = client
        self.table = table
        self.batch = BatchTable(
            client, table, concurrency=concurrency, stats=stats, forked_reads=forked_reads
        )

    @property
    def stats(self) -> CallStats:
        return self.batch.stats

    def for_contents(
        self, digests: Iterable[str], supplier: str, *, meanwhile: Callable[[], None] | None = None
    ) -> list[Decision]:
        """The decisions that may apply to files of ``supplier`` with these SHA-256s: global ones and
        the supplier's own (``audit.decision_rules.choose`` picks between them). ``meanwhile``: the
        caller's work to run while they are read (``BatchTable.get_many``)."""
        scopes = ("global", scope_key("supplier", supplier))
        keys = [_key(content_subject(d), s) for d in sorted(set(digests)) for s in scopes]
        if not keys:
            if meanwhile is not None:
                meanwhile()
            return []
        return [from_item(i) for i in self.batch.get_many(keys, projection=ONLY_D, meanwhile=meanwhile)]

    def for_subjects(self, subjects: Iterable[str], supplier: str) -> list[Decision]:
        """As :meth:`for_contents`, for subjects named whole (``hunk:<fingerprint>``)."""
        scopes = ("global", scope_key("supplier", supplier))
        keys = [_key(x, s) for x in sorted(set(subjects)) for s in scopes]
        return [from_item(i) for i in self.batch.get_many(keys, projection=ONLY_D)] if keys else []

    def existing(self, decisions: Sequence[Decision]) -> dict[tuple[str, str], Decision]:
        """The stored decisions under the keys of ``decisions``, by (subject, scope key)."""
        keys = {(d.subject, d.scope_key): _key(d.subject, d.scope_key) for d in decisions}
        found = (from_item(i) for i in self.batch.get_many(list(keys.values()), projection=ONLY_D))
        return {(d.subject, d.scope_key): d for d in found}

    def put(self, decisions: Sequence[Decision]) -> None:
        self.batch.put_many([to_item(d) for d in decisions])

    def all(self) -> Iterator[Decision]:
        """Every decision (a Scan: exports and the embedded stack's save)."""
        kwargs: dict[str, Any] = {"TableName": self.table}
        while True:
            resp = self.client.scan(**kwargs)
            # the review desk's history rows share the table (dropscan.store.desk): not decisions
            items = resp.get("Items", [])
            yield from (from_item(i) for i in items if not i["subject"]["S"].startswith("log:"))
            if "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def of_scope(self, scope: str, supplier: str = "") -> Iterator[Decision]:
        """The decisions of one scope (``global``, or one supplier's), through the by-scope index."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": BY_SCOPE,
            "KeyConditionExpression": "#s = :s",
            "ExpressionAttributeNames": {"#s": "scope"},
            "ExpressionAttributeValues": {":s": {"S": scope_key(scope, supplier)}},
        }
        while True:
            resp = self.client.query(**kwargs)
            yield from (from_item(i) for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

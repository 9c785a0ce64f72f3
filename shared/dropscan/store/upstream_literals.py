"""Upstream releases' distinctive string literals, in the upstream table beside their digests.

One item per literal, shared by every release that has it: ``pk`` ``lit#<first 128 bits of the
literal's SHA-256, hex>``, ``r`` the string set of ``<package>@<version>`` of the releases it was
recorded for. A release is added by read, add, write in batches (BatchGetItem, BatchWriteItem: 2,000
literals are 20 + 80 calls, where an ``UpdateItem ADD`` each took 3.3 s on the embedded stack) under
one writer lease, ``lease#literals`` (``store.lease``): two ingests sharing a literal would otherwise
lose one's release; recording 2,000 takes a fraction of a second, so they queue little. A re-ingest
writes nothing. An item grows by about 20 bytes a release that has the literal (1,000 releases: 20 KB,
far below DynamoDB's 400 KB). Dumps (``store.dump``) carry the items as ``{"lit": key, "r": [...]}``
lines. What each release recorded (how many, its licence) is in its ingest report
(``store.releases``; a dump's release line carries it), which :meth:`UpstreamLiterals.release` reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dropscan.store.batch import BatchTable, CallStats
from dropscan.store.lease import WriterLease

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from dropscan.store.releases import Releases

LITERAL_PREFIX = "lit#"
LITERALS_LEASE = "lease#literals"


def literal_key(literal: str) -> str:
    """The item key of a literal: its SHA-256's first 128 bits (no collision among billions)."""
    return LITERAL_PREFIX + hashlib.sha256(literal.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def release_id(package: str, version: str) -> str:
    return f"{package}@{version}"


@dataclass(frozen=True, slots=True)
class ReleaseLiterals:
    """What an ingest recorded of one release: how many literals, and the release's licence."""

    package: str
    version: str
    recorded: int
    license: str | None


class UpstreamLiterals:
    """Record a release's literals; tell which releases hold which literals (``firmware_check``'s
    ``upstream``: the stage asks for releases by literal, never for DynamoDB calls)."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        releases: Releases | None = None,
        *,
        concurrency: int = 4,
        stats: CallStats | None = None,
        lease_s: float = 60.0,
        lease_wait_s: float = 300.0,
    ) -> None:
        self.client = client
        self.table = table
        self.releases = releases
        self.concurrency = concurrency
        self.lease_s, self.lease_wait_s = lease_s, lease_wait_s
        self.stats = stats or CallStats()
        self._reports: dict[tuple[str, str], ReleaseLiterals | None] = {}
        self.batch = BatchTable(client, table, concurrency=concurrency, stats=self.stats)

    def record(self, package: str, version: str, literals: Iterable[str]) -> int:
        """Add the release to each literal's item (those that lack it); returns how many items changed."""
        rid = release_id(package, version)
        keys = {literal_key(lit) for lit in literals}
        seen = self._holding_keys(keys)
        if all(rid in seen.get(k, ()) for k in keys):
            return 0  # a re-ingest: no lease taken, nothing written
        lease = WriterLease(self.client, self.table, self.lease_s, key=LITERALS_LEASE)
        with lease.held(wait_s=self.lease_wait_s):
            held = self._holding_keys(keys)  # again, under the lease: what another ingest wrote counts
            todo = sorted(k for k in keys if rid not in held.get(k, ()))
            items = [{"pk": {"S": k}, "r": {"SS": sorted(held.get(k, frozenset()) | {rid})}} for k in todo]
            self.batch.put_many(items, before_page=lease.check)
        return len(todo)

    def merge(self, items: Mapping[str, Iterable[str]]) -> int:
        """Literal items as a dump has them (key -> releases) into the table, each the union with what it
        holds (``store.dump``'s import); returns how many items changed."""
        lease = WriterLease(self.client, self.table, self.lease_s, key=LITERALS_LEASE)
        with lease.held(wait_s=self.lease_wait_s):
            held = self._holding_keys(items)
            changed = {k: held.get(k, frozenset()) | set(r) for k, r in items.items()}
            out = [
                {"pk": {"S": k}, "r": {"SS": sorted(r)}} for k, r in changed.items() if r and r != held.get(k)
            ]
            self.batch.put_many(out, before_page=lease.check)
        return len(out)

    def holding(self, literals: Iterable[str]) -> dict[str, frozenset[str]]:
        """Each of ``literals`` that some release recorded -> those releases (``package@version``)."""
        by_key: dict[str, list[str]] = {}
        for lit in set(literals):
            by_key.setdefault(literal_key(lit), []).append(lit)
        found = self._holding_keys(by_key)
        return {lit: releases for key, releases in found.items() for lit in by_key[key]}

    def release(self, package: str, version: str) -> ReleaseLiterals | None:
        """What the release's ingest recorded (None: no report, or one from before literals)."""
        if self.releases is None:
            return None
        if (package, version) not in self._reports:
            report = self.releases.report(package, version)
            self._reports[package, version] = _of_report(package, version, report) if report else None
        return self._reports[package, version]

    def _holding_keys(self, keys: Iterable[str]) -> dict[str, frozenset[str]]:
        raw = [{"pk": {"S": k}} for k in sorted(keys)]
        items = self.batch.get_many(
            raw, projection={"ProjectionExpression": "pk, r"}
        ) if raw else []  # fmt: skip
        return {i["pk"]["S"]: frozenset(i.get("r", {}).get("SS", ())) for i in items}


def _of_report(package: str, version: str, report: Mapping[str, object]) -> ReleaseLiterals | None:
    literals = report.get("literals")
    if not isinstance(literals, Mapping):
        return None
    licence = report.get("license")
    spdx = licence.get("license") if isinstance(licence, Mapping) else None
    return ReleaseLiterals(package, version, int(literals.get("recorded") or 0), str(spdx) if spdx else None)

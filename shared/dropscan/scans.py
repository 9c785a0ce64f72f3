"""The scans table: one item per upload, counting its chunks so that exactly one stage finalises it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from pynamodb.attributes import MapAttribute, NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.exceptions import PutError, UpdateError
from pynamodb.expressions.update import Action
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from dropscan.manifest import TERMINAL

OPEN = "open"  # the value of ``pending`` while a scan has no manifest


class OpenScans(GlobalSecondaryIndex["ScanItem"]):
    """Sparse: only scans still holding ``pending``, by creation time (the sweeper's query)."""

    class Meta:
        index_name = "open-scans"
        projection = KeysOnlyProjection()

    pending = UnicodeAttribute(hash_key=True)
    created_at = UnicodeAttribute(range_key=True)


class ScanItem(Model):
    class Meta:
        table_name = "scans"  # replaced per stack by bind()

    scan_id = UnicodeAttribute(hash_key=True)
    supplier = UnicodeAttribute()
    bucket = UnicodeAttribute()
    key = UnicodeAttribute()
    etag = UnicodeAttribute(null=True)
    version_id = UnicodeAttribute(null=True)
    status = UnicodeAttribute(default="scanning")
    reason = UnicodeAttribute(null=True)
    source_size = NumberAttribute(null=True)
    source_sha256 = UnicodeAttribute(null=True)
    chunks_total = NumberAttribute(null=True)
    unpack_seconds = NumberAttribute(null=True)
    chunks_done = NumberAttribute(default=0)
    done_chunks = UnicodeSetAttribute(null=True)
    metadata = MapAttribute[str, Any](null=True)  # the upload's x-amz-meta-* (declared components, arch)
    created_at = UnicodeAttribute()
    finalized_at = UnicodeAttribute(null=True)
    finalizer = UnicodeAttribute(null=True)  # the finalize message that claimed the scan
    pending = UnicodeAttribute(null=True)  # OPEN until the scan has its manifest (set_status terminal)
    open_scans = OpenScans()


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@cache
def _bound(table: str, region: str, host: str | None) -> type[ScanItem]:
    meta = type("Meta", (), {"table_name": table, "region": region, "host": host, "max_retry_attempts": 8})
    return type("ScanItem", (ScanItem,), {"Meta": meta, "__module__": __name__})


@dataclass(frozen=True, slots=True)
class Upload:
    """The object a scan is about."""

    bucket: str
    key: str
    etag: str | None
    version_id: str | None
    supplier: str
    metadata: dict[str, str]


class ScanStore:
    def __init__(self, table: str, *, region: str, host: str | None = None) -> None:
        self.model = _bound(table, region, host)

    def get(self, scan_id: str) -> ScanItem | None:
        try:
            return self.model.get(scan_id, consistent_read=True)
        except self.model.DoesNotExist:
            return None

    def begin(self, scan_id: str, upload: Upload) -> ScanItem | None:
        """Create the scan item; None when it already exists (a redelivered or repeated upload)."""
        item = self.model(
            scan_id,
            supplier=upload.supplier,
            bucket=upload.bucket,
            key=upload.key,
            etag=upload.etag,
            version_id=upload.version_id,
            metadata=upload.metadata or None,
            created_at=now(),
            pending=OPEN,
        )
        try:
            item.save(condition=self.model.scan_id.does_not_exist())
        except PutError as e:
            if e.cause_response_code == "ConditionalCheckFailedException":
                return None
            raise
        return item

    def set_total(
        self,
        scan_id: str,
        total: int,
        *,
        size: int,
        sha256: str,
        reason: str | None,
        status: str,
        seconds: float | None = None,
    ) -> bool:
        """Record the chunk count once unpack is done; True if every chunk was already counted."""
        item = self.model(scan_id)
        actions: list[Action] = [
            self.model.chunks_total.set(total),
            self.model.source_size.set(size),
            self.model.source_sha256.set(sha256),
            self.model.status.set(status),
        ]
        if reason:
            actions.append(self.model.reason.set(reason))
        if seconds is not None:
            actions.append(self.model.unpack_seconds.set(round(seconds, 3)))
        try:
            # a scan finalised meanwhile (the sweeper gave up on it) keeps what its manifest says
            item.update(actions=actions, condition=self.model.finalized_at.does_not_exist())
        except UpdateError as e:
            if e.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return int(item.chunks_done or 0) >= total

    def chunk_done(self, scan_id: str, seq: int) -> bool:
        """Count chunk ``seq`` once; True for the one call that counted the last chunk."""
        item = self.model(scan_id)
        tag = str(seq)
        try:
            item.update(
                actions=[self.model.chunks_done.add(1), self.model.done_chunks.add({tag})],
                condition=~self.model.done_chunks.contains(tag),
            )
        except UpdateError as e:
            if e.cause_response_code != "ConditionalCheckFailedException":
                raise
            # counted before (a retried message): its earlier run may have died before triggering
            current = self.get(scan_id)
            return bool(current and current.finalized_at is None and _all_done(current))
        return _all_done(item)

    def claim_finalize(self, scan_id: str, token: str) -> bool:
        """True for exactly one finalize message (``token``), also when that message is redelivered."""
        item = self.model(scan_id)
        try:
            item.update(
                actions=[self.model.finalized_at.set(now()), self.model.finalizer.set(token)],
                condition=self.model.finalized_at.does_not_exist() | (self.model.finalizer == token),
            )
        except UpdateError as e:
            if e.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def set_status(self, scan_id: str, status: str, reason: str | None = None) -> None:
        item = self.model(scan_id)
        actions: list[Action] = [self.model.status.set(status)]
        if reason:
            actions.append(self.model.reason.set(reason))
        if status in TERMINAL:
            actions.append(self.model.pending.remove())  # out of the open-scans index
        item.update(actions=actions)

    def claim_given_up(self, scan_id: str, token: str, reason: str, *, stale_before: str) -> bool:
        """Claim a scan that will not finish, as ``failed`` with ``reason``; True if this call holds it.

        Wins over no claim, over its own earlier claim, and over a finalize claim made before
        ``stale_before`` (that invocation is long dead); loses to a live finalize and to a written manifest.
        """
        item = self.model(scan_id)
        claimable = (
            self.model.finalized_at.does_not_exist()
            | (self.model.finalizer == token)
            | (self.model.finalized_at < stale_before)
        )
        try:
            item.update(
                actions=[
                    self.model.finalized_at.set(now()),
                    self.model.finalizer.set(token),
                    self.model.status.set("failed"),
                    self.model.reason.set(reason),
                ],
                condition=self.model.pending.exists() & claimable,
            )
        except UpdateError as e:
            if e.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def open_before(self, cutoff: str) -> Iterator[str]:
        """Ids of the scans without a manifest created before ``cutoff`` (ISO time), oldest first."""
        for item in self.model.open_scans.query(OPEN, self.model.created_at < cutoff):
            yield item.scan_id


def _all_done(item: ScanItem) -> bool:
    return item.chunks_total is not None and int(item.chunks_done or 0) >= int(item.chunks_total)

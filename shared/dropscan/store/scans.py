"""The scans table: one item per upload, counting its parts and chunks so that exactly one stage finalises it.

A scan is unpacked by one or more *parts*: the upload itself (``ROOT``), each nested archive fanned out to
an invocation of its own (``<parent>.<member>``), each resumed segment of a split tar or range of a
split zip (``<part>+<k>``). Part ids are deterministic, so a redelivered part message is the same part.
A part is *opened* (added to ``parts_open``) before its message is sent and *closed* once (added to
``parts_closed``, its chunk count added to ``chunks_total``); the scan is complete when every opened
part is closed and ``chunks_done`` has reached ``chunks_total``. Each of those updates is conditional on
the part or chunk not being counted yet, and DynamoDB serialises them: exactly one observes completion.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from typing import Any

from pynamodb.attributes import MapAttribute, NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.exceptions import PutError, UpdateError
from pynamodb.expressions.update import Action
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from dropscan.keys import ROOT, is_upload_part
from dropscan.models import TERMINAL, Scan, Upload

OPEN = "open"  # the value of ``pending`` while a scan has no manifest


class OpenScans(GlobalSecondaryIndex["ScanItem"]):
    """Sparse: only scans still holding ``pending``, by creation time (the sweeper's query)."""

    class Meta:
        index_name = "open-scans"
        projection = KeysOnlyProjection()

    pending = UnicodeAttribute(hash_key=True)
    created_at = UnicodeAttribute(range_key=True)


class ProductScans(GlobalSecondaryIndex["ScanItem"]):
    """Every scan of a supplier's product (``product_key``, set by finalize), by creation time."""

    class Meta:
        index_name = "product-scans"
        projection = AllProjection()

    product_key = UnicodeAttribute(hash_key=True)
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
    parts_open = UnicodeSetAttribute(null=True)  # absent on scans of the earlier layout (one unpack)
    parts_closed = UnicodeSetAttribute(null=True)
    unpacked_bytes = NumberAttribute(null=True)  # member bytes read, every part together
    members = NumberAttribute(null=True)  # archive members seen, every part together
    part_reason = UnicodeAttribute(null=True)  # why a part other than the root rejected the scan
    metadata = MapAttribute[str, Any](null=True)  # the upload's x-amz-meta-* (declared components, arch)
    created_at = UnicodeAttribute()
    finalized_at = UnicodeAttribute(null=True)
    finalizer = UnicodeAttribute(null=True)  # the finalize message that claimed the scan
    pending = UnicodeAttribute(null=True)  # OPEN until the scan has its manifest (set_status terminal)
    product = UnicodeAttribute(null=True)  # the product the drop is a release of (finalize)
    product_key = UnicodeAttribute(null=True)  # "<supplier>/<product>": the product-scans index
    finished_at = UnicodeAttribute(null=True)  # when its manifest was written
    outcome = MapAttribute[str, Any](null=True)  # verdict and counts of its manifest, for the history
    triage_parts = NumberAttribute(null=True)  # invocations triage was fanned out to
    triage_done = UnicodeSetAttribute(null=True)  # the triage parts counted done
    triage_assembler = UnicodeAttribute(null=True)  # the assemble message that claimed the triage
    # part -> {"members", "bytes"}: how far each part's walk has got, while it walks (report_unpacking)
    unpacking = MapAttribute[str, Any](null=True)
    open_scans = OpenScans()
    product_scans = ProductScans()


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@cache
def _bound(table: str, region: str, host: str | None) -> type[ScanItem]:
    meta = type("Meta", (), {"table_name": table, "region": region, "host": host, "max_retry_attempts": 8})
    return type("ScanItem", (ScanItem,), {"Meta": meta, "__module__": __name__})


class ScanStore:
    def __init__(self, table: str, *, region: str, host: str | None = None) -> None:
        self.model = _bound(table, region, host)

    def get(self, scan_id: str) -> Scan | None:
        try:
            return _scan_of(self.model.get(scan_id, consistent_read=True))
        except self.model.DoesNotExist:
            return None

    def begin(self, scan_id: str, upload: Upload) -> Scan | None:
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
            parts_open={ROOT},
            unpacking={},  # there to be SET into: a document path needs its parent map
        )
        try:
            item.save(condition=self.model.scan_id.does_not_exist())
        except PutError as e:
            if e.cause_response_code == "ConditionalCheckFailedException":
                return None
            raise
        return _scan_of(item)

    def open_part(self, scan_id: str, part: str) -> bool:
        """Record ``part`` as opened, before its message is sent; False if it was opened before (a redo)."""
        item = self.model(scan_id)
        try:
            item.update(
                actions=[self.model.parts_open.add({part})], condition=~self.model.parts_open.contains(part)
            )
        except UpdateError as e:
            if e.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def report_unpacking(self, scan_id: str, part: str, *, members: int, unpacked: int) -> bool:
        """Record how far ``part``'s walk has got (its own members and bytes, as its close will count
        them), for clients watching a long invocation; False once the part is closed or the scan
        finalised (or on a scan begun without the map), when reports are no use any more."""
        counts = {"members": members, "bytes": unpacked}
        try:
            self.model(scan_id).update(
                actions=[self.model.unpacking[part].set(counts)],
                condition=self.model.unpacking.exists()
                & ~self.model.parts_closed.contains(part)
                & self.model.finalized_at.does_not_exist(),
            )
        except UpdateError as e:
            if e.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def close_part(
        self,
        scan_id: str,
        part: str,
        chunks: int,
        *,
        unpacked: int = 0,
        members: int = 0,
        seconds: float | None = None,
        size: int | None = None,
        sha256: str | None = None,
        reason: str | None = None,
        status: str | None = None,
    ) -> bool:
        """Count ``part``'s chunks once; True for the one update after which the scan is complete.

        ``size`` and ``sha256`` are the upload's (its root part, or the segment that read it to the end);
        ``status`` and ``reason`` end the scan ``rejected`` or ``failed`` (the root part's own, or a
        limit of the whole upload tripped in another part: kept in ``part_reason``).
        """
        item = self.model(scan_id)
        actions: list[Action] = [
            self.model.chunks_total.add(chunks),
            self.model.parts_closed.add({part}),
            # the root part is opened by begin(); scans of the earlier layout never listed it
            self.model.parts_open.add({part}),
            self.model.unpacked_bytes.add(unpacked),
            self.model.members.add(members),
        ]
        if size is not None:
            actions.append(self.model.source_size.set(size))
        if sha256 is not None:
            actions.append(self.model.source_sha256.set(sha256))
        upload = is_upload_part(part)  # the upload itself, or a resumed segment of it
        if status is not None and status != "scanning" and upload:
            actions.append(self.model.status.set(status))
        if reason and upload:
            actions.append(self.model.reason.set(reason))
        elif reason:
            actions.append(self.model.part_reason.set(reason))
        if seconds is not None:
            actions.append(self.model.unpack_seconds.add(round(seconds, 3)))
        opened = self.model.parts_open.contains(part) if part != ROOT else self.model.scan_id.exists()
        try:
            # a scan finalised meanwhile (the sweeper gave up on it) keeps what its manifest says
            item.update(
                actions=actions,
                condition=opened
                & ~self.model.parts_closed.contains(part)
                & self.model.finalized_at.does_not_exist(),
            )
        except UpdateError as e:
            if e.cause_response_code != "ConditionalCheckFailedException":
                raise
            # closed before (a redelivered part message): its earlier run may have died before triggering
            current = self.get(scan_id)
            return bool(current and current.finalized_at is None and current.is_complete())
        return _scan_of(item).is_complete()

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
        """Close the root part, the whole unpack of a scan that was not fanned out or split."""
        return self.close_part(
            scan_id, ROOT, total, size=size, sha256=sha256, reason=reason, status=status, seconds=seconds
        )

    def chunk_done(self, scan_id: str, seq: int | str) -> bool:
        """Count chunk ``seq`` (a :func:`chunk_tag`) once; True for the one call that completed the scan."""
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
            return bool(current and current.finalized_at is None and current.is_complete())
        return _scan_of(item).is_complete()

    def set_triage_parts(self, scan_id: str, parts: int) -> None:
        """Record that triage was fanned out to ``parts`` invocations, before their messages are sent.

        The cut is deterministic, so a redelivered triage message sets the same count again."""
        self.model(scan_id).update(actions=[self.model.triage_parts.set(parts)])

    def triage_part_done(self, scan_id: str, part: int) -> bool:
        """Count triage part ``part`` once; True when every part is counted (the set is complete).

        A redelivered part is not counted twice (the set holds its id already) but is answered from the
        item again: its earlier run may have died between counting and handing the set on, and the
        assembler makes a second hand-over harmless (it stops at a written manifest).
        """
        item = self.model(scan_id)
        tag, done = str(part), self.model.triage_done
        try:
            item.update(actions=[done.add({tag})], condition=~done.contains(tag))
        except UpdateError as e:
            if e.cause_response_code != "ConditionalCheckFailedException":
                raise
            item.update(actions=[done.add({tag})])  # a no-op that returns the item
        total = int(item.triage_parts or 0)
        return total > 0 and len(item.triage_done or ()) == total

    def claim_assembly(self, scan_id: str, token: str) -> bool:
        """True for exactly one assemble message (``token``), also when that message is redelivered."""
        item = self.model(scan_id)
        try:
            item.update(
                actions=[self.model.triage_assembler.set(token)],
                condition=self.model.triage_assembler.does_not_exist()
                | (self.model.triage_assembler == token),
            )
        except UpdateError as e:
            if e.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

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

    def set_status(
        self, scan_id: str, status: str, reason: str | None = None, *, outcome: dict[str, Any] | None = None
    ) -> None:
        """``outcome``: the manifest's verdict and counts, kept for ``dropscan history``."""
        item = self.model(scan_id)
        actions: list[Action] = [self.model.status.set(status)]
        if reason:
            actions.append(self.model.reason.set(reason))
        if outcome is not None:
            actions += [self.model.outcome.set(outcome), self.model.finished_at.set(now())]
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

    def set_product(self, scan_id: str, key: str, product: str) -> None:
        """File the scan under its product (``key`` from :func:`dropscan.keys.product_key`)."""
        self.model(scan_id).update(actions=[self.model.product.set(product), self.model.product_key.set(key)])

    def of_product(self, key: str, *, before: str | None = None) -> Iterator[dict[str, Any]]:
        """The scans of a product, newest first (created at or before ``before``), as plain values."""
        condition = self.model.created_at <= before if before is not None else None
        for item in self.model.product_scans.query(key, condition, scan_index_forward=False):
            yield {
                "scan_id": item.scan_id,
                "supplier": item.supplier,
                "product": item.product,
                "key": item.key,
                "status": item.status,
                "reason": item.reason,
                "created_at": item.created_at,
                "finished_at": item.finished_at,
                "outcome": item.outcome.as_dict() if item.outcome else None,
            }

    def previous_complete(self, key: str, scan_id: str, created_at: str) -> dict[str, Any] | None:
        """The newest complete scan of a product created before ``scan_id`` (at ``created_at``)."""
        for s in self.of_product(key, before=created_at):
            if s["scan_id"] != scan_id and s["status"] == "complete" and s["finished_at"]:
                return s
        return None

    def open_before(self, cutoff: str) -> Iterator[str]:
        """Ids of the scans without a manifest created before ``cutoff`` (ISO time), oldest first."""
        for item in self.model.open_scans.query(OPEN, self.model.created_at < cutoff):
            yield item.scan_id


def _scan_of(item: ScanItem) -> Scan:
    """The plain value of an item: what the stages see (they never hold a pynamodb model)."""
    return Scan(
        scan_id=item.scan_id,
        supplier=item.supplier,
        bucket=item.bucket,
        key=item.key,
        created_at=item.created_at,
        etag=item.etag,
        version_id=item.version_id,
        status=item.status,
        reason=item.reason,
        source_size=None if item.source_size is None else int(item.source_size),
        source_sha256=item.source_sha256,
        chunks_total=None if item.chunks_total is None else int(item.chunks_total),
        unpack_seconds=float(item.unpack_seconds or 0.0),
        chunks_done=int(item.chunks_done or 0),
        done_chunks=frozenset(item.done_chunks or ()),
        parts_open=None if item.parts_open is None else frozenset(item.parts_open),
        parts_closed=frozenset(item.parts_closed or ()),
        unpacked_bytes=int(item.unpacked_bytes or 0),
        members=int(item.members or 0),
        part_reason=item.part_reason,
        metadata=dict(item.metadata.as_dict()) if item.metadata else {},
        finalized_at=item.finalized_at,
        finalizer=item.finalizer,
        pending=item.pending,
        triage_parts=int(item.triage_parts or 0),
        triage_done=frozenset(item.triage_done or ()),
        unpacking={
            part: (int(c["members"]), int(c["bytes"]))
            for part, c in (item.unpacking.as_dict() if item.unpacking else {}).items()
        },
    )

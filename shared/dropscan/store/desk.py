"""What the review desk reads and writes: a supplier's scans, a scan's manifest and report links, the
decisions on contents and the append-only history of the decisions taken on the desk.

The history shares the decisions table (no new table to grant, back up or export), in rows no scan
reads: ``subject`` ``log:sha256:<hex>`` (every decision on that content, ``scope`` ``<at>#<scope
key>#<by>#<id>``) and ``log:scan:<scan id>`` (the decisions taken while reviewing that scan,
``scope`` ``<at>#<sha256>#<scope key>#<id>``), each holding the whole decision as ``d``. A decision
row itself is replaced by a later one (what the next scan applies); its history rows are only added.
"""

from __future__ import annotations

import gc
import itertools
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from dropscan.audit.decision_rules import merge
from dropscan.keys import desk_index_keys, manifest_key
from dropscan.models import Decision
from dropscan.store.batch import RawItem
from dropscan.store.decisions import DecisionStore, from_item, to_item
from dropscan.store.scans import ScanStore
from dropscan.web.index import Built, Index, parse_line
from dropscan.web.index import build as build_index

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

LOG = "log:"
RESULTS = "results/"
#: indexes kept parsed between requests
INDEXES_KEPT = 4
LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScanEntry:
    """A scan as the desk lists it (the scans table's item, plain)."""

    scan_id: str
    supplier: str
    key: str
    status: str
    created_at: str
    product: str | None
    finished_at: str | None
    outcome: dict[str, Any]

    @property
    def drop(self) -> str:
        return self.key.rsplit("/", 1)[-1]


_taken = itertools.count()


def _taken_id() -> str:
    """A history row's id: time-ordered, so that two decisions in one second (``at``) sort in the order
    they were taken, then this process's count and a random part, so that two are never one row."""
    return f"{time.time_ns():020d}{next(_taken):08d}{uuid.uuid4().hex[:8]}"


class Desk:
    def __init__(
        self,
        s3: S3Client,
        dynamodb: DynamoDBClient,
        *,
        results_bucket: str,
        scans: ScanStore,
        decisions_table: str,
    ) -> None:
        self.s3 = s3
        self.dynamodb = dynamodb
        self.results_bucket = results_bucket
        self.scans = scans
        self.decisions = DecisionStore(dynamodb, decisions_table)
        self.decisions_table = decisions_table
        self._indexes: OrderedDict[str, Index] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ scans
    def scan(self, scan_id: str) -> ScanEntry | None:
        model = self.scans.model
        try:
            return _entry(model.get(scan_id))
        except model.DoesNotExist:
            return None

    def scans_of(self, supplier: str) -> list[ScanEntry]:
        """The supplier's scans that have results, newest first: the scan ids under its results prefix,
        then their items in batches."""
        ids: list[str] = []
        paginator = self.s3.get_paginator("list_objects_v2")
        prefix = f"{RESULTS}{supplier}/"
        for page in paginator.paginate(Bucket=self.results_bucket, Prefix=prefix, Delimiter="/"):
            ids += [p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])]
        found = [_entry(i) for i in self.scans.model.batch_get(ids)] if ids else []
        return sorted((e for e in found if e.supplier == supplier), key=lambda e: e.created_at, reverse=True)

    # ------------------------------------------------------------------ results
    def manifest_etag(self, supplier: str, scan_id: str) -> str | None:
        """The ETag the scan's manifest is stored under; None before it is written."""
        try:
            return str(
                self.s3.head_object(Bucket=self.results_bucket, Key=manifest_key(supplier, scan_id))["ETag"]
            )
        except self.s3.exceptions.ClientError as e:
            if _missing(e):
                return None
            raise

    def manifest(self, supplier: str, scan_id: str, etag: str | None = None) -> dict[str, Any] | None:
        """The scan's whole manifest, parsed (None before it is written): read only to make its index."""
        kwargs: dict[str, Any] = {"Bucket": self.results_bucket, "Key": manifest_key(supplier, scan_id)}
        if etag:
            kwargs["IfMatch"] = etag
        try:
            body = self.s3.get_object(**kwargs)["Body"].read()
        except self.s3.exceptions.ClientError as e:
            if _missing(e):
                return None
            raise
        # a 120,000-file manifest is millions of objects: the collector, run again and again as they
        # are made, doubled the parse (docs/web.md)
        gc.disable()
        try:
            data: dict[str, Any] = orjson.loads(body)
        finally:
            gc.enable()
        return data

    def index(self, supplier: str, scan_id: str) -> Index | None:
        """The scan's desk index (None before its manifest is written): kept parsed while the manifest's
        ETag holds; read from beside the manifest, where triage wrote it; made from the manifest and
        written there when missing or made from another version of the manifest (firmware checked since,
        a scan from before the index)."""
        etag = self.manifest_etag(supplier, scan_id)
        if etag is None:
            return None
        key, _ = desk_index_keys(supplier, scan_id)
        with self._lock:
            held = self._indexes.get(key)
            if held and held.manifest_etag == etag:
                self._indexes.move_to_end(key)
                return held
        found = self._stored_index(key)
        if found is None or found.manifest_etag != etag:
            manifest = self.manifest(supplier, scan_id, etag)
            if manifest is None:
                return None
            built = build_index(manifest, etag)
            del manifest
            self._put_index(supplier, scan_id, built)
            found = Index.parse(built.index)
        with self._lock:
            self._indexes[key] = found
            while len(self._indexes) > INDEXES_KEPT:
                self._indexes.popitem(last=False)
        return found

    def _stored_index(self, key: str) -> Index | None:
        try:
            body = self.s3.get_object(Bucket=self.results_bucket, Key=key)["Body"].read()
        except self.s3.exceptions.ClientError as e:
            if _missing(e):
                return None
            raise
        try:
            return Index.parse(body)
        except (ValueError, KeyError, TypeError):  # another schema, or damaged: made again
            return None

    def _put_index(self, supplier: str, scan_id: str, built: Built) -> None:
        try:
            put_index(self.s3, self.results_bucket, supplier, scan_id, built)
        except self.s3.exceptions.ClientError as e:  # a role without the grant: served, not kept
            LOGGER.warning(
                "desk index of %s not written: %s", scan_id, e.response.get("Error", {}).get("Code")
            )

    def file_line(self, supplier: str, scan_id: str, index: Index, path: str) -> dict[str, Any] | None:
        """A file's line of the index (its record, flags, copies, cited commits): one ranged GET. None
        for a path not in the drop, or a line that is not that file's (the index made again meanwhile)."""
        place = index.place(path)
        if place is None:
            return None
        offset, length = place
        _, files_key = desk_index_keys(supplier, scan_id)
        body = self.s3.get_object(
            Bucket=self.results_bucket, Key=files_key, Range=f"bytes={offset}-{offset + length - 1}"
        )["Body"].read()
        try:
            line = parse_line(body)
        except ValueError:
            line = {}
        if (line.get("f") or {}).get("path") != path:
            with self._lock:
                self._indexes.pop(desk_index_keys(supplier, scan_id)[0], None)
            return None
        return line

    def links(self, keys: dict[str, str], expires: int) -> dict[str, str]:
        """Presigned GET links to these result keys (format -> key), valid ``expires`` seconds."""
        return {
            fmt: self.s3.generate_presigned_url(
                "get_object", Params={"Bucket": self.results_bucket, "Key": key}, ExpiresIn=expires
            )
            for fmt, key in keys.items()
            if key.startswith(RESULTS)
        }

    # ------------------------------------------------------------------ decisions
    def decisions_for(self, digests: Iterable[str], supplier: str) -> list[Decision]:
        return self.decisions.for_contents(digests, supplier)

    def record(self, decided: Sequence[Decision]) -> dict[str, int]:
        """Write decisions as the CLI does (a later one replaces an earlier one of the same content and
        scope) and add each to the history. Returns the merge's counts."""
        merged = merge(self.decisions.existing(decided), decided)
        if merged.write:
            self.decisions.put(merged.write)
        rows: list[RawItem] = []
        for d in decided:
            digest = d.subject.removeprefix("sha256:")
            once = _taken_id()
            rows.append(_log_row(f"{LOG}{d.subject}", f"{d.at}#{d.scope_key}#{d.by}#{once}", d))
            if d.scan_id:
                rows.append(_log_row(f"{LOG}scan:{d.scan_id}", f"{d.at}#{digest}#{d.scope_key}#{once}", d))
        self.decisions.batch.put_many(rows)
        return merged.counts()

    def hunk_decisions(self, subjects: Iterable[str], supplier: str) -> list[Decision]:
        """The decisions on these hunks (``hunk:<fingerprint>``) that may apply to the supplier's drops."""
        return self.decisions.for_subjects(subjects, supplier)

    def history_of_subject(self, subject: str) -> list[Decision]:
        """Every decision taken on the desk on this subject (a content, a hunk), oldest first."""
        return list(self._query(f"{LOG}{subject}"))

    def history_of(self, sha256: str) -> list[Decision]:
        """Every decision taken on the desk on this content, oldest first."""
        return list(self._query(f"{LOG}sha256:{sha256}"))

    def taken_in(self, scan_id: str) -> list[Decision]:
        """The decisions taken on the desk while reviewing this scan, oldest first."""
        return list(self._query(f"{LOG}scan:{scan_id}"))

    def _query(self, subject: str) -> Iterable[Decision]:
        kwargs: dict[str, Any] = {
            "TableName": self.decisions_table,
            "KeyConditionExpression": "subject = :s",
            "ExpressionAttributeValues": {":s": {"S": subject}},
        }
        while True:
            resp = self.dynamodb.query(**kwargs)
            yield from (from_item(i) for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def put_index(s3: S3Client, bucket: str, supplier: str, scan_id: str, built: Built) -> None:
    """Write a scan's desk index beside its manifest: the files' lines first, then the index that
    points into them."""
    index_key, files_key = desk_index_keys(supplier, scan_id)
    s3.put_object(Bucket=bucket, Key=files_key, Body=built.files, ContentType="application/x-ndjson")
    s3.put_object(Bucket=bucket, Key=index_key, Body=built.index, ContentType="application/json")


def write_index(s3: S3Client, bucket: str, manifest: dict[str, Any], manifest_etag: str) -> None:
    """Triage's step after the manifest: the desk's index of it, so that the desk never parses it."""
    put_index(s3, bucket, manifest["supplier"], manifest["scan_id"], build_index(manifest, manifest_etag))


def _missing(e: Any) -> bool:
    return e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound")


def _log_row(subject: str, scope: str, d: Decision) -> RawItem:
    row = to_item(d)
    row["subject"] = {"S": subject}
    row["scope"] = {"S": scope}
    return row


def _entry(item: Any) -> ScanEntry:
    return ScanEntry(
        scan_id=item.scan_id,
        supplier=item.supplier,
        key=item.key,
        status=item.status,
        created_at=item.created_at,
        product=item.product,
        finished_at=item.finished_at,
        outcome=item.outcome.as_dict() if item.outcome else {},
    )

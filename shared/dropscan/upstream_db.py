"""The upstream-hash database: digest items and package items in one DynamoDB table.

A digest item (``pk`` = hex SHA-256) says which normalised forms produced the digest (``raw``, ``kw``,
``ws``) and, per package, the lowest and highest release holding it: bounded whatever the number of
releases. Exact membership lives in the per-release path lists (``releases``). A package item
(``pk`` = ``package#<name>``) holds the package's trust and its ingested versions.

A digest item keeps all that in one JSON string attribute ``v`` beside its key: two attributes, not a
nested map of maps. That makes it about 120 bytes, and moto (whose response serializer costs per
attribute value) reads it 2-3 times as fast as the earlier layout (``forms`` set + ``pkgs`` map), which
is still read, and rewritten in the new layout whenever a merge touches it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pynamodb.attributes import JSONAttribute, MapAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.models import Model

from dropscan.dynamo import BatchTable, CallStats
from dropscan.models import Trust
from dropscan.releases import version_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PACKAGE_PREFIX = "package#"
# one item naming every package, so that listing them reads two items rather than scanning the table
PACKAGE_INDEX = "packages"
FORMS = ("raw", "kw", "ws")


class DigestItem(Model):
    class Meta:
        table_name = "upstream"  # never used for I/O: batches go through BatchTable

    pk = UnicodeAttribute(hash_key=True)
    # {"f": [forms], "p": {package: [lo] or [lo, hi]}, "kw"/"ws": digest where a raw file's differs}
    v = JSONAttribute(null=True)
    # the earlier layout, read but no longer written
    forms = UnicodeSetAttribute(null=True)
    pkgs = MapAttribute[str, Any](null=True)  # package -> {"lo": version, "hi": version}


class PackageItem(Model):
    class Meta:
        table_name = "upstream"

    pk = UnicodeAttribute(hash_key=True)
    name = UnicodeAttribute()
    trust = UnicodeAttribute(default=Trust.HIGH.value)
    versions = UnicodeSetAttribute(null=True)


@dataclass(frozen=True, slots=True)
class VersionRange:
    lo: str
    hi: str

    def widen(self, version: str) -> VersionRange:
        return VersionRange(min(self.lo, version, key=version_key), max(self.hi, version, key=version_key))

    def as_list(self) -> list[str]:
        return [self.lo] if self.lo == self.hi else [self.lo, self.hi]


@dataclass(frozen=True, slots=True)
class DigestInfo:
    """What the database knows of one digest."""

    forms: frozenset[str]
    packages: Mapping[str, VersionRange]


@dataclass(frozen=True, slots=True)
class PackageInfo:
    name: str
    trust: Trust
    versions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FileDigests:
    """The three digests of one upstream file."""

    sha256: str
    kw: str
    ws: str


def digest_from_raw(raw: dict[str, Any]) -> tuple[str, DigestInfo, bool]:
    """(digest, info, whether the item is in the current layout) of a raw digest item.

    A lookup asks for ``v`` alone (see :data:`LOOKUP_PROJECTION`), so the digest is read from it;
    KeyError when the item holds its digest nowhere (``pk`` not read, and ``v`` older than ``d``).
    """
    value = raw.get("v")
    if value is not None:  # the hot path of every lookup: no model object per item
        parsed = json.loads(value["S"])
        digest = parsed["d"] if "d" in parsed else raw["pk"]["S"]
        return digest, info_from_json(parsed), "d" in parsed
    if "pk" not in raw:  # the earlier layout is only ever read whole
        raise KeyError("pk")
    item = DigestItem.from_raw_data(raw)
    pkgs = item.pkgs.as_dict() if item.pkgs is not None else {}
    return (
        item.pk,
        DigestInfo(
            forms=frozenset(item.forms or ()),
            packages={p: VersionRange(str(r["lo"]), str(r["hi"])) for p, r in pkgs.items()},
        ),
        False,
    )


def info_to_json(info: DigestInfo) -> dict[str, Any]:
    """The ``v`` value of a digest item (also what a lookup hands on to finalize)."""
    return {"f": sorted(info.forms), "p": {p: r.as_list() for p, r in sorted(info.packages.items())}}


def digest_item(digest: str, value: Mapping[str, Any]) -> dict[str, Any]:
    """A raw digest item, serialised by hand as digest_from_raw reads it (a pynamodb model costs 3x)."""
    return {"pk": {"S": digest}, "v": {"S": json.dumps({"d": digest, **value}, separators=(",", ":"))}}


#: what a lookup reads of a digest item: ``v``, which repeats the key, because moto's response
#: serializer costs per attribute value (one instead of two: 8,700 keys/s instead of 6,000). ``forms``
#: is there to see items of the earlier layout, which are then read again whole.
LOOKUP_PROJECTION = {"ProjectionExpression": "#v, #f", "ExpressionAttributeNames": {"#v": "v", "#f": "forms"}}


def info_from_json(v: Mapping[str, Any]) -> DigestInfo:
    """The inverse of info_to_json (a range of one version is a list of one)."""
    return DigestInfo(frozenset(v["f"]), {p: VersionRange(r[0], r[-1]) for p, r in v["p"].items()})


def _package_from_raw(raw: dict[str, Any]) -> PackageInfo:
    item = PackageItem.from_raw_data(raw)
    return PackageInfo(item.name, Trust(item.trust), tuple(sorted(item.versions or (), key=version_key)))


def release_entries(files: Iterable[FileDigests]) -> dict[str, dict[str, Any]]:
    """digest -> {"forms": set, "kw": .., "ws": ..} for the files of one release."""
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        raw = out.setdefault(f.sha256, {"forms": set()})
        raw["forms"].add("raw")
        if f.kw != f.sha256:
            raw["kw"] = f.kw
        if f.ws != f.sha256:
            raw["ws"] = f.ws
        out.setdefault(f.kw, {"forms": set()})["forms"].add("kw")
        out.setdefault(f.ws, {"forms": set()})["forms"].add("ws")
    return out


class UpstreamDB:
    """Everything the stages ask of the upstream table, and nothing about how DynamoDB does it."""

    def __init__(
        self, client: DynamoDBClient, table: str, *, concurrency: int = 4, stats: CallStats | None = None
    ) -> None:
        self.client = client
        self.table = table
        self.batch = BatchTable(client, table, concurrency=concurrency, stats=stats)

    @property
    def stats(self) -> CallStats:
        return self.batch.stats

    # -------------------------------------------------------------- reads
    def lookup(self, digests: Iterable[str]) -> dict[str, DigestInfo]:
        """The known digests among ``digests`` (deduplicated: one key per digest, 100 a call)."""
        return {d: info for d, info, _ in self._lookup_raw(digests)}

    def _lookup_raw(self, digests: Iterable[str]) -> list[tuple[str, DigestInfo, bool]]:
        keys = [{"pk": {"S": d}} for d in sorted(set(digests))]
        try:
            return [digest_from_raw(raw) for raw in self.batch.get_many(keys, projection=LOOKUP_PROJECTION)]
        except KeyError:  # a table written before ``v`` held the key: its items can only be read whole
            return [digest_from_raw(raw) for raw in self.batch.get_many(keys)]

    def packages(self, names: Iterable[str] | None = None) -> dict[str, PackageInfo]:
        """Package items by name: the named ones, or all of them."""
        if names is None:
            index = self.client.get_item(TableName=self.table, Key={"pk": {"S": PACKAGE_INDEX}}).get("Item")
            names = index["packages"]["SS"] if index else self._scan_package_names()
        raws = self.batch.get_many([{"pk": {"S": PACKAGE_PREFIX + n}} for n in sorted(set(names))])
        infos = [_package_from_raw(r) for r in raws]
        return {p.name: p for p in infos}

    def _scan_package_names(self) -> list[str]:
        """For a table written before the package index: its package items, by a Scan."""
        names: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "begins_with(pk, :p)",
            "ExpressionAttributeValues": {":p": {"S": PACKAGE_PREFIX}},
            "ProjectionExpression": "pk",
        }
        while True:
            resp = self.client.scan(**kwargs)
            names.extend(i["pk"]["S"][len(PACKAGE_PREFIX) :] for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return names
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def _index(self, package: str) -> None:
        self.client.update_item(
            TableName=self.table,
            Key={"pk": {"S": PACKAGE_INDEX}},
            UpdateExpression="ADD packages :n",
            ExpressionAttributeValues={":n": {"SS": [package]}},
        )

    def is_known(self, sha256: str) -> bool:
        item = self.client.get_item(TableName=self.table, Key={"pk": {"S": sha256}}).get("Item")
        return item is not None and "raw" in digest_from_raw(item)[1].forms

    # -------------------------------------------------------------- writes
    def add_release(
        self, package: str, version: str, files: Iterable[FileDigests], trust: Trust | None = None
    ) -> int:
        """Merge one release's digests into the table; returns how many items were written.

        Idempotent: items already holding the release (forms and range) are not rewritten.
        ``trust`` sets the package's trust; None keeps it (``high`` for a new package).
        """
        entries = release_entries(files)
        here = VersionRange(version, version)
        written = self.merge_digests(
            {d: (e["forms"], {package: here}) for d, e in entries.items()},
            extra={d: {k: e[k] for k in ("kw", "ws") if k in e} for d, e in entries.items()},
        )
        self.register(package, version, trust)
        return written

    def merge_digests(
        self,
        digests: Mapping[str, tuple[set[str], Mapping[str, VersionRange]]],
        *,
        extra: Mapping[str, dict[str, str]] | None = None,
    ) -> int:
        """Widen forms and version ranges of ``digests``; write only the items that change."""
        existing = {d: (info, current) for d, info, current in self._lookup_raw(digests)}
        changed: list[dict[str, Any]] = []
        for digest, (forms, ranges) in digests.items():
            old, current = existing.get(digest, (None, False))
            merged_forms = set(forms) | (set(old.forms) if old else set())
            merged = dict(old.packages) if old else {}
            for pkg, rng in ranges.items():
                prev = merged.get(pkg)
                merged[pkg] = prev.widen(rng.lo).widen(rng.hi) if prev else rng
            if old and current and merged_forms == old.forms and merged == dict(old.packages):
                continue
            value = info_to_json(DigestInfo(frozenset(merged_forms), merged))
            value.update((extra or {}).get(digest, {}))
            changed.append(digest_item(digest, value))
        self.batch.put_many(changed)
        return len(changed)

    def register(self, package: str, version: str, trust: Trust | None) -> None:
        """Record ``version`` of ``package``; ``trust`` None keeps the package's trust (high when new)."""
        # ADD on a string set is idempotent, so a re-ingest leaves the item as it was
        trust_expr = "trust = :t" if trust else "trust = if_not_exists(trust, :t)"
        self.client.update_item(
            TableName=self.table,
            Key={"pk": {"S": PACKAGE_PREFIX + package}},
            UpdateExpression=f"SET #n = :n, {trust_expr} ADD versions :v",
            ExpressionAttributeNames={"#n": "name"},
            ExpressionAttributeValues={
                ":n": {"S": package},
                ":t": {"S": (trust or Trust.HIGH).value},
                ":v": {"SS": [version]},
            },
        )
        self._index(package)

    def stats_summary(self) -> dict[str, Any]:
        """Counts for ``dropscan db stats``."""
        packages = self.packages()
        resp = self.client.describe_table(TableName=self.table)["Table"]
        return {
            "table": self.table,
            "items": int(resp.get("ItemCount", 0)),
            "bytes": int(resp.get("TableSizeBytes", 0)),
            "packages": {
                p.name: {"trust": p.trust.value, "versions": list(p.versions)} for p in packages.values()
            },
        }

    def set_trust(self, package: str, trust: Trust) -> None:
        self.client.update_item(
            TableName=self.table,
            Key={"pk": {"S": PACKAGE_PREFIX + package}},
            UpdateExpression="SET #n = :n, trust = :t",
            ExpressionAttributeNames={"#n": "name"},
            ExpressionAttributeValues={":n": {"S": package}, ":t": {"S": trust.value}},
        )
        self._index(package)

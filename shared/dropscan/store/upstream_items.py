"""The upstream table's items as DynamoDB holds them: raw digest items (both layouts) and package items
decoded, and the digests' head and overflow items read in batches. What the items say is
:mod:`dropscan.upstream_rules`; this module only turns DynamoDB's attribute values into it.

The earlier layout of a digest item (``forms`` set + ``pkgs`` map) is still read, and rewritten whenever
a merge touches it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from pynamodb.attributes import JSONAttribute, MapAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.models import Model

from dropscan.models import (
    DigestInfo,
    PackageInfo,
    Trust,
    VersionRange,
    info_from_json,
    info_to_json,
    version_key,
)
from dropscan.store.batch import BatchTable
from dropscan.upstream_rules import StoredDigest, page_key


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
    # the release whose digests hold open ranges (see dropscan.upstream_rules); only ever raised
    open_release = UnicodeAttribute(null=True)


def digest_from_raw(raw: dict[str, Any]) -> tuple[str, DigestInfo, bool]:
    """(digest, info, whether the item is in the current layout) of a raw digest item.

    A lookup asks for ``v`` alone (see :data:`LOOKUP_PROJECTION`), so the digest is read from it;
    KeyError when the item holds its digest nowhere (``pk`` not read, and ``v`` older than ``d``).
    """
    value = raw.get("v")
    if value is not None:  # the hot path of every lookup: no model object per item
        parsed = orjson.loads(value["S"])
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


#: what a lookup reads of a digest item: ``v``, which repeats the key, because moto's response
#: serializer costs per attribute value (one instead of two: 8,700 keys/s instead of 6,000). ``forms``
#: is there to see items of the earlier layout, which are then read again whole.
LOOKUP_PROJECTION = {"ProjectionExpression": "#v, #f", "ExpressionAttributeNames": {"#v": "v", "#f": "forms"}}


def package_from_raw(raw: dict[str, Any]) -> PackageInfo:
    item = PackageItem.from_raw_data(raw)
    return PackageInfo(item.name, Trust(item.trust), tuple(sorted(item.versions or (), key=version_key)))


#: what :meth:`UpstreamDB.open_releases` reads of a package item
OPEN_PROJECTION = {
    "ProjectionExpression": "#n, #o",
    "ExpressionAttributeNames": {"#n": "name", "#o": "open_release"},
}


def head_of(raw: dict[str, Any]) -> tuple[str, dict[str, Any], bool]:
    """(digest, head value as the current layout writes it, whether the item is in that layout)."""
    digest, info, current = digest_from_raw(raw)
    value = orjson.loads(raw["v"]["S"]) if "v" in raw else info_to_json(info)
    value["d"] = digest
    return digest, value, current


def read_digests(
    batch: BatchTable, digests: list[str], *, projected: bool = False
) -> dict[str, StoredDigest]:
    """The stored heads of ``digests`` and their overflow items (absent digests left out)."""
    keys = [{"pk": {"S": d}} for d in digests]
    heads: dict[str, StoredDigest] = {}
    raws: list[dict[str, Any]] | None = None
    if projected:
        try:
            raws = batch.get_many(keys, projection=LOOKUP_PROJECTION)
            parsed = [(raw, head_of(raw)) for raw in raws]
        except KeyError:  # a table written before ``v`` held the key: its items can only be read whole
            raws = None
    if raws is None:
        parsed = [(raw, head_of(raw)) for raw in batch.get_many(keys)]
    for _, (digest, head, current) in parsed:
        heads[digest] = StoredDigest(head, [], current)
    paged = {d: int(st.head.get("o", 0)) for d, st in heads.items() if st.head}
    paged = {d: n for d, n in paged.items() if n}
    if paged:
        page_keys = [{"pk": {"S": page_key(d, k)}} for d, n in paged.items() for k in range(1, n + 1)]
        found = {raw["pk"]["S"]: json.loads(raw["v"]["S"]) for raw in batch.get_many(page_keys)}
        for d, n in paged.items():
            heads[d].pages = [found[page_key(d, k)] for k in range(1, n + 1) if page_key(d, k) in found]
    return heads

"""The upstream table's pure rules: what a digest item says, how a merge widens it, where an open range
ends, and how an item is laid out. No I/O: ``dropscan.store.upstream`` reads and writes what these decide.

A digest item (``pk`` = hex SHA-256) says which normalised forms produced the digest (``raw``, ``kw``,
``ws``) and, per package, the lowest and highest release holding it and, for a package ingested from
git with its history, where the content comes from (``h``: first commit, date, subject, paths, first
release tag). It keeps all that in one JSON string attribute ``v`` beside its key (moto's response
serializer costs per attribute value: one value reads 2-3 times as fast as a nested map).

**Bounded items.** A digest item holds at most :data:`PACKAGES_PER_ITEM` packages; the others go to
overflow items ``<digest>#1``, ``<digest>#2`` ... of as many each, and the head counts them (``o``). An
item is thus at most about 6 KB however many packages share the content (the empty file, a licence
text); a lookup reads the overflow items of the few heads that have any.

**Open ranges.** A package's range on a digest can be *open* (stored ``[lo, hi, 1]``, or ``[lo, 1]``
when lo = hi): its effective upper end is the later of ``hi`` and the package item's ``open_release``
(:func:`effective`). Readers only ever see effective, closed ranges (:func:`info_of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from dropscan.models import DigestInfo, FileDigests, Provenance, VersionRange, earlier_provenance, version_key

PACKAGE_PREFIX = "package#"
# one item naming every package, so that listing them reads two items rather than scanning the table
PACKAGE_INDEX = "packages"
FORMS = ("raw", "kw", "ws")
#: packages a digest item holds before the next go to an overflow item
PACKAGES_PER_ITEM = 16
#: shards of the digest items, each with its writer lease
SHARDS = 32
#: an item that is not a digest item: it tells whether the table held no digest when merges began
LAYOUT = "meta#layout"
#: the last element of an open range as stored (``[lo, hi, 1]``); a closed one is ``[lo]`` or ``[lo, hi]``
OPEN = 1

Digests = Mapping[str, tuple[set[str], Mapping[str, VersionRange]]]


def shard_of(digest: str) -> int:
    try:
        return int(digest[:2], 16) % SHARDS
    except ValueError:  # not hex: keys of other items never come here, but a bad digest must not crash
        return sum(digest.encode()) % SHARDS


def page_key(digest: str, k: int) -> str:
    """The key of a digest's ``k``-th overflow item (from 1)."""
    return f"{digest}#{k}"


def not_a_digest(key: str) -> bool:
    return key.startswith(("lease#", "meta#", PACKAGE_PREFIX)) or key == PACKAGE_INDEX


# ------------------------------------------------------------------ what a merge says
@dataclass
class Contribution:
    """What one merge says of one digest: forms, release ranges, provenance, other forms' digests."""

    forms: set[str] = field(default_factory=set)
    ranges: dict[str, VersionRange] = field(default_factory=dict)
    history: dict[str, Provenance] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)  # "kw"/"ws" -> digest, where they differ
    opened: set[str] = field(default_factory=set)  # packages whose range here is open (open mode)
    # package -> the open release a digest it left was last in: its open range ends there
    close: dict[str, str] = field(default_factory=dict)

    def says_anything(self) -> bool:
        """Whether it would make an item of a digest the table lacks (a close alone does not)."""
        return bool(self.forms or self.ranges or self.history)

    def add_range(self, package: str, rng: VersionRange) -> None:
        prev = self.ranges.get(package)
        self.ranges[package] = prev.widen(rng.lo).widen(rng.hi) if prev else rng

    def add_history(self, package: str, prov: Provenance) -> None:
        merged = earlier_provenance(self.history.get(package), prov)
        if merged is not None:
            self.history[package] = merged


def contributions_of(
    files: Iterable[FileDigests],
    package: str,
    rng: VersionRange | None,
    into: dict[str, Contribution] | None = None,
    history: Provenance | None = None,
) -> dict[str, Contribution]:
    """The contributions of ``files`` of ``package`` (in ``rng``; None: its history only), added to
    ``into``; ``history`` is the provenance of the raw digests."""
    out = into if into is not None else {}
    for f in files:
        for digest, form in ((f.sha256, "raw"), (f.kw, "kw"), (f.ws, "ws")):
            c = out.get(digest)
            if c is None:
                c = out[digest] = Contribution()
            c.forms.add(form)
            if rng is not None:
                c.add_range(package, rng)
            if form == "raw":
                if f.kw != f.sha256:
                    c.extra["kw"] = f.kw
                if f.ws != f.sha256:
                    c.extra["ws"] = f.ws
            if history is not None:  # a normal form carries its raw file's provenance
                c.add_history(package, history)
    return out


def opened_release(
    files: Iterable[FileDigests], package: str, version: str, held: set[str]
) -> dict[str, Contribution]:
    """What an open-mode ingest of one release merges first: its files the open release does not hold
    (``held``: their raw SHA-256s), opened.

    Every digest (in every form) of a file the open release holds is open from a lower version already,
    so merging it again would read it to write nothing; reads, like writes, are then about the new and
    the departed digests.
    """
    fresh = contributions_of(
        [f for f in files if f.sha256 not in held], package, VersionRange(version, version)
    )
    for c in fresh.values():
        c.opened.add(package)
    return fresh


def opened_releases(
    contributions: dict[str, Contribution],
    package: str,
    top: str | None,
    held: set[str],
    newest: Iterable[FileDigests],
) -> dict[str, Contribution]:
    """What an open-mode merge of several releases (``newest`` the files of the highest) merges first:
    the digests ``newest`` holds, opened (in place); those its open release ``top`` held (``held``) from
    a lower version, with nothing else to say, left out."""
    files = list(newest)
    # the forms a file gives its own raw digest: a contribution saying more came from another file
    own = {f.sha256: {"raw"} | {k for k, d in (("kw", f.kw), ("ws", f.ws)) if d == f.sha256} for f in files}
    now = {d for f in files for d in (f.sha256, f.kw, f.ws)}
    fresh: dict[str, Contribution] = {}
    for digest, c in contributions.items():
        rng = c.ranges.get(package)
        if (
            top is not None
            and digest in held
            and digest in now
            and rng is not None
            and version_key(rng.lo) > version_key(top)
            and not c.history
            and c.forms <= own.get(digest, set())
        ):
            continue  # open from a release at or below the open one: nothing to say
        if digest in now and rng is not None:
            c.opened.add(package)
        fresh[digest] = c
    return fresh


def opens_above(version: str, top: str | None, versions: Iterable[str]) -> bool:
    """Whether ``version`` may become the package's open release: above the one it has (``top``), or,
    without one, above every registered version."""
    if top is not None:
        return version_key(version) > version_key(top)
    return all(version_key(version) > version_key(v) for v in versions)


# ------------------------------------------------------------------ a digest as stored


@dataclass
class StoredDigest:
    """A digest as stored: its head and overflow items' values, and what it knows merged."""

    head: dict[str, Any] | None  # the head's parsed ``v`` (None: absent)
    pages: list[dict[str, Any]]  # the overflow items' parsed ``v``, in order
    current: bool  # in the current layout (else rewritten on the next merge)

    def info(self, open_releases: Mapping[str, str] | None = None) -> DigestInfo:
        return info_of(self.head or {}, self.pages, open_releases)

    def stored(self) -> tuple[DigestInfo, set[str]]:
        return stored_of(self.head or {}, self.pages)

    def open_packages(self) -> set[str]:
        """Packages with an open range on this digest (cheap: no range is parsed otherwise)."""
        return {
            p
            for value in (self.head or {}, *self.pages)
            for p, r in value.get("p", {}).items()
            if r and not isinstance(r[-1], str)
        }


def parse_range(stored: list[Any]) -> tuple[VersionRange, bool]:
    """(stored range, whether it is open) of a range as an item holds it (non-empty)."""
    is_open = not isinstance(stored[-1], str)
    versions = stored[:-1] if is_open else stored
    return VersionRange(versions[0], versions[-1]), is_open


def range_value(rng: VersionRange, is_open: bool) -> list[Any]:
    return [*rng.as_list(), OPEN] if is_open else rng.as_list()


def later(a: str, b: str) -> str:
    return max(a, b, key=version_key)


def stored_of(head: Mapping[str, Any], pages: Iterable[Mapping[str, Any]]) -> tuple[DigestInfo, set[str]]:
    """(the digest's info as stored, its packages with an open range): what merges work on."""
    ranges: dict[str, VersionRange] = {}
    opened: set[str] = set()
    history: dict[str, Provenance] = {}
    for value in (head, *pages):
        for p, r in value.get("p", {}).items():
            if r:
                ranges[p], is_open = parse_range(r)
                if is_open:
                    opened.add(p)
        history.update(value.get("h") or {})
    return DigestInfo(frozenset(head.get("f", ())), ranges, history), opened


def effective(info: DigestInfo, opened: Iterable[str], open_releases: Mapping[str, str]) -> DigestInfo:
    """``info`` with each open range ended at the later of its ``hi`` and its package's open release."""
    ranges = dict(info.packages)
    for p in opened:
        top = open_releases.get(p)
        if top is not None and p in ranges:
            ranges[p] = VersionRange(ranges[p].lo, later(ranges[p].hi, top))
    return DigestInfo(info.forms, ranges, info.history)


def info_of(
    head: Mapping[str, Any],
    pages: Iterable[Mapping[str, Any]],
    open_releases: Mapping[str, str] | None = None,
) -> DigestInfo:
    """What readers see of a digest: closed, effective ranges (``open_releases``: package -> its open
    release; an open range of a package without one ends at its ``hi``)."""
    info, opened = stored_of(head, pages)
    return effective(info, opened, open_releases or {}) if opened else info


def merged_range(
    prev: VersionRange, was_open: bool, rng: VersionRange, opens: bool, top: str | None
) -> tuple[VersionRange, bool]:
    """A stored range widened by a contribution (``opens``: made in open mode; ``top``: the package's
    open release as the merge knows it, which only ever rises, so a stale one is merely cautious)."""
    if opens:
        if was_open and version_key(prev.lo) <= version_key(rng.lo):
            return prev, True  # its upper end follows the open release: nothing to write
        return prev.widen(rng.lo).widen(rng.hi), True
    if was_open:
        # closed onto open: ``hi`` need not rise to a version the open release already covers (a
        # re-ingest of the open release writes nothing); the close later takes ``hi`` to that release
        ceiling = prev.hi if top is None else later(prev.hi, top)
        hi = prev.hi if version_key(rng.hi) <= version_key(ceiling) else later(prev.hi, rng.hi)
        lo = min(prev.lo, rng.lo, key=version_key)
        return VersionRange(lo, hi), True
    return prev.widen(rng.lo).widen(rng.hi), False


def merged(
    old: DigestInfo | None,
    old_open: set[str],
    new: Contribution,
    open_releases: Mapping[str, str] | None = None,
) -> tuple[DigestInfo, set[str]]:
    forms = set(new.forms) | set(old.forms if old else ())
    ranges = dict(old.packages) if old else {}
    opened = set(old_open)
    for pkg, rng in new.ranges.items():
        prev = ranges.get(pkg)
        if prev is None:
            ranges[pkg] = rng
            if pkg in new.opened:
                opened.add(pkg)
            continue
        top = (open_releases or {}).get(pkg)
        ranges[pkg], is_open = merged_range(prev, pkg in opened, rng, pkg in new.opened, top)
        if is_open:
            opened.add(pkg)
    for pkg, at in new.close.items():
        if pkg in opened and pkg in ranges:  # it left the open release: its range ends there
            opened.discard(pkg)
            ranges[pkg] = VersionRange(ranges[pkg].lo, later(ranges[pkg].hi, at))
    history = {p: dict(h) for p, h in (old.history if old else {}).items()}
    for pkg, prov in new.history.items():
        merged = earlier_provenance(history.get(pkg), prov)
        if merged is not None:
            history[pkg] = dict(merged)
    return DigestInfo(frozenset(forms), ranges, history), opened


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def layout(
    digest: str,
    info: DigestInfo,
    extra: Mapping[str, str],
    old_order: list[str],
    opened: Iterable[str] = (),
) -> list[str]:
    """The item values (head first) of ``info`` (``opened``: packages whose range is open): packages
    keep the item they were in (``old_order``, head's then each page's), new ones fill the head, then
    the pages, :data:`PACKAGES_PER_ITEM` each."""
    opened = set(opened)
    names = sorted(info.names)
    known = [n for n in old_order if n in info.names]
    order = known + [n for n in names if n not in set(known)]
    groups = [order[i : i + PACKAGES_PER_ITEM] for i in range(0, len(order), PACKAGES_PER_ITEM)] or [[]]

    def part(group: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "p": {p: range_value(info.packages[p], p in opened) for p in sorted(group) if p in info.packages}
        }
        hist = {p: dict(info.history[p]) for p in sorted(group) if p in info.history}
        if hist:
            out["h"] = hist
        return out

    head = {"d": digest, "f": sorted(info.forms), **part(groups[0]), **dict(sorted(extra.items()))}
    if len(groups) > 1:
        head["o"] = len(groups) - 1
    return [dumps(head)] + [dumps({"d": digest, **part(g)}) for g in groups[1:]]


def order_of(stored: StoredDigest | None) -> list[str]:
    if stored is None or stored.head is None:
        return []
    out: list[str] = []
    for value in (stored.head, *stored.pages):
        out.extend(sorted(set(value.get("p", {})) | set(value.get("h") or {})))
    return out


def rewritten(
    digest: str, old: StoredDigest | None, new: Contribution, open_releases: Mapping[str, str]
) -> list[tuple[str, str]]:
    """(key, value) of each item a merge of ``new`` into ``digest`` (``old``: as stored) writes: none
    when it changes nothing (an item of the earlier layout is always rewritten)."""
    if old is None and not new.says_anything():
        return []  # a close of a digest the table lacks
    old_info, old_open = old.stored() if old is not None else (None, set())
    info, opened = merged(old_info, old_open, new, open_releases)
    extra: dict[str, str] = {
        k: str(old.head[k]) for k in ("kw", "ws") if old is not None and old.head and k in old.head
    }
    extra.update(new.extra)
    values = layout(digest, info, extra, order_of(old), opened)
    before = [dumps(old.head)] + [dumps(p) for p in old.pages] if old is not None and old.head else []
    if old is not None and old.current and values == before:
        return []
    keys = [digest] + [page_key(digest, k) for k in range(1, len(values))]
    return list(zip(keys, values, strict=True))

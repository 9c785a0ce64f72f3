"""Upstream database dumps (``dropscan.upstream-db/1``): export, merge-import, and known-good hash lists.

A dump is gzip-compressed JSON Lines: a header line, then one line per package, per release path list
and per digest. Importing merges (forms and version ranges widen, versions and path lists add up), so
organisations can exchange and combine databases; importing the same dump twice changes nothing.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from dropscan import __version__
from dropscan.keys import manifest_key
from dropscan.models import DigestInfo, PackageInfo, Release, Trust, VersionRange
from dropscan.store.releases import Releases, load_release, save_release
from dropscan.store.upstream import UpstreamDB
from dropscan.store.upstream_items import head_of
from dropscan.store.upstream_literals import LITERAL_PREFIX, UpstreamLiterals
from dropscan.upstream_rules import Contribution, effective, stored_of

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

FORMAT = "dropscan.upstream-db/1"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PAGE = re.compile(r"^[0-9a-f]{64}#[0-9]+$")  # an overflow item of a digest


@dataclass
class DumpStats:
    packages: int = 0
    releases: int = 0
    digests: int = 0
    written: int = 0


def _scan_items(db: UpstreamDB) -> Iterator[dict[str, Any]]:
    """Every item, page by page (DynamoDB Scan)."""
    kwargs: dict[str, Any] = {"TableName": db.table}
    while True:
        resp = db.client.scan(**kwargs)
        yield from resp.get("Items", [])
        if "LastEvaluatedKey" not in resp:
            return
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _exported_items(
    db: UpstreamDB, s3: S3Client, bucket: str, *, poll_s: float = 0.2, timeout_s: float = 3600
) -> Iterator[dict[str, Any]]:
    """Every item, through a point-in-time export to ``bucket`` (the table needs PITR, as the template has).

    No read capacity and no per-item responses: on moto a Scan of 80,000 items takes about two minutes,
    the export seconds.
    """
    arn = db.client.describe_table(TableName=db.table)["Table"]["TableArn"]
    prefix = f"exports/{uuid.uuid4().hex}"
    export = db.client.export_table_to_point_in_time(
        TableArn=arn, S3Bucket=bucket, S3Prefix=prefix, ExportFormat="DYNAMODB_JSON"
    )["ExportDescription"]
    deadline = time.monotonic() + timeout_s
    while export["ExportStatus"] == "IN_PROGRESS":
        if time.monotonic() > deadline:
            raise TimeoutError(f"export of {db.table} still in progress after {timeout_s:.0f} s")
        time.sleep(poll_s)
        export = db.client.describe_export(ExportArn=export["ExportArn"])["ExportDescription"]
    if export["ExportStatus"] != "COMPLETED":
        raise RuntimeError(
            f"export of {db.table} failed: {export.get('FailureMessage', export['ExportStatus'])}"
        )
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
        for o in page.get("Contents", [])
    ]
    try:
        for key in keys:
            if "/data/" not in key:
                continue  # manifests and checksums beside the data files
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            for line in gzip.decompress(body).splitlines():
                if line.strip():
                    yield json.loads(line)["Item"]
    finally:
        for key in keys:
            s3.delete_object(Bucket=bucket, Key=key)


def export_db(
    db: UpstreamDB,
    s3: S3Client,
    bucket: str,
    out: IO[bytes],
    *,
    via_export: bool = False,
    items: Iterable[dict[str, Any]] | None = None,
    level: int = 6,
    releases_only: bool = False,
) -> DumpStats:
    """Write the whole database (digests, packages, release path lists) to ``out``.

    ``via_export``: read the items through a point-in-time export to ``bucket`` instead of a Scan;
    ``items``: the table's items from elsewhere (the embedded stack's own storage); ``level``: gzip's;
    ``releases_only``: the packages and path lists alone: :func:`export_rest` writes the git states and
    the digests as a gzip member of its own, to be appended (a dump may be several members: readers
    see one stream).
    """
    stats = DumpStats()
    with gzip.open(out, "wt", compresslevel=level) as f:
        header = {"format": FORMAT, "generator": f"dropscan {__version__}"}
        header["created"] = datetime.now(UTC).isoformat(timespec="seconds")
        f.write(json.dumps(header) + "\n")
        packages = db.packages()
        # read before the digests: an open release only rises, so every release listed here is covered
        tops = db.open_releases(packages)
        _write_packages(f, s3, bucket, packages, tops, stats)
        if not releases_only:
            if items is None:
                items = _exported_items(db, s3, bucket) if via_export else _scan_items(db)
            stats.digests = _write_rest(f, git_states(s3, bucket, packages), items, tops)
    return stats


def git_states(s3: S3Client, bucket: str, packages: Iterable[str]) -> dict[str, bytes]:
    """What ingest-git runs did for each package, so that the next one is incremental: each state as
    stored (gzip-compressed JSON), which a dump's line copies without reading it."""
    releases = Releases(s3, bucket)
    return {name: body for name in packages if (body := releases.git_state_body(name)) is not None}


def export_rest(
    states: Mapping[str, bytes],
    items: Iterable[dict[str, Any]],
    tops: Mapping[str, str],
    out: IO[bytes],
    *,
    level: int = 6,
) -> int:
    """The git states' and the digests' lines of a dump (see :func:`export_db`), from the packages'
    states (:func:`git_states`), the table's ``items`` and the packages' open releases
    (``UpstreamDB.open_releases``, read first); returns how many digests."""
    with gzip.open(out, "wt", compresslevel=level) as f:
        return _write_rest(f, states, items, tops)


def _write_rest(
    f: IO[str], states: Mapping[str, bytes], items: Iterable[dict[str, Any]], tops: Mapping[str, str]
) -> int:
    for name, state in states.items():  # as stored: compact JSON on one line, copied as it is
        f.write(f'{{"git":{orjson.dumps(name).decode()},"state":{gzip.decompress(state).decode()}}}\n')
    return _write_digests(f, items, tops)


def _write_digests(f: IO[str], items: Iterable[dict[str, Any]], tops: Mapping[str, str]) -> int:
    written = 0
    waiting: dict[str, dict[str, Any]] = {}  # heads whose overflow items are not all read yet
    pages: dict[str, list[dict[str, Any]]] = {}
    for raw in items:
        key = raw["pk"]["S"]
        if _PAGE.match(key):
            pages.setdefault(key[:64], []).append(orjson.loads(raw["v"]["S"]))
            continue
        if key.startswith(LITERAL_PREFIX):  # a release literal: its releases, as they are
            f.write(orjson.dumps({"lit": key, "r": sorted(raw.get("r", {}).get("SS", ()))}).decode() + "\n")
            continue
        if not _HEX64.match(key):
            continue  # package items, the package index, leases
        digest, head, _ = head_of(raw)
        if int(head.get("o", 0)):
            waiting[digest] = head
            continue
        f.write(_digest_line(digest, *stored_of(head, ()), tops) + "\n")
        written += 1
    for digest, head in waiting.items():
        f.write(_digest_line(digest, *stored_of(head, pages.get(digest, ())), tops) + "\n")
        written += 1
    return written


def _write_packages(
    f: IO[str],
    s3: S3Client,
    bucket: str,
    packages: Mapping[str, PackageInfo],
    tops: Mapping[str, str],
    stats: DumpStats,
) -> None:
    """Each package's line, then its releases' path lists (with the licence recorded at ingest)."""
    for info in packages.values():
        head: dict[str, Any] = {"package": info.name, "trust": info.trust.value}
        head["versions"] = list(info.versions)
        if info.name in tops:  # with the digests' open ranges, so that an import keeps writing little
            head["open_release"] = tops[info.name]
        f.write(orjson.dumps(head).decode() + "\n")
        stats.packages += 1
        reported = Releases(s3, bucket).reported(info.name)
        for v in info.versions:
            rel = load_release(s3, bucket, info.name, v)
            if rel is not None:
                line: dict[str, Any] = {
                    "release": rel.package,
                    "version": rel.version,
                    "files": rel.files,
                }
                report = Releases(s3, bucket).report(info.name, v) if v in reported else None
                licence = (report or {}).get("license")
                if licence is not None:  # recorded once at ingest: the next scans take it from here
                    line["license"] = licence
                if (report or {}).get("literals") is not None:  # what the release's literals were
                    line["literals"] = (report or {})["literals"]
                f.write(orjson.dumps(line).decode() + "\n")
                stats.releases += 1


def _digest_line(digest: str, stored: DigestInfo, opened: set[str], tops: Mapping[str, str]) -> str:
    """A digest's line: effective, closed ranges (an import into a table that knows the package reads
    them as they are), and ``o``, the packages whose range is open (a new package's import keeps them
    open under its open release)."""
    found = effective(stored, opened, tops) if opened else stored
    line: dict[str, Any] = {
        "d": digest,
        "f": sorted(found.forms),
        "p": {k: [r.lo, r.hi] for k, r in found.packages.items()},
    }
    if opened & set(tops):
        line["o"] = sorted(opened & set(tops))
    if found.history:
        line["h"] = {k: dict(v) for k, v in found.history.items()}
    return orjson.dumps(line).decode()


def _lines(src: IO[bytes]) -> Iterator[dict[str, Any]]:
    with gzip.open(src, "rt") as f:
        header = json.loads(f.readline() or "{}")
        if header.get("format") != FORMAT:
            raise ValueError(f"not a dropscan database dump (format {header.get('format')!r}, want {FORMAT})")
        for line in f:
            if line.strip():
                yield orjson.loads(line)


def import_db(db: UpstreamDB, s3: S3Client, bucket: str, src: IO[bytes]) -> DumpStats:
    """Merge a dump into the database; items that already hold what the dump says are not rewritten."""
    stats = DumpStats()
    digests: dict[str, Contribution] = {}
    adopted: dict[str, str] = {}  # new packages -> the open release they had: kept open here
    literals: dict[str, set[str]] = {}
    for entry in _lines(src):
        if "lit" in entry:
            literals[str(entry["lit"])] = set(entry.get("r") or ())
        elif "d" in entry:
            digests[entry["d"]] = Contribution(
                set(entry["f"]),
                {p: VersionRange(r[0], r[1]) for p, r in entry["p"].items()},
                dict(entry.get("h") or {}),
                opened=set(entry.get("o", ())),
            )
        elif "git" in entry:
            if Releases(s3, bucket).git_state(entry["git"]) is None:
                Releases(s3, bucket).put_git_state(entry["git"], entry["state"])
        elif _import_entry(db, s3, bucket, entry, stats) and entry.get("open_release"):
            adopted[entry["package"]] = str(entry["open_release"])
    for c in digests.values():
        c.opened &= set(adopted)  # a package this table knew keeps its own ranges' state
    stats.digests = len(digests)
    # a range this table holds open already covers what its open release covers: not rewritten
    tops = db.open_releases({p for c in digests.values() for p in c.ranges})
    stats.written = db.merge(digests, open_releases=tops)
    for package, version in adopted.items():  # last: every digest of that release is open by now
        db.adopt_open_release(package, version)
    if literals:
        UpstreamLiterals(db.client, db.table).merge(literals)
    return stats


def _import_licence(releases: Releases, entry: dict[str, Any]) -> None:
    """The licence recorded for a release at its ingest, into its ingest report (kept if it has one)."""
    package, version = entry["release"], entry["version"]
    report = releases.report(package, version) or {
        "package": package,
        "version": version,
        "files": len(entry["files"]),
    }
    changed = False
    if report.get("license") is None and entry.get("license") is not None:
        report["license"], changed = entry["license"], True
    if report.get("literals") is None and entry.get("literals") is not None:
        report["literals"], changed = entry["literals"], True
    if changed:
        releases.put_report(package, version, report)


def _import_entry(db: UpstreamDB, s3: S3Client, bucket: str, entry: dict[str, Any], stats: DumpStats) -> bool:
    """A release path list or a package line of a dump; True: a package this table did not know."""
    if "release" in entry:
        if load_release(s3, bucket, entry["release"], entry["version"]) is None:
            save_release(s3, bucket, Release(entry["release"], entry["version"], entry["files"]))
        if entry.get("license") is not None or entry.get("literals") is not None:
            _import_licence(Releases(s3, bucket), entry)
        stats.releases += 1
    elif "package" in entry:
        # a package this database already knows keeps its own trust
        is_new = entry["package"] not in db.packages([entry["package"]])
        trust = Trust(entry.get("trust", "high")) if is_new else None
        for v in entry["versions"]:
            db.register(entry["package"], v, trust)
        stats.packages += 1
        return is_new
    return False


def read_hash_list(path: Path) -> dict[str, str]:
    """path -> sha256 from ``sha256sum`` output or a hashdeep list (its sha256 column)."""
    files: dict[str, str] = {}
    sha_col, name_col = None, None
    for raw in path.read_text(errors="surrogateescape").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("%%%%"):
            if line.startswith("%%%% size,"):
                cols = line[5:].split(",")
                sha_col, name_col = cols.index("sha256"), cols.index("filename")
            continue
        if line.startswith("##"):
            continue
        if sha_col is not None and name_col is not None:
            parts = line.split(",", name_col)  # the file name may itself hold commas
            if len(parts) > name_col and _HEX64.match(parts[sha_col]):
                files[parts[name_col]] = parts[sha_col]
            continue
        digest, _, name = line.partition(" ")
        if _HEX64.match(digest):
            files[name.lstrip(" *").removeprefix("./")] = digest
    return files


# ------------------------------------------------------------------ the embedded stack's scan history
SCANS_FOLDER = "scans"
_ITEM = "item.json"


def save_scans(dynamodb: Any, s3: S3Client, scans_table: str, results_bucket: str, folder: Path) -> int:
    """Each finished scan filed under a product, once: its scans-table item and every object under its
    results folder (manifest, reports, file index) as ``<folder>/<scan id>.tar.gz``, so that the next
    run compares its drop with it, lists it, and answers a repeated upload of the same bytes with it."""
    folder.mkdir(parents=True, exist_ok=True)
    saved = 0
    kwargs: dict[str, Any] = {"TableName": scans_table, "FilterExpression": "attribute_exists(product_key)"}
    while True:
        resp = dynamodb.scan(**kwargs)
        for item in resp.get("Items", []):
            scan_id, supplier = item["scan_id"]["S"], item["supplier"]["S"]
            path = folder / f"{scan_id}.tar.gz"
            if path.exists() or "finished_at" not in item:
                continue
            tmp = path.with_suffix(".tmp")
            with tarfile.open(tmp, "w:gz", compresslevel=3) as tar:
                _add(tar, _ITEM, json.dumps(item).encode())
                prefix = manifest_key(supplier, scan_id).rsplit("/", 1)[0] + "/"
                for page in s3.get_paginator("list_objects_v2").paginate(
                    Bucket=results_bucket, Prefix=prefix
                ):
                    for o in page.get("Contents", []):
                        _add(tar, o["Key"], s3.get_object(Bucket=results_bucket, Key=o["Key"])["Body"].read())
            tmp.replace(path)
            saved += 1
        if "LastEvaluatedKey" not in resp:
            return saved
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def load_scans(dynamodb: Any, s3: S3Client, scans_table: str, results_bucket: str, folder: Path) -> int:
    """Put the saved scans back: items and results objects (the manifests' notifications are not sent
    again: the results bucket's notifications are off meanwhile)."""
    files = sorted(folder.glob("*.tar.gz")) if folder.is_dir() else []
    if not files:
        return 0
    current: dict[str, Any] = dict(s3.get_bucket_notification_configuration(Bucket=results_bucket))
    notifications: Any = {k: v for k, v in current.items() if k != "ResponseMetadata"}
    s3.put_bucket_notification_configuration(Bucket=results_bucket, NotificationConfiguration={})
    try:
        for path in files:
            with tarfile.open(path) as tar:
                for member in tar:
                    body = tar.extractfile(member)
                    if body is None:
                        continue
                    if member.name == _ITEM:
                        dynamodb.put_item(TableName=scans_table, Item=json.loads(body.read()))
                    else:
                        s3.put_object(Bucket=results_bucket, Key=member.name, Body=body.read())
    finally:
        s3.put_bucket_notification_configuration(
            Bucket=results_bucket, NotificationConfiguration=notifications
        )
    return len(files)

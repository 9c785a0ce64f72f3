"""Upstream releases: version order, archive-name parsing, and per-release path lists in S3."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

RELEASE_PREFIX = "releases/"
_PART = re.compile(r"(\d+)")
_ARCHIVE_SUFFIX = re.compile(
    r"(\.orig)?\.(tar\.(gz|bz2|xz|zst|lz|lzma|Z)|tgz|tbz2?|txz|tar|zip|7z|cpio|whl)$", re.IGNORECASE
)
_NAME_VERSION = re.compile(r"^(?P<name>.+?)[-_](?P<version>\d[\w.+~-]*)$")


@lru_cache(maxsize=4096)  # a scan compares the same few versions hundreds of thousands of times
def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Natural order: 1.9 < 1.10 < 1.10.1; letters sort after numbers at the same place."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _PART.split(version) if p)


def parse_archive_name(filename: str) -> tuple[str, str] | None:
    """('busybox', '1.35.0') from busybox-1.35.0.tar.bz2 or busybox_1.35.0.orig.tar.bz2."""
    stem = _ARCHIVE_SUFFIX.sub("", filename.rsplit("/", 1)[-1])
    m = _NAME_VERSION.match(stem)
    return (m["name"], m["version"]) if m else None


def release_key(package: str, version: str) -> str:
    return f"{RELEASE_PREFIX}{package}/{version}.json.gz"


def release_error_key(package: str, version: str) -> str:
    """Written instead of the path list when the release archive could not be read."""
    return f"{RELEASE_PREFIX}{package}/{version}.error.json"


def release_report_key(package: str, version: str) -> str:
    """What the last ingest of the release did: files, items written, DynamoDB calls, seconds."""
    return f"{RELEASE_PREFIX}{package}/{version}.ingest.json"


@dataclass(frozen=True, slots=True)
class Release:
    """One upstream release: every path it holds and that file's SHA-256."""

    package: str
    version: str
    files: dict[str, str]

    @property
    def digests(self) -> frozenset[str]:
        return frozenset(self.files.values())


def save_release(s3: S3Client, bucket: str, release: Release) -> str:
    body = gzip.compress(
        json.dumps(
            {"package": release.package, "version": release.version, "files": release.files},
            sort_keys=True,
            separators=(",", ":"),
        ).encode(),
        mtime=0,
    )
    key = release_key(release.package, release.version)
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json", ContentEncoding="gzip")
    return key


def load_release(s3: S3Client, bucket: str, package: str, version: str) -> Release | None:
    try:
        body = s3.get_object(Bucket=bucket, Key=release_key(package, version))["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    data = json.loads(gzip.decompress(body))
    return Release(data["package"], data["version"], data["files"])

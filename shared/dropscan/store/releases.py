"""Upstream releases in the upstream bucket: path lists (``releases/<package>/<version>.json.gz``), the
report of each ingest, and the error of an archive that could not be read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from dropscan.keys import (
    git_pack_prefix,
    git_report_key,
    git_state_key,
    release_error_key,
    release_key,
    release_report_key,
)
from dropscan.models import Release

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def save_release(s3: S3Client, bucket: str, release: Release) -> str:
    body = gzip.compress(
        orjson.dumps(
            {"package": release.package, "version": release.version, "files": release.files},
            option=orjson.OPT_SORT_KEYS,
        ),
        compresslevel=1,  # hex digests: the fastest level compresses them almost as much as the best
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
    data = orjson.loads(gzip.decompress(body))
    return Release(data["package"], data["version"], data["files"])


class Releases:
    """The upstream bucket's release files: path lists, ingest reports, ingest errors."""

    def __init__(self, s3: S3Client, bucket: str) -> None:
        self.s3 = s3
        self.bucket = bucket

    def save(self, release: Release) -> str:
        return save_release(self.s3, self.bucket, release)

    def load(self, package: str, version: str) -> Release | None:
        return load_release(self.s3, self.bucket, package, version)

    def raw_digests(self, package: str, version: str) -> set[str] | None:
        """The SHA-256s of a release's path list (None: it has none): what an open-mode ingest closes by."""
        release = self.load(package, version)
        return set(release.files.values()) if release is not None else None

    def report(self, package: str, version: str) -> dict[str, Any] | None:
        """What the last ingest of the release did; None if it was never ingested."""
        try:
            obj = self.s3.get_object(Bucket=self.bucket, Key=release_report_key(package, version))
        except self.s3.exceptions.NoSuchKey:
            return None
        report: dict[str, Any] = json.loads(obj["Body"].read())
        return report

    def reported(self, package: str) -> set[str]:
        """The versions of ``package`` with an ingest report (one listing, not a GET per version)."""
        prefix, suffix = release_report_key(package, ""), ".ingest.json"
        prefix = prefix[: -len(suffix)]
        return {
            obj["Key"][len(prefix) : -len(suffix)]
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            for obj in page.get("Contents", [])
            if obj["Key"].endswith(suffix) and "/" not in obj["Key"][len(prefix) :]
        }

    def put_report(self, package: str, version: str, report: dict[str, Any]) -> None:
        self.s3.put_object(
            Bucket=self.bucket, Key=release_report_key(package, version), Body=json.dumps(report).encode()
        )

    def put_error(self, package: str, version: str, key: str, error: str) -> None:
        """Written instead of the path list when the release archive could not be read."""
        self.s3.put_object(
            Bucket=self.bucket,
            Key=release_error_key(package, version),
            Body=json.dumps({"key": key, "error": error}).encode(),
        )

    def git_state(self, package: str) -> dict[str, Any] | None:
        """What earlier ingests of the package's git repository did (None: none did)."""
        body = self.git_state_body(package)
        if body is None:
            return None
        state: dict[str, Any] = orjson.loads(gzip.decompress(body))
        return state

    def git_state_body(self, package: str) -> bytes | None:
        """The package's git state as stored: gzip-compressed JSON (None: no ingest made one)."""
        try:
            body: bytes = self.s3.get_object(Bucket=self.bucket, Key=git_state_key(package))["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return None
        return body

    def put_git_state(self, package: str, state: dict[str, Any]) -> None:
        body = gzip.compress(orjson.dumps(state), compresslevel=1, mtime=0)
        self.s3.put_object(Bucket=self.bucket, Key=git_state_key(package), Body=body)

    def put_git_report(self, package: str, report: dict[str, Any]) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=git_report_key(package), Body=json.dumps(report).encode())

    def git_packs(self, package: str) -> list[str]:
        """The keys of the packs (and their indexes) of the package's bundles ingested so far."""
        prefix = git_pack_prefix(package)
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def put_git_pack(self, package: str, path: Path) -> None:
        self.s3.upload_file(str(path), self.bucket, git_pack_prefix(package) + path.name)

    def get_git_pack(self, key: str, dest: Path) -> None:
        self.s3.download_file(self.bucket, key, str(dest / key.rsplit("/", 1)[-1]))

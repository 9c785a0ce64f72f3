"""Uploaded objects, read: a supplier's drop in the drops bucket, an upstream archive in the upstream bucket.

An object is named by bucket, key and (in a versioned bucket) version, so that every read of one scan
sees the same bytes even if the supplier uploads again under the same key.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: a drop is read again in 64 MiB ranges: still parallel for a big drop on AWS, and few ranged GETs on
#: moto, which copies its whole object for each (see docs/design.md)
DOWNLOAD_PARTS = TransferConfig(multipart_threshold=64 * 1024**2, multipart_chunksize=64 * 1024**2)


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One version of an uploaded object, as its HEAD tells it."""

    bucket: str
    key: str
    size: int
    etag: str | None
    version_id: str | None
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The file name the uploader gave (the key's last segment)."""
        return self.key.rsplit("/", 1)[-1]


def _version(version_id: str | None) -> dict[str, str]:
    return {"VersionId": version_id} if version_id else {}


class Objects:
    """Reads of uploaded objects; ``new_s3`` makes a client of its own for a forked child."""

    def __init__(self, s3: S3Client, new_s3: Callable[[], S3Client]) -> None:
        self.s3 = s3
        self.new_s3 = new_s3

    def head(self, bucket: str, key: str) -> StoredObject:
        head = self.s3.head_object(Bucket=bucket, Key=key)
        return StoredObject(
            bucket=bucket,
            key=key,
            size=int(head.get("ContentLength", 0)),
            etag=head.get("ETag", "").strip('"') or None,
            version_id=head.get("VersionId"),
            metadata=dict(head.get("Metadata", {})),
        )

    def find(self, bucket: str, key: str) -> StoredObject | None:
        """The object's current version, None when there is none (other errors are raised)."""
        try:
            return self.head(bucket, key)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def listed(self, bucket: str, prefix: str) -> list[StoredObject]:
        """The objects under ``prefix``, in key order (their current versions; no metadata: a listing
        does not carry it)."""
        out: list[StoredObject] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                etag = o.get("ETag", "").strip('"') or None
                out.append(StoredObject(bucket, o["Key"], int(o.get("Size", 0)), etag, None))
        return out

    def open(
        self, bucket: str, key: str, version_id: str | None = None, *, start: int = 0, end: int | None = None
    ) -> Any:
        """A stream of the object (or of bytes ``start`` to ``end``, exclusive)."""
        extra: dict[str, Any] = _version(version_id)
        if start or end is not None:
            extra["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        return self.s3.get_object(Bucket=bucket, Key=key, **extra)["Body"]

    def read_head(self, bucket: str, key: str, version_id: str | None, n: int) -> bytes:
        """The first ``n`` bytes (fewer if the object is shorter)."""
        data: bytes = self.open(bucket, key, version_id, end=n).read()
        return data

    def opener(self, bucket: str, key: str, version_id: str | None) -> Callable[[], Any]:
        """Opens the object on a client of its own: for a forked child (a fork carries no connections)."""

        def open_body() -> Any:
            extra: dict[str, Any] = _version(version_id)
            return self.new_s3().get_object(Bucket=bucket, Key=key, **extra)["Body"]

        return open_body

    def download(self, bucket: str, key: str, version_id: str | None, spool: IO[bytes]) -> None:
        """The whole object into ``spool``, in parallel ranges."""
        self.s3.download_fileobj(
            bucket, key, spool, ExtraArgs=_version(version_id) or None, Config=DOWNLOAD_PARTS
        )
        spool.flush()

    def ranged(self, bucket: str, key: str, version_id: str | None, size: int) -> RangedObject:
        return RangedObject(self.s3, bucket, key, version_id, size)


class RangedObject(io.RawIOBase):
    """A read-only, seekable view of one S3 object version: each read is one ranged GET.

    Made for :mod:`zipfile`, which reads a zip's end records and its central directory in a handful
    of reads; never for streaming the members.
    """

    def __init__(self, s3: S3Client, bucket: str, key: str, version_id: str | None, size: int) -> None:
        super().__init__()
        self._get = {"Bucket": bucket, "Key": key, **_version(version_id)}
        self._s3 = s3
        self._size = size
        self._pos = 0
        self.requests = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        self.requests += 1
        body = self._s3.get_object(**self._get, Range=f"bytes={self._pos}-{end - 1}")["Body"]  # type: ignore[arg-type]
        data: bytes = body.read()
        self._pos += len(data)
        return data

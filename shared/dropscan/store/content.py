"""Upstream contents for review evidence, in the upstream bucket under ``content/<package>/``.

Written at ingest, read by the evidence step of triage (:mod:`dropscan.stages.evidence`):

- ``packs/<id>-<n>.pack``: text files of upstream, each compressed on its own (a zstd frame; packs
  written before hold zlib streams, told apart by their first bytes) and laid end to
  end in segments of about 8 MiB, so that a scan reads the few it needs with ranged GETs, neighbours
  in one GET.
- ``releases/<version>.json.gz``: where each text file of a release lies (SHA-256 -> pack, offset,
  length). A scan reads the one of its component's release.
- ``history/<nn>.json.gz`` (ingest-git ``--history``): every revision of every path (SHA-256, commit,
  date, where its content lies), in :data:`SHARDS` shards by path.
- ``hunks/<nn>.json.gz`` (``--history``): the change hunks of every commit keyed by their fingerprint
  (removed and added lines), in :data:`SHARDS` shards, so that a scan asks for the few it met.
- ``sketches/<version>.json.gz``: a line sketch of each text file of a release, to find the upstream
  file an added file was copied from (:mod:`dropscan.audit.similarity`).
- ``meta.json``: what the package has (``history``: true once a history was ingested).

Everything lives in S3 rather than in the upstream table: ingests of one package add their own objects
(archives) or run one after the other (git, under the package's git state), so nothing here is read,
widened and written back concurrently, and the embedded stack keeps it as files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import zlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import zstandard

from dropscan.keys import (
    CONTENT_PREFIX,
    meta_key,
    release_index_key,
    shard_key,
    sketches_key,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: shards of the history and hunk indexes
SHARDS = 64
#: upstream files bigger than this are not stored (no diff is shown for them)
MAX_STORED = 4 * 1024 * 1024
#: neighbouring blobs closer than this in a pack are read in one ranged GET
COALESCE_GAP = 1024 * 1024
#: a pack object is closed past this size and the next one begun
SEGMENT_BYTES = 8 * 1024 * 1024
#: a folder holding ``content/`` objects, read where the bucket lacks them and written instead of the
#: bucket: the embedded stack's data dir (uploading its packs into moto at each start cost minutes; a
#: scan reads a few)
LOCAL_ENV = "DROPSCAN_LOCAL_CONTENT"
#: zstd's fastest level: fewer bytes than zlib's fastest, in a third of its time (docs/design.md)
_LEVEL = 1
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def unpack(packed: bytes) -> bytes:
    """One stored content: a zstd frame, or (packs written before zstd) a zlib stream."""
    if packed[:4] == _ZSTD_MAGIC:
        return zstandard.ZstdDecompressor().decompress(packed)
    return zlib.decompress(packed)


#: where a blob lies: (pack key, offset, compressed length)
Location = tuple[str, int, int]


def path_shard(path: str) -> int:
    return int.from_bytes(hashlib.sha1(path.encode(), usedforsecurity=False).digest()[:2], "big") % SHARDS


def hunk_shard(fingerprint: str) -> int:
    return int(fingerprint[:4], 16) % SHARDS


class PackWriter:
    """Packs being written to local files in ``folder``: a new segment (object) every
    :data:`SEGMENT_BYTES`, so that a ranged GET never makes the store copy a whole release's texts (moto
    copies the object for each); ``locations`` says where each blob went, ``segments`` what to upload."""

    def __init__(self, folder: str | os.PathLike[str], key_prefix: str) -> None:
        self.folder = Path(folder)
        self.key_prefix = key_prefix
        self.segments: list[tuple[Path, str]] = []
        self.locations: dict[str, Location] = {}
        self.raw_bytes = 0
        self.packed_bytes = 0
        self._file: Any = None
        self.offset = 0
        self._zstd = zstandard.ZstdCompressor(level=_LEVEL)

    def __getstate__(self) -> dict[str, Any]:
        """A closed writer crosses a pipe (an archive's is filled in a forked child); its compressor
        does not pickle and is made again."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_zstd", "_file")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _file=None, _zstd=zstandard.ZstdCompressor(level=_LEVEL))

    def add(self, sha256: str, data: bytes) -> None:
        if sha256 in self.locations or len(data) > MAX_STORED:
            return
        packed = self._zstd.compress(data)
        if self._file is None or self.offset >= SEGMENT_BYTES:
            self._next()
        self._file.write(packed)
        self.locations[sha256] = (self.segments[-1][1], self.offset, len(packed))
        self.offset += len(packed)
        self.raw_bytes += len(data)
        self.packed_bytes += len(packed)

    def _next(self) -> None:
        if self._file is not None:
            self._file.close()
        n = len(self.segments)
        path = self.folder / f"{n:05d}.pack"
        self.segments.append((path, f"{self.key_prefix}-{n:05d}.pack"))
        self._file = open(path, "wb")  # noqa: SIM115 - closed by _next() or close()
        self.offset = 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def flush(self) -> None:
        """Every blob added so far on disk (for a copy of this writer filled in a forked child)."""
        if self._file is not None:
            self._file.flush()

    def on_disk(self) -> list[tuple[Path, str]]:
        """The segments in ``folder``, keyed as :attr:`segments` keys them: what a copy of this writer
        (filled in a forked child, whose ``segments`` stay there) wrote."""
        return [(p, f"{self.key_prefix}-{p.stem}.pack") for p in sorted(self.folder.glob("*.pack"))]

    def __enter__(self) -> PackWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gz_json(data: Any) -> bytes:
    # orjson: the same compact JSON, much faster than json (an ingest's hunk index is tens of MB);
    # hex digests and offsets: gzip's fastest level compresses them almost as much as its best
    return gzip.compress(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), compresslevel=1, mtime=0)


@dataclass
class ContentStats:
    gets: int = 0
    bytes_read: int = 0
    objects: dict[str, int] = field(default_factory=dict)


class ContentStore:
    """The ``content/`` objects of the upstream bucket (see the module docstring)."""

    def __init__(self, s3: S3Client, bucket: str, *, threads: int = 8) -> None:
        self.s3 = s3
        self.bucket = bucket
        self.threads = threads
        self.stats = ContentStats()
        local = os.environ.get(LOCAL_ENV)
        self.local = Path(local) if local else None

    def _local(self, key: str) -> Path | None:
        """The local copy of an object the bucket lacks (see :data:`LOCAL_ENV`), if there is one."""
        if self.local is None:
            return None
        path = self.local / key.removeprefix(CONTENT_PREFIX)
        return path if path.is_file() else None

    # ------------------------------------------------------------------ written at ingest
    def put_pack(self, segments: Iterable[tuple[Path, str]]) -> None:
        """Upload a pack's segment files; they are the store's after this (moved into place locally)."""
        for path, key in segments:
            if self.local is None:
                self.s3.upload_file(str(path), self.bucket, key)
            else:
                self._put_local(key, partial(shutil.move, path))

    def _put_local(self, key: str, write: Callable[[Path], object]) -> None:
        """The embedded stack keeps its ``content/`` beside its database and reads it there
        (:meth:`_local`): written once, to disk, instead of into moto and back out at its save."""
        assert self.local is not None
        dest = self.local / key.removeprefix(CONTENT_PREFIX)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        write(tmp)
        tmp.replace(dest)  # never leave a half-written object behind

    def put_release_index(self, package: str, version: str, where: Mapping[str, Location]) -> None:
        packs = sorted({loc[0] for loc in where.values()})
        number = {k: i for i, k in enumerate(packs)}
        blobs = {sha: [number[k], off, n] for sha, (k, off, n) in where.items()}
        self._put(release_index_key(package, version), {"packs": packs, "blobs": blobs})

    def put_sketches(self, package: str, version: str, sketches: Mapping[str, str]) -> None:
        """The line sketches (audit.similarity, encoded) of the release's text files, by SHA-256."""
        self._put(sketches_key(package, version), dict(sketches))

    def put_shards(self, package: str, kind: str, shards: Mapping[int, Any]) -> None:
        """Each shard, in threads: one's compression and write (no GIL) beside another's encoding."""

        def put(item: tuple[int, Any]) -> None:
            self._put(shard_key(package, kind, item[0]), item[1])

        with ThreadPoolExecutor(max(1, min(self.threads, len(shards)))) as pool:
            list(pool.map(put, shards.items()))

    def put_meta(self, package: str, meta: Mapping[str, Any]) -> None:
        body = json.dumps(dict(meta)).encode()
        if self.local is None:
            self.s3.put_object(Bucket=self.bucket, Key=meta_key(package), Body=body)
        else:
            self._put_local(meta_key(package), lambda dest: dest.write_bytes(body))

    def _put(self, key: str, data: Any) -> None:
        body = _gz_json(data)
        if self.local is None:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentEncoding="gzip")
        else:
            self._put_local(key, lambda dest: dest.write_bytes(body))

    # ------------------------------------------------------------------ read by scans (and ingests)
    def _get_json(self, key: str) -> Any:
        if self.local is not None:  # the local stack writes content/ to its folder only (_put_local)
            local = self._local(key)
            if local is None:
                return None
            body = local.read_bytes()
        else:
            try:
                body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except self.s3.exceptions.NoSuchKey:
                return None
        self.stats.gets += 1
        self.stats.bytes_read += len(body)
        return json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)

    def meta(self, package: str) -> dict[str, Any]:
        found = self._get_json(meta_key(package))
        return dict(found) if isinstance(found, dict) else {}

    def release_index(self, package: str, version: str) -> dict[str, Location] | None:
        """SHA-256 -> where the content lies, for the text files of a release; None: none stored."""
        data = self._get_json(release_index_key(package, version))
        if data is None:
            return None
        packs = data["packs"]
        return {sha: (packs[i], off, n) for sha, (i, off, n) in data["blobs"].items()}

    def sketches(self, package: str, version: str) -> dict[str, str]:
        found = self._get_json(sketches_key(package, version))
        return dict(found) if isinstance(found, dict) else {}

    def shards(self, package: str, kind: str, wanted: Iterable[int]) -> dict[int, Any]:
        """The shards asked for (absent ones left out), read in parallel."""
        numbers = sorted(set(wanted))
        with ThreadPoolExecutor(max(1, min(self.threads, len(numbers)))) as pool:
            found = pool.map(lambda n: self._get_json(shard_key(package, kind, n)), numbers)
            return {n: data for n, data in zip(numbers, found, strict=True) if data is not None}

    def blobs(self, where: Mapping[str, Location]) -> dict[str, bytes]:
        """The contents at ``where`` (SHA-256 -> location), neighbours in a pack read in one GET."""
        reads: list[tuple[str, int, int, list[tuple[str, int, int]]]] = []
        by_pack: dict[str, list[tuple[int, int, str]]] = {}
        for sha, (key, off, n) in where.items():
            by_pack.setdefault(key, []).append((off, n, sha))
        for key, spans in by_pack.items():
            spans.sort()
            first_off, first_n, first_sha = spans[0]
            start, end, members = first_off, first_off + first_n, [(first_sha, first_off, first_n)]
            for off, n, sha in spans[1:]:
                if off - end > COALESCE_GAP:
                    reads.append((key, start, end, members))
                    start, end, members = off, off + n, []
                end = max(end, off + n)
                members.append((sha, off, n))
            reads.append((key, start, end, members))

        def read(job: tuple[str, int, int, list[tuple[str, int, int]]]) -> dict[str, bytes]:
            key, start, end, members = job
            local = self._local(key)
            if local is not None:  # packs never change: a local copy is the object
                with local.open("rb") as f:
                    f.seek(start)
                    body = f.read(end - start)
            else:
                got = self.s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}")
                body = got["Body"].read()
            self.stats.gets += 1
            self.stats.bytes_read += len(body)
            return {sha: unpack(body[off - start : off - start + n]) for sha, off, n in members}

        out: dict[str, bytes] = {}
        with ThreadPoolExecutor(max(1, min(self.threads, len(reads)))) as pool:
            for got in pool.map(read, reads):
                out.update(got)
        return out

    # ------------------------------------------------------------------ kept beside a local database
    def save_to(self, folder: Path) -> int:
        """Copy every ``content/`` object of the bucket into ``folder`` (the embedded stack keeps them
        beside its database dump, which holds digests and path lists only, and reads them from there:
        :data:`LOCAL_ENV`); returns how many were written.

        A pack is never rewritten once uploaded (each ingest writes a new one), so one already in
        ``folder`` at its size is left alone: a save after a small ingest does not copy every pack.
        """
        written = 0
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=CONTENT_PREFIX
        ):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                path = folder / key.removeprefix(CONTENT_PREFIX)
                if key.endswith(".pack") and path.is_file() and path.stat().st_size == obj["Size"]:
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(path.name + ".tmp")
                self.s3.download_file(self.bucket, key, str(tmp))
                tmp.replace(path)  # never leave a half-written object behind
                written += 1
        return written

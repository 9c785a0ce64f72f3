"""What a supplier or an engineer does with a running stack: upload upstreams and drops, await results.

The same calls drive the embedded moto stack (a dispatcher delivers the events in this process), a
``dropscan up`` server, or the deployed stack on AWS (the functions run there; this side only waits).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from dropscan.keys import (
    firmware_key,
    git_report_key,
    manifest_key,
    product_key,
    release_error_key,
    release_key,
    scan_id_for,
)
from dropscan.models import Decision, Trust
from dropscan.store.batch import BatchTable
from dropscan.store.decisions import DecisionStore
from dropscan.store.scans import ScanStore
from dropscan.store.upstream import UpstreamDB
from dropscan.store.work import object_exists

Pump = Callable[[Callable[[], bool], float], bool]

# One PUT (S3 takes up to 5 GB so) gives one ObjectCreated event; above that, multipart in 256 MB parts.
SINGLE_PUT = TransferConfig(multipart_threshold=5 * 1024**3, multipart_chunksize=256 * 1024**2)


def poll(done: Callable[[], bool], timeout: float) -> bool:
    """The pump for a remote stack: the functions run elsewhere, so just look again now and then."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(1.0)
    return True


@dataclass(frozen=True)
class StackNames:
    drops_bucket: str
    results_bucket: str
    upstream_bucket: str
    upstream_table: str
    topic_arn: str
    scans_table: str = ""
    decisions_table: str = ""

    @classmethod
    def from_outputs(cls, outputs: dict[str, str]) -> StackNames:
        return cls(
            drops_bucket=outputs["DropsBucketName"],
            results_bucket=outputs["ResultsBucketName"],
            upstream_bucket=outputs["UpstreamBucketName"],
            upstream_table=outputs["UpstreamTableName"],
            topic_arn=outputs["NotificationTopicArn"],
            scans_table=outputs.get("ScansTableName", ""),
            decisions_table=outputs.get("DecisionsTableName", ""),
        )

    @classmethod
    def from_stack(
        cls, session: boto3.session.Session, stack: str, endpoint_url: str | None = None
    ) -> StackNames:
        cfn = session.client("cloudformation", endpoint_url=endpoint_url)
        outputs = cfn.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
        return cls.from_outputs({o["OutputKey"]: o["OutputValue"] for o in outputs})


class IngestFailed(RuntimeError):
    pass


class Client:
    def __init__(
        self,
        session: boto3.session.Session,
        names: StackNames,
        *,
        pump: Pump = poll,
        endpoint_url: str | None = None,
        db_concurrency: int = 4,
        db_batch: type[BatchTable] = BatchTable,
    ) -> None:
        """``db_batch``: how the upstream table's batches are read and written (the embedded stack's
        own, :class:`dropscan.local.moto_table.MotoBatchTable`; else BatchGetItem/BatchWriteItem)."""
        self.names = names
        self.pump = pump
        # a checksum only where S3 requires one: botocore would otherwise send an upload aws-chunked with a
        # trailing checksum, which it and moto both reassemble in time quadratic in its size (docs/design.md)
        upload = Config(request_checksum_calculation="when_required")
        self.s3 = session.client("s3", endpoint_url=endpoint_url, config=upload)
        dynamodb = session.client("dynamodb", endpoint_url=endpoint_url)
        table = names.upstream_table
        self.db = UpstreamDB(dynamodb, table, batch=db_batch(dynamodb, table, concurrency=db_concurrency))
        self.changed = False  # whether this client altered the upstream database
        self.decisions = DecisionStore(dynamodb, names.decisions_table)
        region = session.region_name or "us-east-1"
        self.scans = ScanStore(names.scans_table, region=region, host=endpoint_url)
        self.decided = False  # whether this client recorded decisions

    def existing_decisions(self, decisions: Sequence[Decision]) -> dict[tuple[str, str], Decision]:
        return self.decisions.existing(decisions)

    def write_decisions(self, decisions: Sequence[Decision]) -> None:
        if decisions:
            self.decisions.put(decisions)
            self.decided = True

    def history(self, supplier: str, product: str) -> list[dict[str, Any]]:
        """The scans of a supplier's product, oldest first."""
        return list(reversed(list(self.scans.of_product(product_key(supplier, product)))))

    def set_trust(self, package: str, trust: Trust) -> None:
        self.db.set_trust(package, trust)
        self.changed = True

    def _exists(self, bucket: str, key: str) -> bool:
        return object_exists(self.s3, bucket, key)

    def ingest(
        self, archive: Path, package: str, version: str, *, trust: Trust | None = None, timeout: float = 3600
    ) -> None:
        """Upload a release to upstream/<package>/<version>/ and wait until the ingest function is done."""
        known = self.db.packages([package]).get(package)
        if known and version in known.versions:
            if trust and trust is not known.trust:
                self.set_trust(package, trust)
            return  # already ingested: the database keeps releases between runs
        meta = {"trust": trust.value} if trust else {}
        key = f"upstream/{package}/{version}/{archive.name}"
        self.s3.upload_file(
            str(archive), self.names.upstream_bucket, key, ExtraArgs={"Metadata": meta}, Config=SINGLE_PUT
        )
        error_key = release_error_key(package, version)

        def done() -> bool:
            if self._exists(self.names.upstream_bucket, error_key):
                return True
            info = self.db.packages([package]).get(package)
            return bool(info and version in info.versions)

        self.changed = True
        if not self.pump(done, timeout):
            raise IngestFailed(f"ingest of {package}@{version} did not finish within {timeout:.0f} s")
        if self._exists(self.names.upstream_bucket, error_key):
            body = self.s3.get_object(Bucket=self.names.upstream_bucket, Key=error_key)["Body"].read()
            raise IngestFailed(f"{package}@{version}: {json.loads(body)['error']}")
        assert self._exists(self.names.upstream_bucket, release_key(package, version))

    def ingest_bundle(
        self, bundle: Path, package: str, *, trust: Trust | None = None, timeout: float = 3600
    ) -> dict[str, Any]:
        """Upload a git bundle to upstream/<package>/git/<name>.bundle, wait until its ingest (all its parts)
        is done, and return the ingest's report."""
        key = f"upstream/{package}/git/{bundle.name.removesuffix('.bundle')}.bundle"
        meta = {"trust": trust.value} if trust else {}
        self.s3.upload_file(
            str(bundle), self.names.upstream_bucket, key, ExtraArgs={"Metadata": meta}, Config=SINGLE_PUT
        )
        etag = self.s3.head_object(Bucket=self.names.upstream_bucket, Key=key)["ETag"].strip('"')
        source = f"s3://{self.names.upstream_bucket}/{key}"
        found: dict[str, Any] = {}

        def done() -> bool:
            try:
                body = self.s3.get_object(Bucket=self.names.upstream_bucket, Key=git_report_key(package))[
                    "Body"
                ]
            except self.s3.exceptions.NoSuchKey:
                return False
            report = json.loads(body.read())
            if (
                report.get("repository") == source
                and report.get("bundle_etag") == etag
                and report["complete"]
            ):
                found.update(report)
                return True
            return False

        self.changed = True
        if not self.pump(done, timeout):
            raise IngestFailed(f"ingest of {key} did not finish within {timeout:.0f} s")
        return found

    def upload_drop(
        self, drop: Path, supplier: str, *, metadata: dict[str, str] | None = None
    ) -> tuple[str, str]:
        """Upload to drops/<supplier>/<name>; returns (key, scan id)."""
        key = f"drops/{supplier}/{drop.name}"
        self.s3.upload_file(
            str(drop), self.names.drops_bucket, key, ExtraArgs={"Metadata": metadata or {}}, Config=SINGLE_PUT
        )
        etag = self.s3.head_object(Bucket=self.names.drops_bucket, Key=key)["ETag"].strip('"')
        return key, scan_id_for(self.names.drops_bucket, key, etag)

    def upload_firmware(self, image: Path, supplier: str, drop_name: str) -> str:
        """Upload a firmware image beside the drop ``drops/<supplier>/<drop_name>``; returns its key."""
        key = firmware_key(supplier, drop_name, image.name)
        self.s3.upload_file(str(image), self.names.drops_bucket, key, Config=SINGLE_PUT)
        return key

    def download_reports(self, manifest: dict[str, Any], folder: Path) -> list[Path]:
        """The scan's reports (HTML, SPDX, CycloneDX) into ``folder``, named as in the results bucket."""
        out = []
        for key in (manifest.get("reports") or {}).values():
            path = folder / key.rsplit("/", 1)[-1]
            self.s3.download_file(self.names.results_bucket, key, str(path))
            out.append(path)
        return out

    def wait_manifest(
        self, supplier: str, scan_id: str, *, timeout: float = 3600, firmware: Sequence[str] = ()
    ) -> dict[str, Any] | None:
        """The scan's manifest once written and, with ``firmware`` (the keys of its images), once revised
        with a section for each; None when that did not happen within ``timeout`` seconds."""
        key = manifest_key(supplier, scan_id)
        # the manifest as last read and its ETag: read again only when revised (a kernel drop's is 30 MB,
        # 2 s to parse, and the first revision is looked at after every delivery until the next)
        read: dict[str, Any] = {}

        def current() -> dict[str, Any]:
            etag = self.s3.head_object(Bucket=self.names.results_bucket, Key=key)["ETag"]
            if read.get("etag") != etag:
                got = self.s3.get_object(Bucket=self.names.results_bucket, Key=key)
                read.update(etag=got["ETag"], manifest=json.loads(got["Body"].read()))
            manifest: dict[str, Any] = read["manifest"]
            return manifest

        def done() -> bool:
            if not self._exists(self.names.results_bucket, key):
                return False
            if not firmware:
                return True
            images = (current().get("firmware") or {}).get("images") or []
            return set(firmware) <= {(s.get("source") or {}).get("key") for s in images}

        if not self.pump(done, timeout):
            return None
        return current() if firmware else self.manifest(supplier, scan_id)

    def manifest(self, supplier: str, scan_id: str) -> dict[str, Any]:
        """The scan's manifest, written (NoSuchKey before)."""
        key = manifest_key(supplier, scan_id)
        data: dict[str, Any] = json.loads(
            self.s3.get_object(Bucket=self.names.results_bucket, Key=key)["Body"].read()
        )
        return data


def connect(stack: str, endpoint_url: str | None = None) -> Client:
    """A client of a running stack: ``dropscan up`` (``endpoint_url``) or a deployed one (the usual AWS
    credentials), its names read from the stack's outputs."""
    session = boto3.session.Session()
    return Client(session, StackNames.from_stack(session, stack, endpoint_url), endpoint_url=endpoint_url)

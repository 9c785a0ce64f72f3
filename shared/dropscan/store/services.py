"""The AWS resources one stage works with, bundled so that handlers build them once and pass them in."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from typing import TYPE_CHECKING

import boto3
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from botocore.config import Config

from dropscan.settings import Settings, get_settings
from dropscan.settings import reset as settings_reset
from dropscan.store.content import ContentStore
from dropscan.store.decisions import DecisionStore
from dropscan.store.objects import Objects
from dropscan.store.releases import Releases
from dropscan.store.scans import ScanStore
from dropscan.store.upstream import UpstreamDB
from dropscan.store.upstream_literals import UpstreamLiterals
from dropscan.store.work import Work

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient

# Lambda's default pool of 10 connections would cap the concurrent batch calls.
_CONFIG = Config(max_pool_connections=32, retries={"mode": "standard", "max_attempts": 6})


@dataclass
class Services:
    settings: Settings
    session: boto3.session.Session | None = None

    def _client(self, name: str, extra: Config | None = None) -> object:
        session = self.session or boto3.session.Session()
        config = _CONFIG.merge(extra) if extra else _CONFIG
        return session.client(  # type: ignore[call-overload]
            name, region_name=self.settings.region, endpoint_url=self.settings.endpoint_url, config=config
        )

    @cached_property
    def s3(self) -> S3Client:
        return self.new_s3()

    def new_s3(self) -> S3Client:
        """An S3 client of its own (for a forked child: it must not use its parent's connections)."""
        # SigV4 for the pre-signed report links (boto3 would otherwise sign some with SigV2); checksums
        # only where required, as in dropscan.store.stack (aws-chunked bodies cost quadratic time on moto)
        config = Config(signature_version="s3v4", request_checksum_calculation="when_required")
        return self._client("s3", config)  # type: ignore[return-value]

    @cached_property
    def sqs(self) -> SQSClient:
        return self._client("sqs")  # type: ignore[return-value]

    @cached_property
    def sns(self) -> SNSClient:
        return self._client("sns")  # type: ignore[return-value]

    @cached_property
    def dynamodb(self) -> DynamoDBClient:
        # The table checks every request itself; botocore's client-side check walks each attribute of
        # every item again (a tenth of an ingest's writing on the embedded stack, see docs/design.md).
        return self._client("dynamodb", Config(parameter_validation=False))  # type: ignore[return-value]

    @cached_property
    def work(self) -> Work:
        """Work files, queues and topic of the stack."""
        return Work(self.settings, self.s3, self.sqs, self.sns)

    @cached_property
    def objects(self) -> Objects:
        """Reads of uploaded drops and upstream archives."""
        # ``new_s3`` resolved at each call, not bound now: a forked child asks for a client of its own
        return Objects(self.s3, lambda: self.new_s3())

    @cached_property
    def releases(self) -> Releases:
        """Release path lists and ingest reports in the upstream bucket."""
        return Releases(self.s3, self.settings.upstream_bucket)

    @cached_property
    def scans(self) -> ScanStore:
        return ScanStore(
            self.settings.scans_table, region=self.settings.region, host=self.settings.endpoint_url
        )

    @cached_property
    def idempotency(self) -> DynamoDBPersistenceLayer:
        """Powertools' idempotency records (see ``dropscan.store.idempotency``), on this bundle's client."""
        return DynamoDBPersistenceLayer(
            table_name=self.settings.idempotency_table, boto3_client=self.dynamodb
        )

    def content(self) -> ContentStore:
        """Upstream contents, history and hunk indexes for review evidence (a fresh view, own counts)."""
        return ContentStore(self.s3, self.settings.upstream_bucket)

    def decisions(self) -> DecisionStore:
        """Auditors' decisions (read only here: the functions never write them), with its own counts."""
        return DecisionStore(
            self.dynamodb,
            self.settings.decisions_table,
            concurrency=self.settings.dynamodb_concurrency,
            forked_reads=self.settings.dynamodb_reads == "forked",
        )

    def upstream(self) -> UpstreamDB:
        """A fresh view of the upstream table, with its own call counts."""
        return UpstreamDB(
            self.dynamodb,
            self.settings.upstream_table,
            concurrency=self.settings.dynamodb_concurrency,
            forked_reads=self.settings.dynamodb_reads == "forked",
        )

    def literals(self) -> UpstreamLiterals:
        """Upstream releases' literals in the upstream table, their ingest reports for what each recorded."""
        return UpstreamLiterals(self.dynamodb, self.settings.upstream_table, self.releases)


@cache
def current_services() -> Services:
    """The handlers' services, built from the environment on first use (never at import time)."""
    return Services(get_settings())


def reset() -> None:
    """Forget cached settings and clients (the local stack calls this after it sets the environment)."""
    settings_reset()
    current_services.cache_clear()

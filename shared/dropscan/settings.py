"""Typed settings of the deployed functions, read once from the environment the template sets."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only the unpack and ingest functions need libarchive loaded
    from dropscan.archive import Limits
    from dropscan.audit.triage_plan import TriageLimits


@dataclass(frozen=True, slots=True)
class Settings:
    drops_bucket: str
    results_bucket: str
    upstream_bucket: str
    upstream_table: str
    scans_table: str
    chunk_queue_url: str
    finalize_queue_url: str
    topic_arn: str
    idempotency_table: str
    decisions_table: str = ""  # auditors' decisions, read by finalize
    triage_queue_url: str = ""
    triage_detector: str = "auto"  # auto | scancode | tags
    triage_workers: int = 1  # processes for the review files; 0: one per CPU
    triage_max_files: int = 20_000  # distinct review contents detected in full (TriageMaxFiles)
    triage_max_mib: int = 512  # review content held for triage at once (TriageMaxMiB)
    triage_budget_seconds: float = 600.0  # detection time before the rest is read for tags only
    triage_max_parts: int = 1  # invocations a review set past those limits is cut into (TriageMaxParts)
    report_link_expiry: int = 43200  # seconds; also bounded by the function role's session
    desk_url: str = ""  # the review desk's address (the e-mail links to a drop's page there); "" none
    scratch_dir: str | None = None  # where triage spools the drop (Lambda: /tmp)
    chunk_size: int = 1000  # most files a chunk holds
    chunk_keys: int = 1000  # most new lookup keys a chunk holds: 10 BatchGetItem calls
    max_nesting_depth: int = 8
    # dropscan.archive.Limits, in the template's units
    max_unpacked_gib: int = 64
    max_files: int = 2_000_000
    max_compression_ratio: int = 1000
    ratio_check_after_mib: int = 64
    max_member_gib: int = 16
    max_spool_gib: int = 8
    region: str = "us-east-1"
    endpoint_url: str | None = None
    unpack_queue_url: str = ""  # the upload queue: unpack sends the parts it fans out to it
    ingest_queue_url: str = ""  # the ingest queue: a git bundle's ingest sends itself its next part
    ingest_budget_seconds: int = 600  # a git bundle's ingest stops at a checkpoint past this, goes on later
    fan_out_mib: int = 64  # nested archives at least this big are unpacked by an invocation of their own
    unpack_budget_seconds: int = 600  # a top-level tar is walked this long, then resumed by another one
    unpack_budget_mib: int = 0  # ... or this many MiB of members (0: no byte budget)
    zip_part_mib: int = 1024  # a zip upload bigger than this is walked in ranges of about this size
    scan_deadline_minutes: float = 60.0  # the sweeper's; see ScanDeadlineMinutes in template.yaml
    upload_dlq_url: str | None = None
    dynamodb_concurrency: int = 4  # batch calls in flight at once on the upstream table
    dynamodb_reads: str = "threads"  # threads | forked: how a lookup's calls run at once
    ingest_literals: bool = True  # an ingest records its release's literals (INGEST_LITERALS=0: not)
    firmware_queue_url: str = ""  # the firmware queue: notify sends it a scan whose images are not in yet
    firmware_max_mib: int = 1024  # a firmware image bigger than this is not read (FirmwareMaxMiB)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        e = dict(os.environ if env is None else env)
        missing = [k for k in _REQUIRED if not e.get(k)]
        if missing:
            raise RuntimeError(f"missing environment variables: {', '.join(missing)}")
        return cls(
            drops_bucket=e["DROPS_BUCKET"],
            results_bucket=e["RESULTS_BUCKET"],
            upstream_bucket=e["UPSTREAM_BUCKET"],
            upstream_table=e["UPSTREAM_TABLE"],
            scans_table=e["SCANS_TABLE"],
            chunk_queue_url=e["CHUNK_QUEUE_URL"],
            finalize_queue_url=e["FINALIZE_QUEUE_URL"],
            topic_arn=e["TOPIC_ARN"],
            triage_queue_url=e.get("TRIAGE_QUEUE_URL", ""),
            triage_detector=e.get("TRIAGE_DETECTOR", "auto"),
            triage_workers=int(e.get("TRIAGE_WORKERS", "1")),
            triage_max_files=int(e.get("TRIAGE_MAX_FILES", "20000")),
            triage_max_mib=int(e.get("TRIAGE_MAX_MIB", "512")),
            triage_budget_seconds=float(e.get("TRIAGE_BUDGET_SECONDS", "600")),
            triage_max_parts=int(e.get("TRIAGE_MAX_PARTS", "1")),
            report_link_expiry=int(e.get("REPORT_LINK_EXPIRY", "43200")),
            desk_url=e.get("DESK_URL", ""),
            scratch_dir=e.get("SCRATCH_DIR") or None,
            idempotency_table=e["IDEMPOTENCY_TABLE"],
            decisions_table=e.get("DECISIONS_TABLE", ""),
            chunk_size=int(e.get("CHUNK_SIZE", "1000")),
            chunk_keys=int(e.get("CHUNK_KEYS", "1000")),
            max_nesting_depth=int(e.get("MAX_NESTING_DEPTH", "8")),
            max_unpacked_gib=int(e.get("MAX_UNPACKED_GIB", "64")),
            max_files=int(e.get("MAX_FILES", "2000000")),
            max_compression_ratio=int(e.get("MAX_COMPRESSION_RATIO", "1000")),
            ratio_check_after_mib=int(e.get("RATIO_CHECK_AFTER_MIB", "64")),
            max_member_gib=int(e.get("MAX_MEMBER_GIB", "16")),
            max_spool_gib=int(e.get("MAX_SPOOL_GIB", "8")),
            region=e.get("AWS_REGION") or e.get("AWS_DEFAULT_REGION") or "us-east-1",
            endpoint_url=e.get("AWS_ENDPOINT_URL") or None,
            unpack_queue_url=e.get("UNPACK_QUEUE_URL", ""),
            ingest_queue_url=e.get("INGEST_QUEUE_URL", ""),
            ingest_budget_seconds=int(e.get("INGEST_BUDGET_SECONDS", "600")),
            fan_out_mib=int(e.get("FAN_OUT_MIB", "64")),
            unpack_budget_seconds=int(e.get("UNPACK_BUDGET_SECONDS", "600")),
            unpack_budget_mib=int(e.get("UNPACK_BUDGET_MIB", "0")),
            zip_part_mib=int(e.get("ZIP_PART_MIB", "1024")),
            scan_deadline_minutes=float(e.get("SCAN_DEADLINE_MINUTES", "60")),
            upload_dlq_url=e.get("UPLOAD_DLQ_URL") or None,
            dynamodb_concurrency=int(e.get("DYNAMODB_CONCURRENCY", "4")),
            dynamodb_reads=e.get("DYNAMODB_READS", "threads"),
            ingest_literals=e.get("INGEST_LITERALS", "1") != "0",
            firmware_queue_url=e.get("FIRMWARE_QUEUE_URL", ""),
            firmware_max_mib=int(e.get("FIRMWARE_MAX_MIB", "1024")),
        )

    def triage_limits(self) -> TriageLimits:
        """What one triage invocation reads in full, from the template parameters."""
        from dropscan.audit.triage_plan import TriageLimits

        return TriageLimits(
            max_files=self.triage_max_files,
            max_mib=self.triage_max_mib,
            budget_seconds=self.triage_budget_seconds,
            max_parts=self.triage_max_parts,
        )

    def walk_limits(self) -> Limits:
        """The archive walker's bounds, from the template parameters."""
        from dropscan.archive import Limits

        return Limits(
            total_bytes=self.max_unpacked_gib << 30,
            files=self.max_files,
            depth=self.max_nesting_depth,
            ratio=self.max_compression_ratio,
            ratio_after=self.ratio_check_after_mib << 20,
            member_bytes=self.max_member_gib << 30,
            spool_bytes=self.max_spool_gib << 30,
        )


_REQUIRED = (
    "DROPS_BUCKET",
    "RESULTS_BUCKET",
    "UPSTREAM_BUCKET",
    "UPSTREAM_TABLE",
    "SCANS_TABLE",
    "CHUNK_QUEUE_URL",
    "FINALIZE_QUEUE_URL",
    "TOPIC_ARN",
    "IDEMPOTENCY_TABLE",
)


@cache
def get_settings() -> Settings:
    """The handlers' settings; built on first use, not at import time."""
    return Settings.from_env()


def reset() -> None:
    """Forget cached settings (the local stack calls this after it sets the environment)."""
    get_settings.cache_clear()

"""What the unpack stage's progress reports cost: the unpack of a drop with and without them.

    python bench/unpack_progress.py DROP [--runs 3]

The embedded stack's unpack handler walks DROP (under a new key each run, so a new scan) with reports
every PROGRESS_EVERY_S (the default), never, and after every record (the worst case, which prices one
report); runs alternate, medians of ``--runs``. Prints the stage's seconds and the UpdateItem calls
the reports made.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

from dropscan.keys import scan_id_for
from dropscan.local.dispatcher import load_handler
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.stages import unpack_send
from dropscan.store.scans import ScanStore
from dropscan.store.services import current_services

MODES = {"default": unpack_send.PROGRESS_EVERY_S, "never": math.inf, "every record": 0.0}


def event(bucket: str, key: str) -> dict[str, Any]:
    """The upload queue's message for an S3 upload of ``key``."""
    s3 = {"bucket": {"name": bucket}, "object": {"key": key}}
    body = {"Records": [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put", "s3": s3}]}
    record = {"messageId": key, "receiptHandle": "r", "body": json.dumps(body), "attributes": {}}
    record |= {"messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs", "awsRegion": "us-east-1"}
    return {"Records": [record | {"eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q"}]}


class Context:
    function_name, memory_limit_in_mb, aws_request_id = "unpack", 3008, "bench"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:unpack"

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


def run_once(stack: EmbeddedStack, drop: Path, n: int, every: float) -> float:
    key = f"drops/bench/{n}-{drop.name}"
    stack.client.s3.upload_file(str(drop), stack.names.drops_bucket, key)
    unpack_send.PROGRESS_EVERY_S = every
    with contextlib.redirect_stdout(io.StringIO()):  # the metrics' EMF lines
        load_handler(stack.stack.functions["UnpackFunction"])(event(stack.names.drops_bucket, key), Context())
    etag = stack.client.s3.head_object(Bucket=stack.names.drops_bucket, Key=key)["ETag"].strip('"')
    scan = current_services().scans.get(scan_id_for(stack.names.drops_bucket, key, etag))
    assert scan is not None and scan.part_closed()
    return scan.unpack_seconds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("drop", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    reports: list[int] = []
    original = ScanStore.report_unpacking

    def counted(self: ScanStore, *args: Any, **kwargs: Any) -> bool:
        reports.append(1)
        return original(self, *args, **kwargs)

    ScanStore.report_unpacking = counted  # type: ignore[method-assign]
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    writes: dict[str, list[int]] = {m: [] for m in MODES}
    with open(os.devnull, "w") as log, embedded(log_stream=log) as stack:  # the functions' log
        n = 0
        for _ in range(a.runs):
            for mode, every in MODES.items():
                before = len(reports)
                seconds[mode].append(run_once(stack, a.drop, n, every))
                writes[mode].append(len(reports) - before)
                n += 1
    for mode in MODES:
        print(f"{mode:>13}: unpack {statistics.median(seconds[mode]):.2f} s (runs {seconds[mode]}),"
              f" progress writes {writes[mode]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

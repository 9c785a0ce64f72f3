"""Reading the events that drive the functions: S3 notifications carried in SQS messages, part messages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from aws_lambda_powertools.utilities.data_classes import S3Event
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from dropscan.pipeline import object_key


def s3_objects(record: SQSRecord) -> Iterator[tuple[str, str]]:
    """(bucket, key) of each object an S3 notification names; S3's test event names none."""
    body: dict[str, Any] = json.loads(record.body)
    if body.get("Event") == "s3:TestEvent" or "Records" not in body:
        return
    for rec in S3Event(body).records:
        if rec.event_name.startswith("ObjectCreated"):
            yield rec.s3.bucket.name, object_key(rec.s3.get_object.key)


def part_message(record: SQSRecord) -> dict[str, Any] | None:
    """The part a message of the unpack queue names (a nested archive fanned out), None for S3's events."""
    body = json.loads(record.body)
    part = body.get("part") if isinstance(body, dict) else None
    return part if isinstance(part, dict) else None


def json_body(record: SQSRecord) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(record.body)
    return data

"""Every message shape the functions read: S3 notifications carried in SQS messages, part messages of the
unpack queue, and the plain JSON messages between the stages. Pure parsing, no I/O."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.utilities.data_classes import S3Event
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from dropscan.keys import object_key


@dataclass(frozen=True, slots=True)
class CreatedObject:
    """An object an S3 notification says was created."""

    bucket: str
    key: str
    etag: str | None
    version_id: str | None


def created_objects(body: str) -> list[CreatedObject] | None:
    """The objects an S3 notification (an SQS message body) says were created; [] for S3's test event
    and other messages, None when the body is no JSON object at all."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if data.get("Event") == "s3:TestEvent" or "Records" not in data:
        return []
    return [
        CreatedObject(
            rec.s3.bucket.name,
            object_key(rec.s3.get_object.key),
            rec.s3.get_object.etag or None,
            rec.s3.get_object.version_id,
        )
        for rec in S3Event(data).records
        if rec.event_name.startswith("ObjectCreated")
    ]


def s3_objects(record: SQSRecord) -> Iterator[tuple[str, str]]:
    """(bucket, key) of each object an S3 notification names; S3's test event names none."""
    for obj in created_objects(record.body) or ():
        yield obj.bucket, obj.key


def part_of(body: str) -> tuple[str, str] | None:
    """(scan id, part) of a part message, None for anything else."""
    part = _part(body)
    return (part["scan_id"], part["part"]) if part is not None else None


def part_message(record: SQSRecord) -> dict[str, Any] | None:
    """The part a message of the unpack queue names (a nested archive fanned out), None for S3's events."""
    return _part(record.body)


def _part(body: str) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    part = data.get("part") if isinstance(data, dict) else None
    return part if isinstance(part, dict) else None


def git_resume(record: SQSRecord) -> tuple[str, str] | None:
    """(bucket, key) of the git bundle whose ingest a message of the ingest queue goes on with."""
    try:
        data = json.loads(record.body)
    except ValueError:
        return None
    git = data.get("git") if isinstance(data, dict) else None
    if (
        not isinstance(git, dict)
        or not isinstance(git.get("bucket"), str)
        or not isinstance(git.get("key"), str)
    ):
        return None
    return git["bucket"], git["key"]


def json_body(record: SQSRecord) -> dict[str, Any]:
    """A message between the stages (chunk, finalize, triage): a JSON object."""
    data: dict[str, Any] = json.loads(record.body)
    return data


def firmware_scan(record: SQSRecord) -> tuple[str, str] | None:
    """(supplier, scan id) of a scan notify sent the firmware queue, None for S3's events of images."""
    try:
        data = json.loads(record.body)
    except ValueError:
        return None
    scan = data.get("firmware") if isinstance(data, dict) else None
    if not isinstance(scan, dict) or not all(isinstance(scan.get(k), str) for k in ("supplier", "scan_id")):
        return None
    return scan["supplier"], scan["scan_id"]

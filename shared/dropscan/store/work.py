"""A scan's work between the stages: work files in the results bucket, the queues, the topic.

The stages never call S3, SQS or SNS themselves; they hand a message or a document to this module, which
knows the buckets, the queue URLs and the topic from the settings.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from dropscan.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient

#: what an AWS call raises: a stage lets these through, so that the message comes back and is retried
AWS_ERRORS = (BotoCoreError, ClientError)

#: bytes; SQS takes 256 KiB a message, a bigger chunk goes to S3 with a pointer
INLINE_MESSAGE_LIMIT = 200_000


def gz_json(data: Any) -> bytes:
    """A work file: compact JSON, gzipped at level 1 (work files live for one scan; see docs/design.md)."""
    return gzip.compress(json.dumps(data, separators=(",", ":")).encode(), compresslevel=1, mtime=0)


def _dumps(message: Mapping[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"))


class Work:
    """The results bucket's work files, the stages' queues and the notification topic of one stack."""

    def __init__(self, settings: Settings, s3: S3Client, sqs: SQSClient, sns: SNSClient) -> None:
        self.settings = settings
        self.s3 = s3
        self.sqs = sqs
        self.sns = sns
        self.bucket = settings.results_bucket

    # ------------------------------------------------------------ work files and results
    def put_json(self, key: str, data: Any) -> None:
        """A gzipped JSON work file."""
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=gz_json(data))

    def get_json(self, key: str) -> Any:
        """A gzipped JSON work file, parsed."""
        obj = self.s3.get_object(Bucket=self.bucket, Key=key)
        return json.loads(gzip.decompress(obj["Body"].read()))

    def put_text(self, key: str, text: str, content_type: str) -> str:
        """A report or the manifest, as it is read by people and their tools; returns its ETag."""
        resp = self.s3.put_object(Bucket=self.bucket, Key=key, Body=text.encode(), ContentType=content_type)
        return str(resp["ETag"])

    def get_document(self, key: str, bucket: str | None = None) -> Any:
        """A plain JSON document (the manifest), from the results bucket unless ``bucket`` says."""
        return json.loads(self.s3.get_object(Bucket=bucket or self.bucket, Key=key)["Body"].read())

    def exists(self, key: str) -> bool:
        """Whether the results bucket holds ``key``; only "not found" is False (access denied is raised)."""
        return object_exists(self.s3, self.bucket, key)

    def put_file(self, key: str, spool: IO[bytes]) -> None:
        """A nested archive handed to a part of its own (a multipart upload when large)."""
        self.s3.upload_fileobj(spool, self.bucket, key)

    def get_file(self, key: str, spool: IO[bytes]) -> None:
        self.s3.download_fileobj(self.bucket, key, spool)

    # ------------------------------------------------------------ queues
    @property
    def fans_out(self) -> bool:
        """Whether parts can be sent to invocations of their own (a stack without the queue: in-process)."""
        return bool(self.settings.unpack_queue_url)

    def send_chunk(self, where: Mapping[str, Any], body: Mapping[str, Any], overflow_key: str) -> None:
        """A hash chunk to the lookup queue: inline, or in ``overflow_key`` with a pointer when too big."""
        text = _dumps({**where, **body})
        if len(text) > INLINE_MESSAGE_LIMIT:
            self.put_json(overflow_key, body)
            text = json.dumps({**where, "records_key": overflow_key})
        self.sqs.send_message(QueueUrl=self.settings.chunk_queue_url, MessageBody=text)

    def send_part(self, message: Mapping[str, Any]) -> None:
        """A part of an upload (a nested archive, a resumed segment, a zip range) to the unpack queue."""
        self.sqs.send_message(
            QueueUrl=self.settings.unpack_queue_url, MessageBody=json.dumps({"part": message})
        )

    def send_git_resume(self, bucket: str, key: str) -> None:
        """The rest of a git bundle's ingest, to the ingest queue (the checkpoint is the git state)."""
        self.sqs.send_message(
            QueueUrl=self.settings.ingest_queue_url,
            MessageBody=json.dumps({"git": {"bucket": bucket, "key": key}}),
        )

    def send_finalize(self, scan_id: str) -> None:
        self.sqs.send_message(
            QueueUrl=self.settings.finalize_queue_url, MessageBody=json.dumps({"scan_id": scan_id})
        )

    def send_triage(self, scan_id: str, key: str, **kind: Any) -> None:
        """A scan's triage; ``kind``: ``triage_part=n`` (one part of a fanned-out triage), ``assemble``."""
        self.sqs.send_message(
            QueueUrl=self.settings.triage_queue_url,
            MessageBody=json.dumps({"scan_id": scan_id, "key": key, **kind}),
        )

    def send_firmware(self, supplier: str, scan_id: str) -> None:
        """A scan whose firmware images are not all in its manifest yet, to the firmware queue."""
        self.sqs.send_message(
            QueueUrl=self.settings.firmware_queue_url,
            MessageBody=json.dumps({"firmware": {"supplier": supplier, "scan_id": scan_id}}),
        )

    def dead_letters(self, queue_url: str) -> Iterator[tuple[str, str]]:
        """(message id, body) of each message of a dead-letter queue, each once; they stay in the queue."""
        seen: set[str] = set()
        while True:
            resp = self.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            fresh = [m for m in resp.get("Messages", []) if m["MessageId"] not in seen]
            if not fresh:
                return
            for m in fresh:
                seen.add(m["MessageId"])
                yield m["MessageId"], m["Body"]

    # ------------------------------------------------------------ the topic
    def publish(self, subject: str, message: str, attributes: Mapping[str, Any]) -> str:
        resp = self.sns.publish(
            TopicArn=self.settings.topic_arn,
            Subject=subject,
            Message=message,
            MessageAttributes=dict(attributes),  # type: ignore[arg-type]
        )
        return resp["MessageId"]

    def presign(self, bucket: str, key: str) -> str:
        """A pre-signed GET URL (a bearer token: never logged), valid for the report link expiry."""
        return self.s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=self.settings.report_link_expiry
        )


def object_exists(s3: S3Client, bucket: str, key: str) -> bool:
    """HEAD the object; only "not found" means False (access denied and the like are raised)."""
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except s3.exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True

"""Faults injected into the moto-backed clients of a running stack: every scan still ends correctly, or
ends ``failed`` with a reason and a notification, and always with one manifest and one notification."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST

from dropscan.audit.manifest import validate
from dropscan.keys import manifest_key
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.store.services import Services, current_services

from helpers.builders import DROP_FILES, EXPECTED_CLASSES, UPSTREAM_FILES, make_tar
from helpers.faults import Faults, dynamodb_error, key_contains, s3_error

# a second component, so that foo-1.0-acme/ stays identified as foo 1.0
EXTRA = {f"acme-board/extra{i:02d}.c": f"int extra{i};\n".encode() for i in range(20)}
FILES = {**DROP_FILES, **EXTRA}  # 28 files: three chunks of ten
EXPECTED = {**EXPECTED_CLASSES, **dict.fromkeys(EXTRA, "added")}
THROTTLED = dynamodb_error("ProvisionedThroughputExceededException")
DENIED = s3_error("AccessDenied", 403)  # not retried by the client: the invocation's record fails


@dataclass
class Flow:
    stack: EmbeddedStack
    drop: Path
    svc: Services
    faults: Faults

    def scan(self, supplier: str = "acme") -> str:
        _, scan_id = self.stack.client.upload_drop(self.drop, supplier)
        assert self.stack.dispatcher.drain(timeout=90), "the queues did not drain"
        return scan_id

    def manifest(self, scan_id: str, supplier: str = "acme") -> dict[str, Any]:
        body = self.stack.client.s3.get_object(
            Bucket=self.stack.names.results_bucket, Key=manifest_key(supplier, scan_id)
        )["Body"].read()
        manifest: dict[str, Any] = json.loads(body)
        validate(manifest)
        return manifest

    def has_manifest(self, scan_id: str, supplier: str = "acme") -> bool:
        listed = self.stack.client.s3.list_objects_v2(
            Bucket=self.stack.names.results_bucket, Prefix=manifest_key(supplier, scan_id)
        )
        return bool(listed.get("KeyCount"))

    def notes(self, scan_id: str) -> list[Any]:
        return self.stack.mailbox.for_scan(scan_id)

    def sweep(self, *, after: timedelta = timedelta(0)) -> dict[str, list[str]]:
        result: dict[str, list[str]] = self.stack.dispatcher.run_scheduled(
            "SweeperFunction", at=datetime.now(UTC) + after
        )
        assert self.stack.dispatcher.drain(timeout=60)
        return result

    def queue_depth(self, logical_id: str) -> int:
        """Messages in the queue, visible or not."""
        sqs = self.stack.session.client("sqs")
        url = queue_url(self.stack, logical_id)
        attrs = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def failed_deliveries(self, function: str) -> int:
        return sum(d.failed for d in self.stack.dispatcher.history if d.function == function)


def queue_url(stack: EmbeddedStack, logical_id: str) -> str:
    physical = stack.stack.physical[logical_id]
    if physical.startswith("http"):
        return physical
    url: str = stack.session.client("sqs").get_queue_url(QueueName=physical.rsplit(":", 1)[-1])["QueueUrl"]
    return url


def classes(manifest: dict[str, Any]) -> dict[str, str]:
    return {f["path"]: f["class"] for f in manifest["files"]}


def make_flow(stack: EmbeddedStack, tmp_path: Path) -> Iterator[Flow]:
    stack.client.ingest(make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES), "foo", "1.0")
    drop = make_tar(tmp_path / "foo-1.0-acme.tar.gz", FILES)
    with Faults() as faults:
        yield Flow(stack, drop, current_services(), faults)


@pytest.fixture
def flow(fast_stack: EmbeddedStack, tmp_path: Path) -> Iterator[Flow]:
    """The upstream ingested, a 28-file drop ready, faults armed only by the test."""
    yield from make_flow(fast_stack, tmp_path)


# ------------------------------------------------------------------ DynamoDB
def test_throttled_batch_get_is_retried_by_the_client(flow: Flow) -> None:
    flow.faults.error(flow.svc.dynamodb, "BatchGetItem", THROTTLED, times=2, name="throttle")
    scan_id = flow.scan()
    assert flow.faults.fired["throttle"] == 2
    assert classes(flow.manifest(scan_id)) == EXPECTED
    assert flow.failed_deliveries("LookupFunction") == 0  # botocore's retries absorbed it
    assert len(flow.notes(scan_id)) == 1


def test_unprocessed_keys_are_asked_again(flow: Flow) -> None:
    flow.faults.unprocessed_keys(flow.svc.dynamodb, keep=2, times=4, name="unprocessed")
    scan_id = flow.scan()
    manifest = flow.manifest(scan_id)
    assert flow.faults.fired["unprocessed"] == 4
    assert classes(manifest) == EXPECTED
    assert manifest["stats"]["dynamodb"]["retries"] >= 4
    assert flow.failed_deliveries("LookupFunction") == 0


def test_keys_unprocessed_on_every_try_fail_the_chunk_and_sqs_redelivers_it(flow: Flow) -> None:
    # keep=0: nothing served for ten calls in a row, the retry budget of one look-up
    flow.faults.unprocessed_keys(flow.svc.dynamodb, keep=0, times=10, name="unprocessed")
    scan_id = flow.scan()
    assert flow.failed_deliveries("LookupFunction") == 1
    assert classes(flow.manifest(scan_id)) == EXPECTED
    assert len(flow.notes(scan_id)) == 1


# ------------------------------------------------------------------ S3
def test_s3_errors_on_chunk_result_writes(flow: Flow) -> None:
    transient = flow.faults.error(
        flow.svc.s3, "PutObject", s3_error("InternalError", 500), times=2, when=key_contains("/results/")
    )
    denied = flow.faults.error(flow.svc.s3, "PutObject", DENIED, when=key_contains("/results/000001"))
    manifest_puts = flow.faults.count(flow.svc.s3, "PutObject", key_contains("manifest.json"))
    scan_id = flow.scan()
    assert (flow.faults.fired[transient], flow.faults.fired[denied]) == (2, 1)
    assert flow.failed_deliveries("LookupFunction") == 1  # the denied one, redelivered by SQS
    assert classes(flow.manifest(scan_id)) == EXPECTED
    assert manifest_puts() == 1
    assert len(flow.notes(scan_id)) == 1


def test_s3_error_on_a_chunk_spilled_to_s3_redoes_the_unpack(tmp_path: Path) -> None:
    # chunks above 200 KB go to S3 with a pointer on the queue: 1,000 files with long paths make one
    files = {f"big/{'sub-directory/' * 14}file{i:04d}.txt": f"{i}\n".encode() for i in range(1000)}
    drop = make_tar(tmp_path / "big.tar", files, "")
    with embedded(parameters={**FAST, "ChunkSize": "1000"}) as stack, Faults() as faults:
        flow = Flow(stack, drop, current_services(), faults)
        denied = faults.error(flow.svc.s3, "PutObject", DENIED, when=key_contains("/chunks/"))
        scan_id = flow.scan()
        assert faults.fired[denied] == 1
        assert flow.failed_deliveries("UnpackFunction") == 1
        manifest = flow.manifest(scan_id)
        assert manifest["status"] == "complete" and manifest["summary"]["files"] == 1000
        assert len(flow.notes(scan_id)) == 1


# ------------------------------------------------------------------ invocations that die mid-way
def test_lookup_killed_after_writing_its_result_is_counted_once(flow: Flow) -> None:
    killed = flow.faults.kill_after(flow.svc.s3, "PutObject", when=key_contains("/results/000001"))
    manifest_puts = flow.faults.count(flow.svc.s3, "PutObject", key_contains("manifest.json"))
    scan_id = flow.scan()
    assert flow.faults.fired[killed] == 1
    assert any(d.error and "killed after PutObject" in d.error for d in flow.stack.dispatcher.history)
    scan = flow.svc.scans.get(scan_id)
    assert scan is not None and (int(scan.chunks_done), int(scan.chunks_total or 0)) == (3, 3)
    assert classes(flow.manifest(scan_id)) == EXPECTED
    assert manifest_puts() == 1
    assert len(flow.notes(scan_id)) == 1


@pytest.mark.parametrize(
    ("stage", "before_writing"),
    [
        ("FinalizeFunction", "/classified/"),  # killed after its claim, before the hand-over to triage
        ("TriageFunction", "manifest.json"),  # killed after reading the review set, before the manifest
    ],
    ids=["FinalizeFunction", "TriageFunction"],
)
def test_a_stage_killed_mid_way_is_finished_by_the_redelivery(
    flow: Flow, stage: str, before_writing: str
) -> None:
    killed = flow.faults.kill_before(flow.svc.s3, "PutObject", when=key_contains(before_writing))
    manifest_puts = flow.faults.count(flow.svc.s3, "PutObject", key_contains("manifest.json"))
    scan_id = flow.scan()
    assert flow.faults.fired[killed] == 1
    assert flow.failed_deliveries(stage) == 1
    assert classes(flow.manifest(scan_id)) == EXPECTED
    assert manifest_puts() == 1
    assert len(flow.notes(scan_id)) == 1


def test_triage_killed_after_writing_the_manifest_is_closed_by_the_sweeper(flow: Flow) -> None:
    flow.faults.kill_after(flow.svc.s3, "PutObject", when=key_contains("manifest.json"))
    scan_id = flow.scan()
    scan = flow.svc.scans.get(scan_id)
    assert scan is not None and scan.status == "scanning"  # the status was never recorded
    assert flow.sweep(after=timedelta(minutes=90))["closed"] == [scan_id]
    scan = flow.svc.scans.get(scan_id)
    assert scan is not None and scan.status == "complete" and scan.pending is None
    assert classes(flow.manifest(scan_id)) == EXPECTED
    assert len(flow.notes(scan_id)) == 1


# ------------------------------------------------------------------ poison messages
def test_poison_chunk_ends_in_the_dlq_and_the_sweeper_fails_the_scan(flow: Flow) -> None:
    poison = flow.faults.error(
        flow.svc.s3, "PutObject", DENIED, times=None, when=key_contains("/results/000001")
    )
    manifest_puts = flow.faults.count(flow.svc.s3, "PutObject", key_contains("manifest.json"))
    scan_id = flow.scan()
    assert flow.faults.fired[poison] == 3  # MaxReceiveCount deliveries, then the dead-letter queue
    assert flow.queue_depth("ChunkDLQ") == 1
    assert not flow.has_manifest(scan_id)

    assert flow.sweep(after=timedelta(minutes=30))["timed_out"] == []  # within the 60-minute deadline
    assert flow.sweep(after=timedelta(minutes=90))["timed_out"] == [scan_id]

    manifest = flow.manifest(scan_id)
    assert (manifest["status"], manifest["verdict"]) == ("failed", "failed")
    assert manifest["reason"] == "timed out: 2 of 3 chunks done after 90 min"
    assert len(manifest["files"]) == 18  # chunks 0 and 2: what was classified is still reported
    [note] = flow.notes(scan_id)
    assert note.attributes["status"] == "failed" and "timed out" in note.subject

    # the chunk comes back (redriven by hand, the fault gone): no second manifest, no second notification
    flow.faults.clear()
    sqs = flow.stack.session.client("sqs")
    [dead] = sqs.receive_message(QueueUrl=queue_url(flow.stack, "ChunkDLQ"))["Messages"]
    sqs.send_message(QueueUrl=queue_url(flow.stack, "ChunkQueue"), MessageBody=dead["Body"])
    assert flow.stack.dispatcher.drain(timeout=30)
    assert manifest_puts() == 1
    assert len(flow.notes(scan_id)) == 1
    assert flow.manifest(scan_id)["status"] == "failed"


@pytest.mark.parametrize("operation", ["HeadObject", "GetObject"])
def test_poison_upload_ends_in_the_dlq_and_the_sweeper_fails_the_scan(flow: Flow, operation: str) -> None:
    # HeadObject: unpack dies before the scan item exists; GetObject: after it was created
    flow.faults.error(flow.svc.s3, operation, DENIED, times=None, when=key_contains("drops/acme/"))
    scan_id = flow.scan()
    assert flow.queue_depth("UploadDLQ") == 1
    assert not flow.has_manifest(scan_id)

    assert flow.sweep()["dead_lettered"] == [scan_id]

    manifest = flow.manifest(scan_id)
    assert manifest["status"] == "failed"
    assert "dead-letter queue" in manifest["reason"]
    assert manifest["source"]["key"] == "drops/acme/foo-1.0-acme.tar.gz"
    [note] = flow.notes(scan_id)
    assert note.attributes["supplier"] == "acme" and note.attributes["status"] == "failed"
    assert flow.sweep()["dead_lettered"] == []  # the next sweep finds the scan ended
    assert flow.queue_depth("UploadDLQ") == 1  # kept for whoever looks into it


# ------------------------------------------------------------------ duplicates
def _s3_event(bucket: str, key: str, etag: str) -> str:
    record = {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": bucket}, "object": {"key": key, "eTag": etag}},
    }
    return json.dumps({"Records": [record]})


def test_the_same_upload_event_twice_is_unpacked_once(flow: Flow) -> None:
    before = len(flow.stack.dispatcher.history)
    key, scan_id = flow.stack.client.upload_drop(flow.drop, "acme")
    etag = flow.stack.client.s3.head_object(Bucket=flow.stack.names.drops_bucket, Key=key)["ETag"]
    sqs = flow.stack.session.client("sqs")
    for _ in range(2):  # S3's at-least-once delivery, twice more
        sqs.send_message(
            QueueUrl=queue_url(flow.stack, "UploadQueue"),
            MessageBody=_s3_event(flow.stack.names.drops_bucket, key, etag.strip('"')),
        )
    reads = flow.faults.count(flow.svc.s3, "GetObject", key_contains("drops/"))
    chunks = flow.faults.count(flow.svc.sqs, "SendMessage", lambda p: "Chunk" in p["QueueUrl"])
    assert flow.stack.dispatcher.drain(timeout=60)
    unpacks = [d for d in flow.stack.dispatcher.history[before:] if d.function == "UnpackFunction"]
    assert [(d.messages, d.failed) for d in unpacks] == [(1, 0)] * 3
    # the drop read once by unpack and once by triage (its first bytes here: the child that reads it
    # whole has a client of its own), its three chunks sent once
    assert (reads(), chunks()) == (2, 3)
    assert classes(flow.manifest(scan_id)) == EXPECTED
    assert len(flow.notes(scan_id)) == 1


def test_a_drop_triage_cannot_read_again_brings_the_triage_back_rather_than_half_a_triage(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given S3 refusing the drop to the child triage forks to read it again (on a client of its own)
    here, armed = os.getpid(), [True]
    new_s3 = Services.new_s3

    def refusing(svc: Services) -> Any:
        client = new_s3(svc)
        if armed[0] and os.getpid() != here:
            flow.faults.error(client, "GetObject", DENIED, times=None, when=key_contains("drops/"))
        return client

    monkeypatch.setattr(Services, "new_s3", refusing)
    _, scan_id = flow.stack.client.upload_drop(flow.drop, "acme")
    # When the scan runs until its triage has failed
    assert flow.stack.dispatcher.run_until(lambda: flow.failed_deliveries("TriageFunction") >= 1, timeout=60)
    # Then no manifest says what a triage that never read the drop found
    assert not flow.has_manifest(scan_id)
    # and once S3 serves the drop again, the message that came back ends the scan, triaged whole
    armed[0] = False
    assert flow.stack.dispatcher.drain(timeout=60)
    manifest = flow.manifest(scan_id)
    assert "error" not in manifest["triage"] and manifest["triage"]["files"] > 0
    assert classes(manifest) == EXPECTED
    assert len(flow.notes(scan_id)) == 1


def test_the_same_manifest_event_twice_is_published_once(flow: Flow) -> None:
    scan_id = flow.scan()
    publishes = flow.faults.count(flow.svc.sns, "Publish")
    sqs = flow.stack.session.client("sqs")
    key = manifest_key("acme", scan_id)
    etag = flow.stack.client.s3.head_object(Bucket=flow.stack.names.results_bucket, Key=key)["ETag"]
    for _ in range(2):
        sqs.send_message(
            QueueUrl=queue_url(flow.stack, "NotifyQueue"),
            MessageBody=_s3_event(flow.stack.names.results_bucket, key, etag.strip('"')),
        )
    assert flow.stack.dispatcher.drain(timeout=30)
    assert publishes() == 0
    assert len(flow.notes(scan_id)) == 1


def test_the_same_bytes_uploaded_twice_are_one_scan(flow: Flow) -> None:
    manifest_puts = flow.faults.count(flow.svc.s3, "PutObject", key_contains("manifest.json"))
    first = flow.scan()
    again = flow.scan()  # a second version of the object, with the same ETag
    versions = flow.stack.client.s3.list_object_versions(
        Bucket=flow.stack.names.drops_bucket, Prefix="drops/acme/"
    )
    assert len(versions["Versions"]) == 2
    assert first == again
    assert manifest_puts() == 1
    assert len(flow.notes(first)) == 1


def test_throttling_or_errors_never_end_a_scan_silently(flow: Flow) -> None:
    """Every fault at once, on every call they can hit: the scan still ends, with one notification."""
    flow.faults.error(flow.svc.dynamodb, "BatchGetItem", THROTTLED, times=3)
    flow.faults.unprocessed_keys(flow.svc.dynamodb, keep=1, times=5)
    flow.faults.error(flow.svc.s3, "PutObject", s3_error("SlowDown", 503), times=2)
    flow.faults.kill_after(flow.svc.s3, "PutObject", when=key_contains("/results/000002"))
    scan_id = flow.scan()
    assert classes(flow.manifest(scan_id)) == EXPECTED
    assert len(flow.notes(scan_id)) == 1

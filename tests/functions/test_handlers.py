"""Each handler on moto: what it reads, what it writes, how it reports failures."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from dropscan.keys import manifest_key, scan_id_for
from dropscan.local.dispatcher import load_handler
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.stages import unpack_send
from dropscan.store.services import current_services

from helpers.builders import DROP_FILES, UPSTREAM_FILES, context, load_event, make_tar, tar_bytes

DATA = Path(__file__).parent.parent / "data"


def put_drop(stack: EmbeddedStack, path: Path, key: str) -> str:
    """Upload without letting the dispatcher run: the test calls the handler itself."""
    stack.client.s3.upload_file(str(path), stack.names.drops_bucket, key)
    sqs = stack.session.client("sqs")
    for m in stack.stack.mappings:
        sqs.purge_queue(QueueUrl=m.queue_url)
    etag = stack.client.s3.head_object(Bucket=stack.names.drops_bucket, Key=key)["ETag"].strip('"')
    return scan_id_for(stack.names.drops_bucket, key, etag)


def queue_bodies(stack: EmbeddedStack, logical_id: str) -> list[dict[str, Any]]:
    url = next(m.queue_url for m in stack.stack.mappings if m.function.logical_id == logical_id)
    msgs = stack.session.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    return [json.loads(m["Body"]) for m in msgs.get("Messages", [])]


def chunk_event(chunk: dict[str, Any]) -> dict[str, Any]:
    """The lookup queue's event for a chunk unpack sent (the sample shows the message's shape)."""
    event = load_event("sqs_chunk.json", MESSAGE_ID="m-lookup", SCAN_ID=chunk["scan_id"])
    sample = json.loads(event["Records"][0]["body"])
    assert set(sample) == set(chunk) and set(sample["records"][0]) <= set(chunk["records"][0])
    event["Records"][0]["body"] = json.dumps(chunk)
    return event


def test_unpack_sends_chunks_and_counts_them(stack: EmbeddedStack, tmp_path: Path, app: Any) -> None:
    drop = make_tar(tmp_path / "drop.tar.gz", DROP_FILES)
    scan_id = put_drop(stack, drop, "drops/acme/drop+1.tar.gz")
    event = load_event(
        "sqs_s3_object_created.json", BUCKET=stack.names.drops_bucket, KEY="drops/acme/drop%2B1.tar.gz"
    )

    result = app("UnpackFunction")(event, context())

    assert result == {"batchItemFailures": []}
    [chunk] = queue_bodies(stack, "LookupFunction")
    assert chunk["scan_id"] == scan_id
    assert sorted(r["path"] for r in chunk["records"]) == sorted(DROP_FILES)
    scan = current_services().scans.get(scan_id)
    assert scan is not None and (scan.chunks_total, scan.supplier) == (1, "acme")


def test_a_long_unpack_reports_its_counts_to_the_scan_item_as_it_walks(
    stack: EmbeddedStack, tmp_path: Path, app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a drop of 30 files, and a clock that moves a second each time the stage reads it, and at
    # each reading looks at what the scan item says (what a client watching the scan would see)
    files = {f"src/f{i:02}.c": f"int f{i};\n".encode() for i in range(30)}
    drop = make_tar(tmp_path / "drop.tar.gz", files)
    scan_id = put_drop(stack, drop, "drops/acme/drop.tar.gz")
    seen: list[tuple[int, int]] = []
    ticks = iter(range(1_000_000))

    def clock() -> float:
        scan = current_services().scans.get(scan_id)
        if scan is not None and not scan.part_closed():
            seen.append(scan.unpacked_so_far())
        return float(next(ticks))

    monkeypatch.setattr(unpack_send, "CLOCK", clock)
    event = load_event(
        "sqs_s3_object_created.json", BUCKET=stack.names.drops_bucket, KEY="drops/acme/drop.tar.gz"
    )

    # When unpack walks it (a report at most every PROGRESS_EVERY_S of that clock: every second file)
    assert app("UnpackFunction")(event, context()) == {"batchItemFailures": []}

    # Then the scan item held counts part-way through the walk, growing, below the closed part's total
    scan = current_services().scans.get(scan_id)
    assert scan is not None and scan.part_closed()
    moving = sorted(set(seen))
    assert seen == sorted(seen) and len(moving) >= 10
    assert all(0 < members < scan.members and 0 < size < scan.unpacked_bytes for members, size in moving[1:])
    assert moving[-1][0] >= scan.members - 3  # the last report, a couple of members before the end
    # and once the part is closed, the counts are its close's, not its reports' on top of them
    total = (30, sum(map(len, files.values())))
    assert scan.unpacked_so_far() == (scan.members, scan.unpacked_bytes) == total


def test_unpack_ignores_s3_test_event(stack: EmbeddedStack, app: Any) -> None:
    event = load_event("sqs_s3_test_event.json", BUCKET=stack.names.drops_bucket)
    assert app("UnpackFunction")(event, context()) == {"batchItemFailures": []}
    assert queue_bodies(stack, "LookupFunction") == []


def test_unpack_fails_the_batch_for_a_missing_object_so_sqs_redelivers(
    stack: EmbeddedStack, app: Any
) -> None:
    event = load_event(
        "sqs_s3_object_created.json", BUCKET=stack.names.drops_bucket, KEY="drops/acme/gone.tar.gz"
    )
    with pytest.raises(BatchProcessingError, match="All records failed"):
        app("UnpackFunction")(event, context())


def test_finalize_and_triage_write_exactly_one_manifest(
    stack: EmbeddedStack, tmp_path: Path, app: Any
) -> None:
    stack.client.ingest(make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES), "foo", "1.0")
    drop = make_tar(tmp_path / "drop.tar.gz", DROP_FILES)
    scan_id = put_drop(stack, drop, "drops/acme/drop.tar.gz")
    unpack = load_event(
        "sqs_s3_object_created.json", BUCKET=stack.names.drops_bucket, KEY="drops/acme/drop.tar.gz"
    )
    app("UnpackFunction")(unpack, context())
    [chunk] = queue_bodies(stack, "LookupFunction")
    app("LookupFunction")(chunk_event(chunk), context())
    assert queue_bodies(stack, "FinalizeFunction") == [{"scan_id": scan_id}]

    first = app("FinalizeFunction")(
        load_event("sqs_finalize.json", MESSAGE_ID="m-1", SCAN_ID=scan_id), context()
    )
    second = app("FinalizeFunction")(
        load_event("sqs_finalize.json", MESSAGE_ID="m-2", SCAN_ID=scan_id), context()
    )

    assert first == second == {"batchItemFailures": []}
    [handover] = queue_bodies(stack, "TriageFunction")  # the second finalize lost its claim
    triage = load_event("sqs_triage.json", MESSAGE_ID="m-3", SCAN_ID=scan_id, WORK_KEY=handover["key"])
    assert app("TriageFunction")(triage, context()) == {"batchItemFailures": []}
    assert app("TriageFunction")(triage, context()) == {"batchItemFailures": []}  # redelivered
    key = manifest_key("acme", scan_id)
    versions = stack.client.s3.list_object_versions(Bucket=stack.names.results_bucket, Prefix=key)
    assert len(versions.get("Versions", [])) == 1
    manifest = json.loads(
        stack.client.s3.get_object(Bucket=stack.names.results_bucket, Key=key)["Body"].read()
    )
    assert manifest["summary"]["files"] == len(DROP_FILES)
    assert set(manifest["reports"]) == {"html", "spdx", "cyclonedx"}


def test_lookup_counts_a_redelivered_chunk_once(stack: EmbeddedStack, tmp_path: Path, app: Any) -> None:
    drop = make_tar(tmp_path / "drop.tar.gz", {"a/x.txt": b"x\n"})
    scan_id = put_drop(stack, drop, "drops/acme/one.tar.gz")
    app("UnpackFunction")(
        load_event(
            "sqs_s3_object_created.json", BUCKET=stack.names.drops_bucket, KEY="drops/acme/one.tar.gz"
        ),
        context(),
    )
    [chunk] = queue_bodies(stack, "LookupFunction")
    event = chunk_event(chunk)
    app("LookupFunction")(event, context())
    app("LookupFunction")(event, context())
    scan = current_services().scans.get(scan_id)
    assert scan is not None and int(scan.chunks_done) == 1


def test_ingest_of_the_same_release_again_writes_nothing(stack: EmbeddedStack, tmp_path: Path) -> None:
    from dropscan.stages.ingest import ingest_release

    gz = make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES)
    stack.client.s3.upload_file(str(gz), stack.names.upstream_bucket, "upstream/foo/1.0/foo-1.0.tar.gz")
    stack.dispatcher.drain(timeout=30)
    # the same files in another container: every digest item already holds them
    bz2 = make_tar(tmp_path / "foo-1.0.tar.bz2", UPSTREAM_FILES, "bz2")
    stack.client.s3.upload_file(str(bz2), stack.names.upstream_bucket, "upstream/foo/1.0/foo-1.0.tar.bz2")
    for m in stack.stack.mappings:
        stack.session.client("sqs").purge_queue(QueueUrl=m.queue_url)
    again = ingest_release(
        current_services(), stack.names.upstream_bucket, "upstream/foo/1.0/foo-1.0.tar.bz2"
    )
    assert (again.files, again.items_written) == (len(UPSTREAM_FILES), 0)


def test_a_redelivered_ingest_event_is_skipped(stack: EmbeddedStack, tmp_path: Path, app: Any) -> None:
    key = "upstream/foo/1.0/foo-1.0.tar.gz"
    stack.client.s3.upload_file(
        str(make_tar(tmp_path / "f.tar.gz", UPSTREAM_FILES)), stack.names.upstream_bucket, key
    )
    stack.dispatcher.drain(timeout=30)
    before = stack.client.s3.get_object(
        Bucket=stack.names.upstream_bucket, Key="releases/foo/1.0.ingest.json"
    )
    event = load_event("sqs_s3_object_created.json", BUCKET=stack.names.upstream_bucket, KEY=key)
    assert app("IngestFunction")(event, context()) == {"batchItemFailures": []}
    after = stack.client.s3.get_object(Bucket=stack.names.upstream_bucket, Key="releases/foo/1.0.ingest.json")
    assert after["ETag"] == before["ETag"]  # the report was not rewritten: nothing was hashed again


def test_unpack_hands_a_nested_archive_on_and_unpacks_the_part(tmp_path: Path) -> None:
    inner = tar_bytes({"lib/b.c": b"int b;\n", "lib/c.c": b"int c;\n"}, "gz")
    drop = make_tar(tmp_path / "bundle.tar", {"src/a.c": b"int a;\n", "vendor/lib.tar.gz": inner}, "")
    with embedded(parameters={"FanOutMiB": "0"}) as stack:  # every nested archive is a part
        unpack = load_handler(stack.stack.functions["UnpackFunction"])
        scan_id = put_drop(stack, drop, "drops/acme/bundle.tar")
        upload = load_event(
            "sqs_s3_object_created.json", BUCKET=stack.names.drops_bucket, KEY="drops/acme/bundle.tar"
        )
        assert unpack(upload, context()) == {"batchItemFailures": []}
        [handed] = [b["part"] for b in queue_bodies(stack, "UnpackFunction") if "part" in b]
        # the sample shows the message's shape; the test sends the one unpack wrote
        event = load_event("sqs_unpack_part.json", MESSAGE_ID="m-part", SCAN_ID=scan_id)
        assert set(json.loads(event["Records"][0]["body"])["part"]) == set(handed)
        event["Records"][0]["body"] = json.dumps({"part": handed})

        assert unpack(event, context()) == {"batchItemFailures": []}

        records = [r for c in queue_bodies(stack, "LookupFunction") for r in c["records"]]
        assert sorted(r["path"] for r in records) == [  # a container is not a file of its own
            "src/a.c",
            "vendor/lib.tar.gz!/lib/b.c",
            "vendor/lib.tar.gz!/lib/c.c",
        ]
        scan = current_services().scans.get(scan_id)
        assert scan is not None and scan.parts_closed == {"0", handed["part"]}


def test_notify_publishes_one_summary_per_manifest_with_report_links(stack: EmbeddedStack, app: Any) -> None:
    # Given a manifest in the results bucket (the sample BusyBox one), its notify event held back
    manifest = json.loads(gzip.decompress((DATA / "busybox-acme.manifest.json.gz").read_bytes()))
    key = manifest_key(manifest["supplier"], manifest["scan_id"])
    stack.client.s3.put_object(Bucket=stack.names.results_bucket, Key=key, Body=json.dumps(manifest).encode())
    for m in stack.stack.mappings:
        stack.session.client("sqs").purge_queue(QueueUrl=m.queue_url)
    event = load_event("sqs_s3_object_created.json", BUCKET=stack.names.results_bucket, KEY=key)

    # When the notify handler gets its event twice (S3 delivers at least once)
    assert app("NotifyFunction")(event, context()) == {"batchItemFailures": []}
    assert app("NotifyFunction")(event, context()) == {"batchItemFailures": []}

    # Then exactly one summary went out, with the verdict, the supplier and a link to every report
    [note] = stack.mailbox.for_scan(manifest["scan_id"])
    assert note.attributes["supplier"] == manifest["supplier"]
    assert note.attributes["verdict"] == manifest["verdict"]
    for name in ("manifest.json", "report.html", "sbom.spdx.json", "sbom.cdx.json"):
        assert f"/{manifest['scan_id']}/{name}?" in note.message

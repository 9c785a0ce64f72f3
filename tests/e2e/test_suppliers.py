"""Suppliers are kept apart: results under their own prefix, notifications filterable by supplier, and
nothing in one supplier's manifest or notification naming another's files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dropscan.keys import manifest_key
from dropscan.local.embedded import EmbeddedStack, Mailbox

from helpers.builders import DROP_FILES, UPSTREAM_FILES, make_tar

GLOBEX_FILES = {
    "globex-fw/boot/start.S": b"_start: b main\n",
    "globex-fw/drivers/radio-tuning.c": b"int tuning_table[4] = {1, 2, 3, 4};\n",
    "globex-fw/COPYING": UPSTREAM_FILES["foo-1.0/COPYING"],
}


def filtered_mailbox(stack: EmbeddedStack, supplier: str) -> Mailbox:
    """An SQS subscriber whose subscription filter policy selects one supplier's notifications."""
    sqs, sns = stack.session.client("sqs"), stack.session.client("sns")
    url = sqs.create_queue(QueueName=f"notify-{supplier}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(
        TopicArn=stack.names.topic_arn,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"FilterPolicy": json.dumps({"supplier": [supplier]})},
    )
    return Mailbox(sqs, url)


def manifest_of(stack: EmbeddedStack, supplier: str, scan_id: str) -> tuple[dict[str, Any], str]:
    body = stack.client.s3.get_object(Bucket=stack.names.results_bucket, Key=manifest_key(supplier, scan_id))[
        "Body"
    ].read()
    return json.loads(body), body.decode()


def test_two_suppliers_scanned_at_once_stay_apart(stack: EmbeddedStack, tmp_path: Path) -> None:
    stack.client.ingest(make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES), "foo", "1.0")
    boxes = {s: filtered_mailbox(stack, s) for s in ("acme", "globex")}
    drops = {
        "acme": make_tar(tmp_path / "foo-1.0-acme.tar.gz", DROP_FILES),
        "globex": make_tar(tmp_path / "globex-fw-2.1.tar.gz", GLOBEX_FILES),
    }
    # both uploads are in the queue before either is unpacked
    ids = {s: stack.client.upload_drop(drop, s)[1] for s, drop in drops.items()}
    assert stack.dispatcher.drain(timeout=120)

    listed = stack.client.s3.list_objects_v2(Bucket=stack.names.results_bucket, Prefix="results/")
    keys = [o["Key"] for o in listed["Contents"]]
    manifests = sorted(k for k in keys if k.endswith("/manifest.json"))
    assert manifests == sorted(manifest_key(s, i) for s, i in ids.items())
    # the reports too live under their supplier's prefix, beside their manifest
    assert all(any(k.startswith(f"results/{s}/{i}/") for s, i in ids.items()) for k in keys)
    for supplier, other in (("acme", "globex"), ("globex", "acme")):
        manifest, text = manifest_of(stack, supplier, ids[supplier])
        assert manifest["supplier"] == supplier
        assert manifest["source"]["key"] == f"drops/{supplier}/{drops[supplier].name}"
        own = DROP_FILES if supplier == "acme" else GLOBEX_FILES
        assert {f["path"] for f in manifest["files"]} == set(own)
        foreign = [ids[other], drops[other].name, other, *(DROP_FILES if other == "acme" else GLOBEX_FILES)]
        assert [name for name in foreign if name in text] == []

        [note] = boxes[supplier].fetch()  # the filter policy lets only this supplier's through
        assert (note.attributes["supplier"], note.attributes["scan_id"]) == (supplier, ids[supplier])
        assert [name for name in foreign if name in note.subject or name in note.message] == []
    assert len(stack.mailbox.fetch()) == 2  # an unfiltered subscriber gets both


def test_a_key_that_climbs_out_of_its_supplier_prefix_stays_with_its_uploader(
    stack: EmbeddedStack, tmp_path: Path
) -> None:
    drop = make_tar(tmp_path / "x.tar.gz", {"a/b.txt": b"b\n"})
    key = "drops/acme/../globex/x.tar.gz"  # S3 keys are names, not paths: this one is acme's
    stack.client.s3.upload_file(str(drop), stack.names.drops_bucket, key)
    assert stack.dispatcher.drain(timeout=60)
    listed = stack.client.s3.list_objects_v2(Bucket=stack.names.results_bucket, Prefix="results/")
    [manifest_obj] = [o for o in listed["Contents"] if o["Key"].endswith("/manifest.json")]
    assert manifest_obj["Key"].startswith("results/acme/")
    [note] = stack.mailbox.fetch()
    assert note.attributes["supplier"] == "acme"

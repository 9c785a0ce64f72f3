"""What Lambda would run: the artefacts of ``sam build`` (``make package``), each in a fresh process.

Each function's ``app.handler`` is imported by ``python -S -B`` with only its folder and the layer's
``python/`` on sys.path (no site-packages, no LIBARCHIVE, nothing of this checkout), the libarchive
mapped into that process must be the layer's own, and the unpack and ingest handlers hash a real
upload against a moto server from there. ``make package-test`` builds and runs this (.ci/run does);
under plain ``make test`` it runs when a build is present, and says it was skipped otherwise.
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from dropscan.local.deploy import REGION, DeployedStack, deploy, project_root
from dropscan.local.embedded import _FAKE_CREDENTIALS

from helpers.builders import DROP_FILES, UPSTREAM_FILES, make_tar

BUILD = Path(os.environ.get("DROPSCAN_BUILD_DIR", project_root() / ".aws-sam" / "build"))
LAYER = BUILD / "SharedLayer" / "python"
CHILD = Path(__file__).with_name("lambda_child.py")
ZIP_FUNCTIONS = [
    "UnpackFunction",
    "LookupFunction",
    "FinalizeFunction",
    "TriageFunction",
    "NotifyFunction",
    "IngestFunction",
    "SweeperFunction",
]

if not (BUILD / "template.yaml").is_file():
    reason = f"no sam build in {BUILD}: make package (or make package-test) builds it"
    if os.environ.get("DROPSCAN_REQUIRE_PACKAGE") == "1":
        raise RuntimeError(reason)
    pytest.skip(reason, allow_module_level=True)


def run_child(function: str, env: dict[str, str] | None = None, event: Path | None = None) -> dict[str, Any]:
    """The handler of ``function`` imported (and called with ``event``) in a process of its own."""
    args = [sys.executable, "-S", "-B", str(CHILD), str(BUILD / function), str(LAYER)]
    # nothing of this machine's Python setup: no PYTHONPATH, no LIBARCHIVE, no virtual environment
    base = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "AWS_DEFAULT_REGION": REGION, **_FAKE_CREDENTIALS}
    done = subprocess.run(
        [*args, *([str(event)] if event else [])],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_the_build_is_of_this_checkout() -> None:
    """A stale build would test yesterday's code: every source file must equal its built copy."""
    source = project_root() / "shared" / "dropscan"
    stale = [
        str(p.relative_to(source))
        for p in source.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
        if not filecmp.cmp(p, LAYER / "dropscan" / p.relative_to(source), shallow=False)
    ]
    for function in ZIP_FUNCTIONS:
        app = project_root() / "functions" / function.removesuffix("Function").lower() / "app.py"
        if not filecmp.cmp(app, BUILD / function / "app.py", shallow=False):
            stale.append(str(app))
    assert not stale, f"run make package: the build differs from the checkout in {stale}"


#: the functions that read archives; the others must start without loading libarchive at all
READS_ARCHIVES = {"UnpackFunction", "IngestFunction", "FinalizeFunction", "TriageFunction", "SweeperFunction"}


@pytest.mark.parametrize("function", ZIP_FUNCTIONS)
def test_each_handler_imports_from_the_artefacts_alone_with_the_bundled_libarchive(function: str) -> None:
    got = run_child(function)
    if function not in READS_ARCHIVES:  # lookup and notify: no archive code at start-up
        assert got["libarchive"] == []
    else:  # the layer's libarchive and no other (not the system's: Lambda has none)
        bundled = str((LAYER / "archi.libs").resolve())
        assert len(got["libarchive"]) == 1 and got["libarchive"][0].startswith(bundled), got["libarchive"]
    assert got["outside"] == []


def test_the_layer_brings_boto3_botocore_and_s3transfer_as_one_set() -> None:
    def installed(name: str) -> tuple[Version, list[Requirement]]:
        [info] = LAYER.glob(f"{name}-*.dist-info")
        meta = (info / "METADATA").read_text().splitlines()
        version = next(line.split(": ", 1)[1] for line in meta if line.startswith("Version: "))
        requires = [
            Requirement(line.split(": ", 1)[1]) for line in meta if line.startswith("Requires-Dist: ")
        ]
        return Version(version), requires

    versions = {name: installed(name)[0] for name in ("boto3", "botocore", "s3transfer")}
    for name in ("boto3", "s3transfer"):
        for req in installed(name)[1]:
            if req.name in versions and not req.marker:
                assert versions[req.name] in req.specifier, (name, req, versions[req.name])


@pytest.fixture(scope="module")
def moto_stack() -> Iterator[tuple[DeployedStack, boto3.session.Session, str]]:
    """template.yaml deployed into a moto server on loopback, for the child processes to call."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    saved = dict(os.environ)
    os.environ.update({**_FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": url})
    try:
        session = boto3.session.Session(region_name=REGION)
        yield deploy(session, parameters={"TriageDetector": "tags"}), session, url
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.stop()


def sqs_event(session: boto3.session.Session, stack: DeployedStack, function: str) -> dict[str, Any]:
    """The S3 notification waiting in ``function``'s queue, as Lambda's poller would hand it over."""
    [mapping] = [m for m in stack.mappings if m.function.logical_id == function]
    sqs = session.client("sqs")
    for _ in range(10):
        messages = sqs.receive_message(QueueUrl=mapping.queue_url, MaxNumberOfMessages=1).get("Messages", [])
        for m in messages:
            if "s3:TestEvent" in m["Body"]:  # S3's first message when a notification is set up
                sqs.delete_message(QueueUrl=mapping.queue_url, ReceiptHandle=m["ReceiptHandle"])
                continue
            record = {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {},
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": mapping.queue_arn,
                "awsRegion": REGION,
            }
            return {"Records": [record]}
    raise AssertionError(f"no S3 notification reached {function}'s queue")


def invoke(
    stack: DeployedStack, url: str, function: str, event: dict[str, Any], tmp_path: Path
) -> dict[str, Any]:
    path = tmp_path / f"{function}.json"
    path.write_text(json.dumps(event))
    env = {**stack.functions[function].environment, "AWS_ENDPOINT_URL": url}
    return run_child(function, env, path)


def test_unpack_and_ingest_hash_an_upload_from_the_built_artefacts(
    moto_stack: tuple[DeployedStack, boto3.session.Session, str], tmp_path: Path
) -> None:
    stack, session, url = moto_stack
    s3, dynamodb = session.client("s3"), session.client("dynamodb")

    # ingest: an upstream release, its files' digests in the upstream table
    upstream = make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES)
    s3.upload_file(str(upstream), stack.outputs["UpstreamBucketName"], "upstream/foo/1.0/foo-1.0.tar.gz")
    got = invoke(stack, url, "IngestFunction", sqs_event(session, stack, "IngestFunction"), tmp_path)
    assert got["result"] == {"batchItemFailures": []}
    assert len(got["libarchive"]) == 1 and got["libarchive"][0].startswith(str(LAYER.resolve()))
    table = stack.outputs["UpstreamTableName"]
    for name, data in UPSTREAM_FILES.items():
        digest = hashlib.sha256(data).hexdigest()
        assert "Item" in dynamodb.get_item(TableName=table, Key={"pk": {"S": digest}}), name

    # unpack: a drop, every file hashed into the chunk sent to lookup
    drop = make_tar(tmp_path / "drop.tar.gz", DROP_FILES)
    s3.upload_file(str(drop), stack.outputs["DropsBucketName"], "drops/acme/drop.tar.gz")
    got = invoke(stack, url, "UnpackFunction", sqs_event(session, stack, "UnpackFunction"), tmp_path)
    assert got["result"] == {"batchItemFailures": []}
    [chunks] = [m for m in stack.mappings if m.function.logical_id == "LookupFunction"]
    messages = session.client("sqs").receive_message(QueueUrl=chunks.queue_url, MaxNumberOfMessages=10)
    records = [r for m in messages["Messages"] for r in json.loads(m["Body"])["records"]]
    assert {r["path"]: r["sha256"] for r in records} == {
        path: hashlib.sha256(data).hexdigest() for path, data in DROP_FILES.items()
    }

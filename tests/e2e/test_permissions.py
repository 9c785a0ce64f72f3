"""Least privilege, measured: every AWS call each function makes is allowed by its deployed role, and
every permission a role grants is used by some call (moto does not enforce IAM, so this is the check).

The calls are recorded on the real clients while the functions run a scenario that takes each code path
needing a permission: ingest (of a release archive, and of a git bundle in several parts), a scan whose
chunk is spilled to S3 and whose nested archive is checked against the upstream table and then fanned
out to an unpack invocation of its own, an unpack that fails once, a redelivered chunk, a poison chunk
and a poison upload swept as failed, a duplicate notification, and a plain scan through finalize whose
triage is fanned out to two parts and assembled.
"""

from __future__ import annotations

import ast
import json
import shutil
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST
from gitrepos import build_upstream_repo, git

from dropscan.keys import manifest_key, work_key
from dropscan.local.deploy import REGION
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.store.services import current_services

from helpers.builders import DROP_FILES, UPSTREAM_FILES, make_tar, tar_bytes
from helpers.faults import Faults, key_contains, query_error, s3_error

ACCOUNT = "123456789012"
DESK = "WebFunction"

#: grants no scenario here exercises, each with why it is needed all the same
RUNTIME = "the Lambda runtime writes the function's logs, not its code"
UNVERSIONED = "triage reads the scanned version; a drops bucket without versioning gives it no version id"
NO_PATH_LIST = "a release whose path list is missing must read as NoSuchKey, not AccessDenied"
NO_LICENCE_RECORD = "a release registered but not yet reported must read as NoSuchKey, not AccessDenied"
NO_MANIFEST_YET = "an image uploaded while its drop is scanned must find no manifest, not AccessDenied"
NO_RELEASE_NAMED = (
    "a binary named by an upstream release's literals reads its ingest report (the router image of "
    "tests/e2e/test_firmware_flow.py); this scenario's binary is named by none"
)
NOT_EXERCISED = {
    ("*", "logs:CreateLogStream"): RUNTIME,
    ("*", "logs:PutLogEvents"): RUNTIME,
    ("FinalizeFunction", "s3:ListBucket", "upstream"): NO_PATH_LIST,
    ("SweeperFunction", "s3:ListBucket", "upstream"): NO_PATH_LIST,
    ("TriageFunction", "s3:ListBucket", "upstream"): NO_LICENCE_RECORD,
    ("TriageFunction", "s3:GetObject", "drops"): UNVERSIONED,
    ("FirmwareFunction", "s3:ListBucket", "results"): NO_MANIFEST_YET,
    ("FirmwareFunction", "s3:GetObject", "upstream"): NO_RELEASE_NAMED,
}


@dataclass(frozen=True)
class Call:
    function: str
    action: str
    resource: str


def _s3(op: str, p: dict[str, Any]) -> list[tuple[str, str]]:
    if op in ("ListObjects", "ListObjectsV2"):
        return [("s3:ListBucket", f"arn:aws:s3:::{p['Bucket']}")]
    # IAM's actions for the calls of a multipart upload (a large fanned-out nested archive)
    multipart = {
        "CreateMultipartUpload": "PutObject",
        "UploadPart": "PutObject",
        "CompleteMultipartUpload": "PutObject",
    }
    action = "s3:GetObject" if op == "HeadObject" else f"s3:{multipart.get(op, op)}"
    if action == "s3:GetObject" and p.get("VersionId"):
        action = "s3:GetObjectVersion"  # IAM's action for reading one version of an object
    return [(action, f"arn:aws:s3:::{p['Bucket']}/{p['Key']}")]


def _dynamodb(op: str, p: dict[str, Any]) -> list[tuple[str, str]]:
    tables = list(p["RequestItems"]) if "RequestItems" in p else [p["TableName"]]
    arns = [f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{t}" for t in tables]
    if p.get("IndexName"):
        arns = [f"{a}/index/{p['IndexName']}" for a in arns]
    return [(f"dynamodb:{op}", a) for a in arns]


def _sqs(op: str, p: dict[str, Any]) -> list[tuple[str, str]]:
    action = {"DeleteMessageBatch": "DeleteMessage", "SendMessageBatch": "SendMessage"}.get(op, op)
    return [(f"sqs:{action}", f"arn:aws:sqs:{REGION}:{ACCOUNT}:{p['QueueUrl'].rsplit('/', 1)[-1]}")]


def _sns(op: str, p: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f"sns:{op}", p["TopicArn"])]


ACTIONS = {"s3": _s3, "dynamodb": _dynamodb, "sqs": _sqs, "sns": _sns}


@dataclass
class Recorder:
    """Every call made on the clients it is attached to, by the function running at the time."""

    stack: EmbeddedStack
    calls: set[Call] = field(default_factory=set)

    def attach(self, client: Any, *, by_queue: dict[str, str] | None = None) -> None:
        """``by_queue``: the calls name a queue, made on behalf of the function it is mapped to."""

        def before(params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
            service = model.service_model.service_name
            context["recorded"] = ACTIONS[service](model.name, params)
            function = (
                by_queue.get(params.get("QueueUrl", "")) if by_queue else self.stack.dispatcher.invoking
            )
            context["function"] = function

        def after(http_response: Any, context: dict[str, Any], **_: Any) -> None:
            function = context.get("function")
            if not function:
                return  # the test's own calls
            for action, resource in context.get("recorded", []):
                self.calls.add(Call(function, action, resource))
                if action == "s3:GetObject" and http_response.status_code == 404:
                    # S3 answers 404 rather than 403 only to whoever may list the bucket
                    self.calls.add(Call(function, "s3:ListBucket", resource.split("/", 1)[0]))

        client.meta.events.register("before-parameter-build", before)
        client.meta.events.register("after-call", after)


def deployed_statements(stack: EmbeddedStack) -> dict[str, list[dict[str, Any]]]:
    """The inline statements of each function's role, as moto's IAM holds them (intrinsics resolved)."""
    lam, iam = stack.session.client("lambda"), stack.session.client("iam")
    out: dict[str, list[dict[str, Any]]] = {}
    for logical, fn in stack.stack.functions.items():
        role = lam.get_function_configuration(FunctionName=fn.name)["Role"].rsplit("/", 1)[-1]
        assert not iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]
        out[logical] = []
        for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
            doc: Any = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
            doc = ast.literal_eval(doc) if isinstance(doc, str) else doc  # moto keeps the repr
            out[logical] += doc["Statement"]
    return out


def as_list(v: Any) -> list[str]:
    return v if isinstance(v, list) else [v]


def allows(statements: list[dict[str, Any]], action: str, resource: str) -> bool:
    return any(
        action in as_list(s["Action"]) and any(fnmatchcase(resource, r) for r in as_list(s["Resource"]))
        for s in statements
    )


def excused(function: str, action: str, pattern: str) -> bool:
    return ("*", action) in NOT_EXERCISED or any(
        k[:2] == (function, action) and len(k) == 3 and k[2] in pattern for k in NOT_EXERCISED
    )


Recorded = tuple[EmbeddedStack, set[Call]]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    """The scenario, run once for the module's tests: the stack and the calls recorded."""
    tmp_path = tmp_path_factory.mktemp("permissions")
    # FanOutMiB 0: the nested archive is a part of its own (copied to work/, sent to the upload queue)
    # IngestBudgetSeconds 0: a git bundle's ingest stops after each tag and sends itself the rest
    # TriageMaxFiles 1: the plain scan's two review files are triaged by two parts, then assembled
    params = {
        **FAST,
        "ChunkSize": "1000",
        "FanOutMiB": "0",
        "IngestBudgetSeconds": "0",
        "TriageMaxFiles": "1",
        "TriageMaxParts": "16",  # the deployed default: the scan's triage is cut into parts
    }
    with embedded(parameters=params) as stack, Faults() as faults:
        svc = current_services()
        recorder = Recorder(stack)
        for client in (svc.s3, svc.sqs, svc.sns, svc.dynamodb):
            recorder.attach(client)
        recorder.attach(svc.scans.model._get_connection().connection.client)
        recorder.attach(
            stack.dispatcher.sqs, by_queue={m.queue_url: m.function.logical_id for m in stack.stack.mappings}
        )
        _scenario(stack, faults, tmp_path)
        yield stack, recorder.calls


def _scenario(stack: EmbeddedStack, faults: Faults, tmp_path: Path) -> None:
    svc, client, dispatcher = current_services(), stack.client, stack.dispatcher
    client.ingest(make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES), "foo", "1.0")
    # the first merge into the table reads nothing first; the second reads what the first wrote
    client.ingest(make_tar(tmp_path / "foo-1.1.tar.gz", UPSTREAM_FILES), "foo", "1.1")
    # a git bundle: its packs and state under git/, ingested over several invocations
    bundle = tmp_path / "bar.bundle"
    git(build_upstream_repo(tmp_path), "bundle", "create", "-q", str(bundle), "--all")
    assert client.ingest_bundle(bundle, "bar")["complete"]

    # chunk 0: the foo files, a nested archive and enough long paths to go to S3; chunk 1: the rest
    long = {f"big/{'sub-directory/' * 14}file{i:04d}.txt": f"{i}\n".encode() for i in range(1000)}
    nested = {"vendor/fixture.tar.gz": tar_bytes({"data/a.txt": b"a\n"})}
    big = make_tar(tmp_path / "big.tar", {**DROP_FILES, **nested, **long}, "")
    # the first unpack fails (its idempotency record is deleted), the redelivery goes through
    faults.error(svc.s3, "GetObject", s3_error("AccessDenied", 403), when=key_contains("big.tar"))
    poison = key_contains("/results/000001")
    faults.error(svc.s3, "PutObject", s3_error("AccessDenied", 403), times=None, when=poison)
    _, big_id = client.upload_drop(big, "acme")
    assert dispatcher.drain(timeout=120)
    sqs = stack.session.client("sqs")
    queues = {m.function.logical_id: m.queue_url for m in stack.stack.mappings}
    again = {"scan_id": big_id, "seq": 0, "records_key": work_key(big_id, "chunks", 0)}
    sqs.send_message(QueueUrl=queues["LookupFunction"], MessageBody=json.dumps(again))  # a redelivered chunk
    assert dispatcher.drain(timeout=60)

    faults.error(svc.s3, "HeadObject", s3_error("AccessDenied", 403), times=None, when=key_contains("gone"))
    client.upload_drop(make_tar(tmp_path / "gone.tar.gz", {"x/y.txt": b"y\n"}), "acme")
    assert dispatcher.drain(timeout=60)
    result = dispatcher.run_scheduled("SweeperFunction", at=datetime.now(UTC) + timedelta(minutes=90))
    assert (len(result["timed_out"]), len(result["dead_lettered"])) == (1, 1), result
    assert dispatcher.drain(timeout=60)

    record = {"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": stack.names.results_bucket},
              "object": {"key": manifest_key("acme", big_id)}}}  # fmt: skip
    sqs.send_message(QueueUrl=queues["NotifyFunction"], MessageBody=json.dumps({"Records": [record]}))

    empty = tmp_path / "empty.tar.gz"
    empty.write_bytes(b"")  # rejected by unpack, which then sends the finalize message itself
    client.upload_drop(empty, "acme")
    faults.error(svc.sns, "Publish", query_error("AuthorizationError", 403))  # a notify fails once
    _, plain_id = client.upload_drop(make_tar(tmp_path / "plain.tar.gz", DROP_FILES), "acme")
    assert client.wait_manifest("acme", plain_id, timeout=60) is not None
    assert dispatcher.drain(timeout=60)

    # firmware: an image before its drop (notify holds the notification and sends the scan to the
    # firmware queue), one after it (its own event; its first read fails once), one for no drop at all
    rootfs = make_tar(
        tmp_path / "rootfs.tar.gz", {"bin/true": Path(shutil.which("true") or "/bin/true").read_bytes()}
    )
    fw_drop = make_tar(tmp_path / "fw.tar.gz", DROP_FILES)
    client.upload_firmware(rootfs, "acme", fw_drop.name)
    _, fw_id = client.upload_drop(fw_drop, "acme")
    second = client.upload_firmware(rootfs.rename(tmp_path / "second.tar.gz"), "acme", fw_drop.name)
    faults.error(svc.s3, "GetObject", s3_error("AccessDenied", 403), when=key_contains("second.tar.gz"))
    assert client.wait_manifest("acme", fw_id, timeout=60, firmware=[second]) is not None
    client.upload_firmware(tmp_path / "second.tar.gz", "acme", "never-uploaded.tar.gz")
    assert dispatcher.drain(timeout=60)


def test_every_call_a_function_makes_is_allowed_by_its_role(
    recorded: tuple[EmbeddedStack, set[Call]],
) -> None:
    stack, calls = recorded
    statements = deployed_statements(stack)
    statements.pop(DESK)  # the review desk's calls: tests/e2e/test_web_permissions.py
    assert {c.function for c in calls} == set(statements)
    denied = sorted(
        (c.function, c.action, c.resource)
        for c in calls
        if not allows(statements[c.function], c.action, c.resource)
    )
    assert denied == []


def test_every_permission_a_role_grants_is_used(recorded: Recorded) -> None:
    stack, calls = recorded
    by_function: dict[str, list[Call]] = defaultdict(list)
    for c in calls:
        by_function[c.function].append(c)
    unused = []
    for function, statements in deployed_statements(stack).items():
        if function == DESK:
            continue  # tests/e2e/test_web_permissions.py
        for s in statements:
            for action in as_list(s["Action"]):
                for pattern in as_list(s["Resource"]):
                    used = any(
                        c.action == action and fnmatchcase(c.resource, pattern) for c in by_function[function]
                    )
                    if not used and not excused(function, action, pattern):
                        unused.append((function, s.get("Sid"), action, pattern))
    assert sorted(unused) == [], "\n".join(map(str, sorted(unused)))


# ------------------------------------------------------------------ auditors (ComplianceRole)
def test_auditors_calls_are_what_the_compliance_role_grants_and_only_it_writes_decisions(
    tmp_path: Path,
) -> None:
    """`dropscan decide`, `decisions list|export|import` and `history` make only calls ComplianceRole
    allows, use every grant it has, and no function's role but the review desk's may write the decisions
    table."""
    from dropscan.audit.decision_rules import merge, record
    from dropscan.keys import product_key

    with embedded() as stack:
        client = stack.client
        client.ingest(make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES), "foo", "1.0")
        _, scan_id = client.upload_drop(make_tar(tmp_path / "foo-1.0-acme.tar.gz", DROP_FILES), "acme")
        manifest = client.wait_manifest("acme", scan_id, timeout=120)
        assert manifest is not None

        calls: set[tuple[str, str]] = set()

        def before(params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
            calls.update(ACTIONS[model.service_model.service_name](model.name, params))

        for c in (client.decisions.client, client.scans.model._get_connection().connection.client):
            c.meta.events.register("before-parameter-build", before)
        # what the commands do, through the client they drive
        decided = record(manifest, all_review=True, verdict="accepted", by="alice", at="2026-01-01T00:00:00")
        client.write_decisions(merge(client.existing_decisions(decided), decided).write)
        assert len(list(client.decisions.all())) == len(decided)
        assert len(list(client.decisions.of_scope("supplier", "acme"))) == len(decided)
        assert list(client.decisions.of_scope("global")) == []
        [scan] = client.history("acme", manifest["product"])
        assert scan["scan_id"] == scan_id and product_key("acme", manifest["product"]) == "acme/foo-acme"

        iam = stack.session.client("iam")
        role = stack.stack.outputs["ComplianceRoleArn"].rsplit("/", 1)[-1]
        statements: list[dict[str, Any]] = []
        for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
            doc: Any = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
            statements += (ast.literal_eval(doc) if isinstance(doc, str) else doc)["Statement"]
        assert sorted(c for c in calls if not allows(statements, *c)) == []
        unused = [
            (a, r)
            for s in statements
            for a in as_list(s["Action"])
            for r in as_list(s["Resource"])
            if not any(c[0] == a and fnmatchcase(c[1], r) for c in calls)
        ]
        assert unused == []

        table = stack.names.decisions_table
        writes = ("dynamodb:PutItem", "dynamodb:BatchWriteItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
        arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}"
        writers = [
            (function, action)
            for function, fs in deployed_statements(stack).items()
            for action in writes
            if allows(fs, action, arn)
        ]
        assert writers == [(DESK, "dynamodb:BatchWriteItem")]  # for a signed-in reviewer (docs/web.md)
        assert any(allows(statements, a, arn) for a in writes)

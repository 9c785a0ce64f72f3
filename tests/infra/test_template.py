"""Assertions on template.yaml as CloudFormation sees it (after SAM translation)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dropscan.local.deploy import CACHE_ENV, cached_translation, project_root, translate
from dropscan.local.embedded import embedded


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    tr = translate(project_root())
    res: dict[str, Any] = tr.template["Resources"]
    # translate() sets aside what moto lacks; put it back to check the whole template
    res.update(tr.queue_policies)
    res.update(tr.bucket_policies)
    res.update(tr.identity)
    for bucket, conf in tr.notifications.items():
        res[bucket]["Properties"]["NotificationConfiguration"] = conf
    return res


@pytest.fixture(scope="module")
def parameters() -> dict[str, Any]:
    from samtranslator.yaml_helper import yaml_parse

    data: dict[str, Any] = yaml_parse((project_root() / "template.yaml").read_text())["Parameters"]
    return data


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {n: r for n, r in resources.items() if r["Type"] == kind}


def _value(v: Any, parameters: dict[str, Any]) -> int:
    return int(parameters[v["Ref"]]["Default"]) if isinstance(v, dict) else int(v)


def test_every_event_source_reports_partial_batch_failures(resources: dict[str, Any]) -> None:
    mappings = of_type(resources, "AWS::Lambda::EventSourceMapping")
    # unpack, lookup, finalize, notify, ingest, and triage and firmware in either form (zip or image, by
    # Condition)
    assert len(mappings) == 9
    for m in mappings.values():
        assert m["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_every_consumed_queue_has_a_dead_letter_queue(resources: dict[str, Any]) -> None:
    for m in of_type(resources, "AWS::Lambda::EventSourceMapping").values():
        queue = resources[m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]]
        dlq = queue["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        assert resources[dlq]["Type"] == "AWS::SQS::Queue"


def test_visibility_timeout_exceeds_the_consuming_function_timeout(
    resources: dict[str, Any], parameters: dict[str, Any]
) -> None:
    for m in of_type(resources, "AWS::Lambda::EventSourceMapping").values():
        queue = resources[m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]]
        fn = resources[m["Properties"]["FunctionName"]["Ref"]]
        visibility = _value(queue["Properties"]["VisibilityTimeout"], parameters)
        assert visibility > _value(fn["Properties"]["Timeout"], parameters)


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def named_resources(expr: Any) -> set[str]:
    """Logical ids an intrinsic refers to (Ref, GetAtt, and ${X} / ${X.Attr} in Sub)."""
    if isinstance(expr, dict) and "Ref" in expr:
        return {expr["Ref"]}
    if isinstance(expr, dict) and "Fn::GetAtt" in expr:
        return {expr["Fn::GetAtt"][0]}
    if isinstance(expr, dict) and "Fn::Sub" in expr:
        return {m.split(".")[0] for m in re.findall(r"\$\{([A-Za-z0-9.]+)\}", expr["Fn::Sub"])}
    return set()


def test_each_function_has_a_role_of_its_own_and_no_managed_policies(resources: dict[str, Any]) -> None:
    functions = of_type(resources, "AWS::Lambda::Function")
    # the two forms of triage (of firmware) share a role: a Condition deploys exactly one of them
    for stage in ("Triage", "Firmware"):
        assert {functions[n]["Condition"] for n in (f"{stage}Function", f"{stage}ImageFunction")} == {
            f"{stage}OnZip",
            f"{stage}OnImage",
        }
    second_forms = ("TriageImageFunction", "FirmwareImageFunction")
    roles = [f["Properties"]["Role"]["Fn::GetAtt"][0] for n, f in functions.items() if n not in second_forms]
    assert len(set(roles)) == len(functions) - 2
    for role in roles:
        props = resources[role]["Properties"]
        assert not props.get("ManagedPolicyArns"), role  # AWS's managed Lambda policies grant on "*"
        assert props["AssumeRolePolicyDocument"]["Statement"] == [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ]


def test_role_statements_name_their_actions_and_resources(resources: dict[str, Any]) -> None:
    for name, role in of_type(resources, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for stmt in policy["PolicyDocument"]["Statement"]:
                assert stmt["Effect"] == "Allow" and "NotAction" not in stmt and "NotResource" not in stmt
                for action in as_list(stmt["Action"]):
                    assert "*" not in action, (name, action)
                for target in as_list(stmt["Resource"]):
                    named = named_resources(target)
                    assert named and named <= set(resources) | {"AWS::Partition"}, (name, target)
                    if "Fn::Sub" in target:
                        # a wildcard only after a named bucket, for a key prefix, or for one folder
                        # of one named file (finalize's file indexes: results/*/files.json.gz)
                        text = target["Fn::Sub"]
                        ok = r"[^*]+\}/[a-z]+/\*", r"[^*]+\}/[a-z]+/\*/[a-z.]+"
                        assert "*" not in text or any(re.fullmatch(p, text) for p in ok), (name, text)


def test_every_role_statement_is_about_a_resource_of_this_stack(resources: dict[str, Any]) -> None:
    kinds = {
        "s3": {"AWS::S3::Bucket"},
        "dynamodb": {"AWS::DynamoDB::Table"},
        "sqs": {"AWS::SQS::Queue"},
        "sns": {"AWS::SNS::Topic"},
        "logs": {"AWS::Logs::LogGroup"},
    }
    for name, role in of_type(resources, "AWS::IAM::Role").items():
        for policy in role["Properties"]["Policies"]:
            for stmt in policy["PolicyDocument"]["Statement"]:
                services = {a.split(":")[0] for a in as_list(stmt["Action"])}
                [service] = services
                for target in as_list(stmt["Resource"]):
                    named = named_resources(target) - {"AWS::Partition"}
                    assert {resources[n]["Type"] for n in named} <= kinds[service], (name, stmt["Sid"])


def test_buckets_block_public_access_and_encrypt(resources: dict[str, Any]) -> None:
    buckets = of_type(resources, "AWS::S3::Bucket")
    assert len(buckets) == 3
    for b in buckets.values():
        props = b["Properties"]
        assert all(props["PublicAccessBlockConfiguration"].values())
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]


def test_buckets_refuse_requests_without_tls(resources: dict[str, Any]) -> None:
    policies = {
        p["Properties"]["Bucket"]["Ref"]: p for p in of_type(resources, "AWS::S3::BucketPolicy").values()
    }
    assert set(policies) == set(of_type(resources, "AWS::S3::Bucket"))
    for bucket, policy in policies.items():
        [stmt] = policy["Properties"]["PolicyDocument"]["Statement"]
        assert (stmt["Effect"], stmt["Principal"], stmt["Action"]) == ("Deny", "*", "s3:*")
        assert stmt["Condition"] == {"Bool": {"aws:SecureTransport": False}}
        assert stmt["Resource"] == [
            {"Fn::GetAtt": [bucket, "Arn"]},
            {"Fn::Sub": f"${{{bucket}.Arn}}/*"},
        ]


def test_drops_are_versioned_and_work_files_expire(resources: dict[str, Any]) -> None:
    assert resources["DropsBucket"]["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    rules = resources["ResultsBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    [work] = [r for r in rules if r.get("Prefix") == "work/"]
    assert work["Status"] == "Enabled" and work["ExpirationInDays"] <= 30
    for bucket in of_type(resources, "AWS::S3::Bucket").values():
        rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
        assert any("AbortIncompleteMultipartUpload" in r for r in rules)


def test_queues_topic_and_tables_are_encrypted(resources: dict[str, Any]) -> None:
    for name, queue in of_type(resources, "AWS::SQS::Queue").items():
        assert queue["Properties"].get("SqsManagedSseEnabled") or queue["Properties"].get("KmsMasterKeyId"), (
            name
        )
    [topic] = of_type(resources, "AWS::SNS::Topic").values()
    assert topic["Properties"]["KmsMasterKeyId"] == "alias/aws/sns"
    for name, table in of_type(resources, "AWS::DynamoDB::Table").items():
        assert table["Properties"]["SSESpecification"] == {"SSEEnabled": True}, name


def test_idempotency_table_is_what_powertools_expects(resources: dict[str, Any]) -> None:
    props = resources["IdempotencyTable"]["Properties"]
    assert props["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}


def test_the_sweeper_runs_on_a_schedule_with_the_deadline(
    resources: dict[str, Any], parameters: dict[str, Any]
) -> None:
    [rule] = of_type(resources, "AWS::Events::Rule").values()
    assert rule["Properties"]["ScheduleExpression"] == "rate(5 minutes)"
    assert rule["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": ["SweeperFunction", "Arn"]}
    env = resources["SweeperFunction"]["Properties"]["Environment"]["Variables"]
    assert env["SCAN_DEADLINE_MINUTES"] == {"Ref": "ScanDeadlineMinutes"}
    # the deadline outlasts the longest stage: 15 minutes of unpack
    assert int(parameters["ScanDeadlineMinutes"]["MinValue"]) > 15


def test_each_upload_prefix_notifies_its_queue(resources: dict[str, Any]) -> None:
    def rules(bucket: str) -> dict[str, list[tuple[str, str]]]:
        confs = resources[bucket]["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
        return {
            c["Queue"]["Fn::GetAtt"][0]: [(r["Name"], r["Value"]) for r in c["Filter"]["S3Key"]["Rules"]]
            for c in confs
        }

    assert rules("DropsBucket") == {
        "UploadQueue": [("prefix", "drops/")],
        "FirmwareQueue": [("prefix", "firmware/")],
    }
    assert rules("UpstreamBucket") == {"IngestQueue": [("prefix", "upstream/")]}
    assert rules("ResultsBucket") == {"NotifyQueue": [("prefix", "results/"), ("suffix", "manifest.json")]}


@pytest.mark.parametrize(("reserved", "expected"), [(None, None), ("25", 25)])
def test_unpack_reserved_concurrency_is_set_only_when_asked_for(
    reserved: str | None, expected: int | None
) -> None:
    parameters = {} if reserved is None else {"UnpackReservedConcurrency": reserved}
    with embedded(parameters=parameters) as es:
        lam = es.session.client("lambda")
        unpack = es.stack.functions["UnpackFunction"].name
        assert (
            lam.get_function_concurrency(FunctionName=unpack).get("ReservedConcurrentExecutions") == expected
        )
        lookup = es.stack.functions["LookupFunction"].name
        assert "ReservedConcurrentExecutions" not in lam.get_function_concurrency(FunctionName=lookup)


def test_triage_limits_reach_the_triage_function_and_its_budget_ends_before_its_timeout(
    resources: dict[str, Any], parameters: dict[str, Any]
) -> None:
    """One triage invocation is bounded by its limits (issue 22): every one is set on the function, and
    detection stops with time left of the longest timeout for the reports and the manifest."""
    merged = resources["TriageFunction"]["Properties"]["Environment"]["Variables"]
    for var, param in (
        ("TRIAGE_MAX_FILES", "TriageMaxFiles"),
        ("TRIAGE_MAX_MIB", "TriageMaxMiB"),
        ("TRIAGE_BUDGET_SECONDS", "TriageBudgetSeconds"),
        ("TRIAGE_MAX_PARTS", "TriageMaxParts"),
    ):
        assert merged[var] == {"Ref": param}
    assert int(parameters["TriageBudgetSeconds"]["MaxValue"]) < int(parameters["FunctionTimeout"]["MaxValue"])
    # content held stays below the smallest memory the triage function may have, less ScanCode's index
    assert int(parameters["TriageMaxMiB"]["Default"]) + 1400 < int(parameters["TriageMemorySize"]["MinValue"])


def test_decisions_are_keyed_by_subject_and_scope_and_written_by_auditors_only(
    resources: dict[str, Any],
) -> None:
    table = resources["DecisionsTable"]["Properties"]
    assert [(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]] == [
        ("subject", "HASH"), ("scope", "RANGE")
    ]  # fmt: skip
    writes = {"dynamodb:PutItem", "dynamodb:BatchWriteItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
    writers = {
        name
        for name, role in of_type(resources, "AWS::IAM::Role").items()
        for policy in role["Properties"].get("Policies", [])
        for stmt in policy["PolicyDocument"]["Statement"]
        if writes & set(as_list(stmt["Action"]))
        and any("DecisionsTable" in str(r) for r in as_list(stmt["Resource"]))
    }
    # auditors with ComplianceRole (the CLI), and the review desk for a signed-in reviewer
    assert writers == {"ComplianceRole", "WebRole"}


def test_a_local_start_reuses_the_translation_of_an_unchanged_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    start = (
        "import sys; from dropscan.local.deploy import cached_translation, project_root; "
        "tr = cached_translation(project_root()); "
        "print(len(tr.template['Resources']), 'samtranslator' in sys.modules)"
    )
    runs = [
        subprocess.run([sys.executable, "-c", start], capture_output=True, text=True, check=True)
        for _ in "ab"
    ]
    resources = str(len(translate(project_root()).template["Resources"]))
    assert [r.stdout.split() for r in runs] == [[resources, "True"], [resources, "False"]]
    assert cached_translation(project_root()) == translate(project_root())

    other = cached_translation(project_root(), {"TriageDetector": "tags"})
    assert other == translate(project_root(), {"TriageDetector": "tags"})
    kept = sorted((tmp_path / "cache").iterdir())
    assert len(kept) == 2  # one per set of parameters
    for path in kept:
        path.write_text("{not json")  # a damaged entry is translated again, and replaced
    assert cached_translation(project_root()) == translate(project_root())
    readable = []
    for path in kept:
        try:
            readable.append(json.loads(path.read_text())["template"] == translate(project_root()).template)
        except ValueError:
            readable.append(False)
    assert sorted(readable) == [False, True]


# ------------------------------------------------------------------ the review desk
def test_the_desk_api_checks_cognito_tokens_on_every_route_but_the_public_ones(
    resources: dict[str, Any],
) -> None:
    from dropscan.web.routes import PUBLIC_ROUTES

    [api] = of_type(resources, "AWS::ApiGatewayV2::Api").values()
    body = api["Properties"]["Body"]
    [scheme] = body["components"]["securitySchemes"].values()
    jwt = scheme["x-amazon-apigateway-authorizer"]
    assert jwt["type"] == "jwt" and jwt["identitySource"] == "$request.header.Authorization"
    assert jwt["jwtConfiguration"]["audience"] == [{"Ref": "UserPoolClient"}]
    assert jwt["jwtConfiguration"]["issuer"] == {
        "Fn::Sub": "https://cognito-idp.${AWS::Region}.amazonaws.com/${UserPool}"
    }
    public = set()
    for path, methods in body["paths"].items():
        for method, op in methods.items():
            assert op["x-amazon-apigateway-integration"]["payloadFormatVersion"] == "2.0"
            if op["security"] == [{"NONE": []}]:
                public.add((method.upper(), path))
            else:
                assert op["security"] == [{next(iter(body["components"]["securitySchemes"])): []}]
    assert public == set(PUBLIC_ROUTES)  # the function's list of what needs no token is the API's


def test_the_desk_users_pool_is_admin_only_and_its_sessions_end(resources: dict[str, Any]) -> None:
    pool = resources["UserPool"]["Properties"]
    assert pool["AdminCreateUserConfig"] == {"AllowAdminCreateUserOnly": True}  # no self sign-up
    assert pool["Policies"]["PasswordPolicy"]["MinimumLength"] >= 12
    client = resources["UserPoolClient"]["Properties"]
    assert client["GenerateSecret"] is False and client["PreventUserExistenceErrors"] == "ENABLED"
    assert (client["IdTokenValidity"], client["TokenValidityUnits"]["IdToken"]) == (60, "minutes")
    assert set(client["ExplicitAuthFlows"]) == {"ALLOW_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"}


def test_the_desk_says_the_pools_password_policy_as_it_is(resources: dict[str, Any]) -> None:
    from dropscan.store.identity import POLICY

    # a first sign-in's refused password is answered with these words (dropscan.store.identity.POLICY)
    policy = resources["UserPool"]["Properties"]["Policies"]["PasswordPolicy"]
    assert f"at least {policy['MinimumLength']} characters" in POLICY
    assert policy["RequireUppercase"] and policy["RequireLowercase"] and "upper and lower case" in POLICY
    assert policy["RequireNumbers"] and "a digit" in POLICY
    assert not policy["RequireSymbols"] and "symbol" not in POLICY


def test_the_desk_writes_decisions_and_its_index_only(resources: dict[str, Any]) -> None:
    statements = resources["WebRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    granted = {(a, json.dumps(r, sort_keys=True)) for s in statements for a in as_list(s["Action"])
               for r in as_list(s["Resource"])}  # fmt: skip
    writes = {
        (a, r)
        for a, r in granted
        if a.startswith("dynamodb:") and a.split(":")[1].startswith(("Put", "BatchWrite", "Update", "Delete"))
    }
    assert writes == {("dynamodb:BatchWriteItem", json.dumps({"Fn::GetAtt": ["DecisionsTable", "Arn"]}))}
    s3 = {a for a, _ in granted if a.startswith("s3:")}
    assert s3 == {"s3:GetObject", "s3:ListBucket", "s3:PutObject"}
    # the one write to S3: a scan's desk index, made again beside its manifest (docs/web.md)
    puts = {json.loads(r)["Fn::Sub"] for a, r in granted if a == "s3:PutObject"}
    assert {p.rsplit("/", 1)[1] for p in puts} == {"desk.index.json", "desk.files.jsonl"}

"""Assertions on template.yaml as CloudFormation sees it (after SAM translation)."""

from __future__ import annotations

from typing import Any

import pytest

from dropscan.local.stack import project_root, translate


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    tr = translate(project_root())
    res: dict[str, Any] = tr.template["Resources"]
    # translate() sets aside what moto lacks; put it back to check the whole template
    res.update(tr.queue_policies)
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
    assert len(mappings) == 6  # unpack, lookup, finalize, triage, notify, ingest
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


def test_inline_policies_name_actions_and_resources(resources: dict[str, Any]) -> None:
    for name, role in of_type(resources, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for stmt in policy["PolicyDocument"]["Statement"]:
                actions = stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]]
                assert all(a != "*" and not a.endswith(":*") for a in actions), (name, actions)
                targets = stmt["Resource"] if isinstance(stmt["Resource"], list) else [stmt["Resource"]]
                assert "*" not in targets, (name, stmt)


def test_buckets_block_public_access_and_encrypt(resources: dict[str, Any]) -> None:
    buckets = of_type(resources, "AWS::S3::Bucket")
    assert len(buckets) == 3
    for b in buckets.values():
        props = b["Properties"]
        assert all(props["PublicAccessBlockConfiguration"].values())
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]


def test_each_upload_prefix_notifies_its_queue(resources: dict[str, Any]) -> None:
    def rules(bucket: str) -> list[tuple[str, str]]:
        [conf] = resources[bucket]["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
        return [(r["Name"], r["Value"]) for r in conf["Filter"]["S3Key"]["Rules"]]

    assert rules("DropsBucket") == [("prefix", "drops/")]
    assert rules("UpstreamBucket") == [("prefix", "upstream/")]
    assert rules("ResultsBucket") == [("prefix", "results/"), ("suffix", "manifest.json")]

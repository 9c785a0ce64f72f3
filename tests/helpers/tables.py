"""Tables for moto tests, made as template.yaml defines them (keys, indexes, billing): no second list."""

from __future__ import annotations

from typing import Any

from samtranslator.yaml_helper import yaml_parse

from dropscan.local.deploy import project_root

#: properties of AWS::DynamoDB::Table that CreateTable takes as they are
_CREATE_TABLE = ("AttributeDefinitions", "KeySchema", "GlobalSecondaryIndexes", "BillingMode")


def create_table(client: Any, logical_id: str, name: str) -> str:
    """Create the table that template.yaml names ``logical_id``, as ``name``; returns the name."""
    template = yaml_parse((project_root() / "template.yaml").read_text())
    props = template["Resources"][logical_id]["Properties"]
    client.create_table(TableName=name, **{k: props[k] for k in _CREATE_TABLE if k in props})
    return name

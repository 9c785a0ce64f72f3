"""moto's DynamoDB rates for digest items of the earlier layout and the current one; medians of runs.

moto's response serializer costs per attribute value, so the layout of an item decides how fast the
embedded stack looks digests up. Lookups of absent keys (nothing to serialise) are the floor.

    PYTHONPATH=shared python bench/moto_items.py [--items 5000] [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
from collections.abc import Callable
from typing import Any

from dropscan.upstream_db import digest_item

from hash_bench import timed as median

LAYOUTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "earlier (forms set + pkgs map of maps)": lambda d: {
        "pk": {"S": d},
        "forms": {"SS": ["raw"]},
        "pkgs": {"M": {"linux": {"M": {"lo": {"S": "6.1.176"}, "hi": {"S": "6.1.176"}}}}},
    },
    "current (pk + one JSON value)": lambda d: digest_item(d, {"f": ["raw"], "p": {"linux": ["6.1.176"]}}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--items", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    import boto3
    from moto import mock_aws

    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(a.items)]
    absent = [hashlib.sha256(b"absent" + str(i).encode()).hexdigest() for i in range(a.items)]
    with mock_aws():
        client = boto3.client("dynamodb")
        print("| layout | BatchWriteItem items/s | BatchGetItem keys/s |\n|---|---|---|")
        for n, (name, item) in enumerate(LAYOUTS.items()):
            table = f"t{n}"
            client.create_table(
                TableName=table,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )

            def put(table: str = table, item: Callable[[str], dict[str, Any]] = item) -> None:
                for i in range(0, len(keys), 25):
                    page = [{"PutRequest": {"Item": item(k)}} for k in keys[i : i + 25]]
                    client.batch_write_item(RequestItems={table: page})

            def get(table: str = table, wanted: list[str] = keys) -> None:
                for i in range(0, len(wanted), 100):
                    page = [{"pk": {"S": k}} for k in wanted[i : i + 100]]
                    client.batch_get_item(RequestItems={table: {"Keys": page}})

            writes = a.items / median(put, a.runs)
            reads = a.items / median(get, a.runs)
            print(f"| {name} | {writes:,.0f} | {reads:,.0f} |")
        floor = a.items / median(lambda: get("t0", absent), a.runs)
        print(f"| absent keys (the floor) | | {floor:,.0f} |")


if __name__ == "__main__":
    main()

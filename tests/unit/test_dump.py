"""A database dump carries what the next load needs: path lists with the licence recorded at ingest."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dropscan.models import Release
from dropscan.store.dump import export_db, export_rest, git_states, import_db
from dropscan.store.releases import Releases, save_release
from dropscan.store.upstream import UpstreamDB

from helpers.tables import create_table

LICENCE = {"spdx": "GPL-2.0-only", "source": "LICENSE"}


@pytest.fixture
def aws() -> Iterator[tuple[Any, Any]]:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        s3 = boto3.client("s3", region_name="us-east-1")
        create_table(dynamodb, "UpstreamTable", "upstream")
        create_table(dynamodb, "UpstreamTable", "loaded")
        for bucket in ("here", "there"):
            s3.create_bucket(Bucket=bucket)
        yield dynamodb, s3


def test_each_release_keeps_the_licence_recorded_at_its_ingest(aws: tuple[Any, Any]) -> None:
    # Given three releases, two of them ingested with a report (one naming a licence) and a third
    # registered from a git tag, without any report
    dynamodb, s3 = aws
    db = UpstreamDB(dynamodb, "upstream")
    for version in ("1.0", "1.1", "1.10"):
        save_release(s3, "here", Release("foo", version, {"a.c": "0" * 64}))
    Releases(s3, "here").put_report("foo", "1.0", {"package": "foo", "version": "1.0", "license": LICENCE})
    Releases(s3, "here").put_report("foo", "1.1", {"package": "foo", "version": "1.1"})
    db.register("foo", ["1.0", "1.1", "1.10"], None)
    # When the database is dumped
    out = io.BytesIO()
    export_db(db, s3, "here", out)
    lines = [json.loads(line) for line in gzip.decompress(out.getvalue()).splitlines()]
    # Then each path list is there, with the licence where one was recorded
    listed = {line["version"]: line.get("license") for line in lines if "release" in line}
    assert listed == {"1.0": LICENCE, "1.1": None, "1.10": None}
    # and a load elsewhere records it again in that release's report
    out.seek(0)
    import_db(UpstreamDB(dynamodb, "loaded"), s3, "there", out)
    assert (Releases(s3, "there").report("foo", "1.0") or {}).get("license") == LICENCE
    assert Releases(s3, "there").reported("foo") == {"1.0"}


def test_a_git_state_copied_as_stored_loads_as_the_state_itself(aws: tuple[Any, Any]) -> None:
    # Given a package's git state, with text that JSON escapes (a subject's quote, a non-ASCII name)
    dynamodb, s3 = aws
    state = {"format": 1, "package": "foo", "tags": {"1_0": "a" * 40}, "subjects": ['say "hi"\n', "Jürg"]}
    Releases(s3, "here").put_git_state("foo", state)
    # When a dump's rest is written from the state as stored (copied, not parsed) and loaded elsewhere
    out = io.BytesIO()
    export_db(UpstreamDB(dynamodb, "upstream"), s3, "here", out, releases_only=True)
    export_rest(git_states(s3, "here", ["foo"]), [], {}, out)
    out.seek(0)
    import_db(UpstreamDB(dynamodb, "loaded"), s3, "there", out)
    # Then the state loaded there is the state itself
    assert Releases(s3, "there").git_state("foo") == state


def test_a_dump_carries_the_literals_recorded_at_ingest(aws: tuple[Any, Any]) -> None:
    from dropscan.store.upstream_literals import UpstreamLiterals

    # Given a release whose ingest recorded literals
    dynamodb, s3 = aws
    db = UpstreamDB(dynamodb, "upstream")
    save_release(s3, "here", Release("foo", "1.0", {"a.c": "0" * 64}))
    licence = {"license": "GPL-2.0-only", "license_file": "COPYING"}  # as release_record makes it
    report = {"package": "foo", "version": "1.0", "license": licence, "literals": {"recorded": 2}}
    Releases(s3, "here").put_report("foo", "1.0", report)
    db.register("foo", ["1.0"], None)
    UpstreamLiterals(dynamodb, "upstream").record("foo", "1.0", ["foo: a message of its own", "another one"])
    # When the database is dumped and loaded into another table
    out = io.BytesIO()
    export_db(db, s3, "here", out)
    out.seek(0)
    import_db(UpstreamDB(dynamodb, "loaded"), s3, "there", out)
    # Then the literals name the release there, with what it recorded
    loaded = UpstreamLiterals(dynamodb, "loaded", Releases(s3, "there"))
    assert loaded.holding(["foo: a message of its own", "never recorded"]) == {
        "foo: a message of its own": frozenset({"foo@1.0"})
    }
    facts = loaded.release("foo", "1.0")
    assert facts is not None and (facts.recorded, facts.license) == (2, "GPL-2.0-only")

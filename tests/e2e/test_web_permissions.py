"""Least privilege for the review desk, measured as tests/e2e/test_permissions.py measures the stages:
every AWS call the web function makes while reviewers sign in, browse and decide is allowed by its
deployed role, and every grant of the role is used by some call. Sign-in itself is Cognito's public
InitiateAuth, which needs no permission at all."""

from __future__ import annotations

from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
from e2e.test_permissions import DESK, Call, Recorder, allows, as_list, deployed_statements, excused

from dropscan.keys import desk_index_keys
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.store.services import current_services

from helpers.builders import DROP_FILES, UPSTREAM_FILES, make_tar
from helpers.desk import DeskClient
from helpers.flows import scan_and_wait


@pytest.fixture(scope="module")
def desk_calls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedStack, set[Call]]]:
    tmp: Path = tmp_path_factory.mktemp("web-permissions")
    with embedded() as stack:
        stack.client.ingest(make_tar(tmp / "foo-1.0.tar.gz", UPSTREAM_FILES), "foo", "1.0")
        scanned = scan_and_wait(stack, make_tar(tmp / "foo-1.0-acme.tar.gz", DROP_FILES), "acme")
        # as a scan from before the desk index: the desk makes it and writes it (WriteDeskIndex)
        index_key, _ = desk_index_keys("acme", scanned.scan_id)
        stack.client.s3.delete_object(Bucket=stack.names.results_bucket, Key=index_key)
        desk = DeskClient(stack)
        desk.add_user("alice", "review-acme")
        svc = current_services()
        recorder = Recorder(stack)
        for client in (svc.s3, svc.dynamodb):
            recorder.attach(client)
        recorder.attach(svc.scans.model._get_connection().connection.client)
        inner = desk.api.handler

        def as_the_desk(event: dict[str, Any], context: Any) -> dict[str, Any]:
            stack.dispatcher.invoking = DESK  # what the recorder attributes the calls to
            try:
                return inner(event, context)
            finally:
                stack.dispatcher.invoking = None

        desk.api.handler = as_the_desk
        alice = desk.sign_in("alice")
        review = [f["path"] for f in scanned.manifest["files"] if f["class"] in ("modified", "added")]
        for target in ("/desk", "/suppliers/acme", f"/scans/{scanned.scan_id}"):
            assert alice.get(target).status == 200, target
        assert alice.get(f"/scans/{scanned.scan_id}/file", path=review[0]).status == 200
        form = {"csrf": alice.csrf(), "path": review, "verdict": "accepted"}
        assert alice.post(f"/scans/{scanned.scan_id}/decisions", form).status == 303
        assert alice.get(f"/scans/{scanned.scan_id}/file", path=review[0]).status == 200
        assert alice.get(f"/scans/{'s-' + '0' * 24}").status == 404  # a scan that is not there
        yield stack, recorder.calls


def test_every_call_the_desk_makes_is_allowed_by_its_role(
    desk_calls: tuple[EmbeddedStack, set[Call]],
) -> None:
    stack, calls = desk_calls
    statements = deployed_statements(stack)[DESK]
    assert {c.function for c in calls} == {DESK}
    denied = sorted((c.action, c.resource) for c in calls if not allows(statements, c.action, c.resource))
    assert denied == []


def test_every_permission_the_desks_role_grants_is_used(desk_calls: tuple[EmbeddedStack, set[Call]]) -> None:
    stack, calls = desk_calls
    unused = [
        (s.get("Sid"), action, pattern)
        for s in deployed_statements(stack)[DESK]
        for action in as_list(s["Action"])
        for pattern in as_list(s["Resource"])
        if not any(c.action == action and fnmatchcase(c.resource, pattern) for c in calls)
        and not excused(DESK, action, pattern)
    ]
    assert unused == []

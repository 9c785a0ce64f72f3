"""The sweeper on moto: scans past the deadline end failed through the finalize claim, and no other."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from dropscan.audit.manifest import validate
from dropscan.keys import manifest_key
from dropscan.local.dispatcher import Dispatcher
from dropscan.local.embedded import EmbeddedStack
from dropscan.models import Upload
from dropscan.stages.sweep import iso
from dropscan.store.services import current_services

from helpers.builders import context, load_event


def scheduled(at: datetime) -> dict[str, Any]:
    return load_event("eventbridge_scheduled.json", TIME=at.strftime("%Y-%m-%dT%H:%M:%SZ"))


def open_scan(stack: EmbeddedStack, scan_id: str, *, age: timedelta) -> None:
    """A scan item as unpack leaves it, created ``age`` ago, its chunks never counted."""
    svc = current_services()
    upload = Upload(stack.names.drops_bucket, "drops/acme/x.tar.gz", "e1", None, "acme", {})
    assert svc.scans.begin(scan_id, upload) is not None
    svc.scans.model(scan_id).update(actions=[svc.scans.model.created_at.set(iso(datetime.now(UTC) - age))])


def test_a_quiet_stack_has_nothing_to_sweep(stack: EmbeddedStack, app: Any) -> None:
    result = app("SweeperFunction")(scheduled(datetime.now(UTC)), context())
    assert result == {"timed_out": [], "dead_lettered": [], "closed": []}


def test_a_scan_past_the_deadline_ends_failed_with_its_manifest(stack: EmbeddedStack, app: Any) -> None:
    open_scan(stack, "s-late", age=timedelta(minutes=61))
    open_scan(stack, "s-recent", age=timedelta(minutes=59))
    result = app("SweeperFunction")(scheduled(datetime.now(UTC)), context())
    assert result["timed_out"] == ["s-late"]
    assert stack.dispatcher.drain(timeout=60)  # the hand-over goes through triage, which writes it
    body = stack.client.s3.get_object(Bucket=stack.names.results_bucket, Key=manifest_key("acme", "s-late"))[
        "Body"
    ].read()
    manifest = json.loads(body)
    validate(manifest)
    assert manifest["status"] == "failed"
    assert manifest["reason"] == "timed out: 0 of ? chunks done after 61 min (the unpack did not finish)"
    scans = current_services().scans
    late, recent = scans.get("s-late"), scans.get("s-recent")
    assert late is not None and late.status == "failed" and late.pending is None
    assert recent is not None and recent.status == "scanning"


def test_a_live_finalize_keeps_its_claim_and_a_dead_one_loses_it(stack: EmbeddedStack, app: Any) -> None:
    open_scan(stack, "s-claimed", age=timedelta(hours=2))
    scans = current_services().scans
    assert scans.claim_finalize("s-claimed", "m-1")  # a finalize message is at work on it

    now = datetime.now(UTC)
    assert app("SweeperFunction")(scheduled(now), context())["timed_out"] == []
    # an hour on, that claim belongs to an invocation long timed out
    assert app("SweeperFunction")(scheduled(now + timedelta(minutes=61)), context())["timed_out"] == [
        "s-claimed"
    ]
    assert not scans.claim_finalize("s-claimed", "m-1")  # the late redelivery loses
    scan = scans.get("s-claimed")
    assert scan is not None and (scan.status, scan.finalizer) == ("failed", "sweeper")


def test_the_dispatcher_runs_scheduled_functions_on_its_own(stack: EmbeddedStack) -> None:
    [schedule] = stack.stack.schedules
    assert (schedule.function.logical_id, schedule.expression) == ("SweeperFunction", "rate(5 minutes)")
    dispatcher = Dispatcher(stack.stack, stack.session.client("sqs"), schedule_every=0.0)
    dispatcher.poll_once()
    dispatcher.poll_once()
    runs = [d for d in dispatcher.history if d.function == "SweeperFunction"]
    assert len(runs) == 2 and all(d.error is None for d in runs)

"""A review set past one triage invocation, fanned out across invocations (issue 22).

With ``TriageMaxFiles=50``, a drop of 600 distinct review contents is cut into 12 triage parts, each
detected by an invocation of its own; the last part to count itself done hands the set to one assembler,
which writes the reports and the single manifest. Every content is detected in full (nothing tags-only),
a part redelivered after counting itself is counted once, and a part that never succeeds ends the scan
through the sweeper (a stepped clock) with a terminal manifest and one notification.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from conftest import FAST

from dropscan.keys import manifest_key
from dropscan.local.embedded import EmbeddedStack, embedded
from dropscan.store.services import current_services

from helpers.builders import make_tar
from helpers.faults import Faults, key_contains, s3_error
from helpers.flows import scan_and_wait

#: 600 distinct contents past 50 a part: 12 parts
LIMITS = {"TriageMaxFiles": "50", "TriageMaxParts": "16"}
COPIES, DISTINCT = 100, 599  # the copies share one content: 600 distinct contents, 699 files


COPY = b"/* A helper the supplier wrote. For non-commercial use only. */\nint helper(int x) { return x; }\n"
TAG = b"// SPDX-License-Identifier: GPL-2.0-only\n"


def _drop(tmp_path: Path) -> Path:
    """COPIES copies of one file and DISTINCT files of about 2 KB each (every other one tagged)."""
    files = {f"acme-bsp/gen/d{i % 20:02d}/copy{i:04d}.c": COPY for i in range(COPIES)}
    for i in range(DISTINCT):
        body = f"int unit_{i};\n".encode() * 150
        files[f"acme-bsp/src/d{i % 20:02d}/unit{i:04d}.c"] = (TAG if i % 2 else b"") + body
    return make_tar(tmp_path / "acme-bsp.tar.gz", files)


def _triage_invocations(stack: EmbeddedStack) -> list[Any]:
    return [d for d in stack.dispatcher.history if d.function == "TriageFunction"]


def test_a_review_set_past_one_invocation_is_detected_in_full_by_parts(tmp_path: Path) -> None:
    with embedded(parameters={**FAST, **LIMITS}) as stack, Faults() as faults:
        svc = current_services()
        manifest_puts = faults.count(svc.s3, "PutObject", key_contains("manifest.json"))
        scanned = scan_and_wait(stack, _drop(tmp_path))
        scan = svc.scans.get(scanned.scan_id)
        reports = {
            fmt: stack.client.s3.get_object(Bucket=stack.names.results_bucket, Key=key)["Body"].read()
            for fmt, key in scanned.manifest["reports"].items()
        }
        invocations = _triage_invocations(stack)

    manifest = scanned.manifest
    assert manifest["status"] == "complete"
    triage = manifest["triage"]
    assert (triage["parts"], triage["distinct"], triage["files"]) == (12, 600, COPIES + DISTINCT)
    assert "limited" not in triage and "error" not in triage
    assert not [f for f in manifest["files"] if "triage" in f]  # nothing tags-only, nothing unread
    assert not [f for f in manifest["flags"] if f["kind"] == "review-limit"]
    assert triage["not_found"] == 0
    # every copy carries its content's flag; every tagged unit its licence, wherever its part was
    assert len([f for f in manifest["flags"] if f["kind"] == "non-commercial"]) == COPIES
    tagged = [f for f in manifest["files"] if "/unit" in f["path"] and int(f["path"][-6:-2]) % 2]
    assert len(tagged) == DISTINCT // 2
    assert all("GPL-2.0-only" in {x["expression"] for x in f.get("licenses", [])} for f in tagged)
    assert scan is not None and scan.triage_parts == 12 and scan.triage_done == set(map(str, range(12)))
    assert not any(d.failed for d in invocations)
    assert manifest_puts() == 1
    assert len(scanned.notifications) == 1
    assert set(reports) == {"html", "spdx", "cyclonedx"} and all(reports.values())


def test_a_part_redelivered_after_counting_itself_is_counted_once(tmp_path: Path) -> None:
    with embedded(parameters={**FAST, **LIMITS}) as stack, Faults() as faults:
        svc = current_services()
        client = svc.scans.model._get_connection().connection.client
        counts_a_part = lambda p: "triage_done" in json.dumps(p.get("ExpressionAttributeNames", {}))  # noqa: E731
        killed = faults.kill_after(client, "UpdateItem", when=counts_a_part)
        manifest_puts = faults.count(svc.s3, "PutObject", key_contains("manifest.json"))
        scanned = scan_and_wait(stack, _drop(tmp_path))
        scan = svc.scans.get(scanned.scan_id)
        invocations = _triage_invocations(stack)

        assert faults.fired[killed] == 1
        assert sum(d.failed for d in invocations) == 1  # the killed part, then its redelivery
        assert scan is not None and scan.triage_done == set(map(str, range(12)))
        assert scanned.manifest["status"] == "complete" and scanned.manifest["triage"]["parts"] == 12
        assert "limited" not in scanned.manifest["triage"]
        assert manifest_puts() == 1
        assert len(scanned.notifications) == 1


def test_a_part_that_never_succeeds_ends_the_scan_through_the_sweeper(tmp_path: Path) -> None:
    with embedded(parameters={**FAST, **LIMITS}) as stack, Faults() as faults:
        svc = current_services()
        denied = s3_error("AccessDenied", 403)
        faults.error(svc.s3, "PutObject", denied, times=None, when=key_contains("/triage-results/000003"))
        manifest_puts = faults.count(svc.s3, "PutObject", key_contains("manifest.json"))
        _, scan_id = stack.client.upload_drop(_drop(tmp_path), "acme")
        assert stack.dispatcher.drain(timeout=300)
        key = manifest_key("acme", scan_id)
        listed = stack.client.s3.list_objects_v2(Bucket=stack.names.results_bucket, Prefix=key)
        assert not listed.get("KeyCount")  # part 3 went to the dead-letter queue: no manifest yet

        deadline = svc.settings.scan_deadline_minutes
        result = stack.dispatcher.run_scheduled(
            "SweeperFunction", at=datetime.now(UTC) + timedelta(minutes=deadline + 1)
        )
        assert result["timed_out"] == [scan_id]
        assert stack.dispatcher.drain(timeout=120)
        body = stack.client.s3.get_object(Bucket=stack.names.results_bucket, Key=key)["Body"].read()
        manifest = json.loads(body)
        assert manifest["status"] == "failed"
        assert manifest["reason"].startswith(
            "timed out: triage did not finish: 11 of 12 triage parts done after "
        ) and manifest["reason"].endswith("(parts not done: 3)")
        assert manifest_puts() == 1
        assert len(stack.mailbox.for_scan(scan_id)) == 1

"""A drop nothing upstream explains, through the flow with the triage limits set small (issue 22).

Every file is ``added``; the review set is past TriageMaxFiles and TriageMaxMiB even when fanned out to
the most TriageMaxParts allows (or TriageBudgetSeconds is spent before detection starts), so the
past-the-limit paths run: the scan still ends ``complete`` in one manifest, every report, and one
notification, and says which files were not examined in full. The same parameters bound the deployed
function; the figures at 120,000 files are in docs/design.md (`make bench`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from dropscan.audit.manifest import validate
from dropscan.local.embedded import embedded

from helpers.builders import make_tar

COPY = b"/* A helper the supplier wrote. For non-commercial use only. */\nint helper(int x) { return x; }\n"


def drop_files(copies: int, distinct: int) -> dict[str, bytes]:
    """``copies`` copies of one file and ``distinct`` files of about 2 KB each, under 20 folders."""
    files = {f"acme-bsp/gen/d{i % 20:02d}/copy{i:04d}.c": COPY for i in range(copies)}
    for i in range(distinct):
        tag = b"// SPDX-License-Identifier: GPL-2.0-only\n" if i % 2 else b""
        files[f"acme-bsp/src/d{i % 20:02d}/unit{i:04d}.c"] = tag + f"int unit_{i};\n".encode() * 150
    return files


@pytest.mark.parametrize(
    ("limits", "expect"),
    [
        # 601 contents in two triage parts at most: 50 in full; the last part, holding the other 551,
        # 50 in full, heads until 1 MiB is held (about 2 KB each), the rest not read
        (
            {"TriageMaxFiles": "50", "TriageMaxMiB": "1", "TriageMaxParts": "2"},
            {"tags_only": True, "not_read": True},
        ),
        # the detection budget is spent before the first content: all of it by its tags only
        ({"TriageBudgetSeconds": "0"}, {"tags_only": True, "not_read": False}),
    ],
)
def test_a_review_set_past_the_triage_limits_ends_complete_in_one_manifest_and_one_notification(
    tmp_path: Path, limits: dict[str, str], expect: dict[str, bool]
) -> None:
    files = drop_files(copies=600, distinct=600)
    with embedded(parameters=limits) as stack:
        _, scan_id = stack.client.upload_drop(make_tar(tmp_path / "acme-bsp.tar.gz", files), "acme")
        manifest = stack.client.wait_manifest("acme", scan_id, timeout=300)
        assert manifest is not None, "no manifest"
        stack.dispatcher.drain(timeout=60)
        [note] = stack.mailbox.for_scan(scan_id)
        s3, bucket = stack.client.s3, stack.names.results_bucket
        reports = {
            fmt: s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
            for fmt, key in manifest["reports"].items()
        }

    validate(manifest)
    assert manifest["status"] == "complete"
    assert manifest["summary"]["review"] == len(files) == manifest["triage"]["files"]
    assert manifest["triage"]["distinct"] == 601
    limited: dict[str, Any] = manifest["triage"]["limited"]
    assert (limited["tags_only"] > 0, limited["not_read"] > 0) == (expect["tags_only"], expect["not_read"])
    marked = [f for f in manifest["files"] if "triage" in f]
    assert len(marked) == limited["tags_only"] + limited["not_read"]
    # the copies share one content: all of them carry its flag, wherever the limits fell
    copies = [f for f in manifest["flags"] if f["kind"] == "non-commercial"]
    assert len(copies) == 600
    [limit_flag] = [f for f in manifest["flags"] if f["kind"] == "review-limit"]
    assert limit_flag["path"] == "" and limit_flag["evidence"] == "; ".join(limited["reasons"])
    assert manifest["triage"].get("parts") == (2 if "TriageMaxParts" in limits else None)
    assert manifest["verdict"] == "action-required"

    assert note.attributes["status"] == "complete"
    assert "Review set by folder (1,200 files in 40 folders):" in note.message
    assert "Review set beyond the triage limits: " in note.message
    assert set(reports) == {"html", "spdx", "cyclonedx"}
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(reports["cyclonedx"]) is None
    cdx = json.loads(reports["cyclonedx"])
    assert sum(len(c.get("components", [])) for c in cdx["components"]) == len(files)
    assert "review-limit" in reports["html"] and "Review set beyond the triage limits" in reports["html"]

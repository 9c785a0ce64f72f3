"""Triage in the flow: red flags raise the verdict, reports land beside the manifest, links in the mail."""

from __future__ import annotations

import json
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from spdx_tools.spdx.parser.parse_anything import parse_file
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from dropscan.audit.manifest import validate
from dropscan.local.embedded import EmbeddedStack

from helpers.builders import DROP_FILES, UPSTREAM_FILES, make_tar

ELF_OBJECT = b"\x7fELF\x01\x01\x01\x00" + bytes(8) + b"\x01\x00\x28\x00" + bytes(32) + b"\x00" * 64
FLAGGED = {
    **DROP_FILES,
    "foo-1.0-acme/.config": b"#\n# Linux/arm 6.1.176 Kernel Configuration\n#\nCONFIG_ARM=y\nCONFIG_MMU=y\n",
    "foo-1.0-acme/acme/crc.c": b"/* Permission granted for non-commercial use only. */\nint crc;\n",
    "foo-1.0-acme/acme/blob.o": ELF_OBJECT,
}


def test_red_flags_raise_the_verdict_and_the_reports_are_linked(stack: EmbeddedStack, tmp_path: Path) -> None:
    stack.client.ingest(make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES), "foo", "1.0")
    drop = make_tar(tmp_path / "router.tar.gz", FLAGGED)
    _, scan_id = stack.client.upload_drop(drop, "acme", metadata={"arch": "mips"})
    manifest = stack.client.wait_manifest("acme", scan_id, timeout=120)
    assert manifest is not None
    stack.dispatcher.drain(timeout=60)

    validate(manifest)
    flags = {(f["path"], f["kind"]): f for f in manifest["flags"]}
    assert set(flags) == {
        ("foo-1.0-acme/.config", "arch-mismatch"),
        ("foo-1.0-acme/acme/crc.c", "non-commercial"),
        ("foo-1.0-acme/acme/blob.o", "prebuilt-binary"),
    }
    assert flags["foo-1.0-acme/.config", "arch-mismatch"]["evidence"] == "CONFIG_ARM=y"
    assert (
        flags["foo-1.0-acme/acme/blob.o", "prebuilt-binary"]["evidence"]
        == "ELF 32-bit relocatable object, ARM"
    )
    assert manifest["verdict"] == "action-required"
    assert manifest["summary"]["flags"] == {"action-required": 3, "review": 0}
    [component] = manifest["components"]
    assert (component["license"], component["trust"]) == ("GPL-2.0-only", "high")
    assert all(len(f["sha1"]) == 40 for f in manifest["files"])
    seconds = manifest["stats"]["seconds"]  # per-stage timings, for the owner of the bill
    assert set(seconds) == {"unpack", "lookup", "finalize", "triage", "reports"}
    assert all(v > 0 for v in seconds.values())
    assert manifest["stats"]["dynamodb"]["batch_get_calls"] >= 1

    s3 = stack.client.s3
    bucket = stack.names.results_bucket
    html = s3.get_object(Bucket=bucket, Key=manifest["reports"]["html"])["Body"].read().decode()
    text = html.replace("<wbr>", "")  # long paths may break after a slash
    assert "foo-1.0-acme/acme/crc.c" in text and "non-commercial" in text
    spdx_file = tmp_path / "sbom.spdx.json"
    spdx_file.write_bytes(s3.get_object(Bucket=bucket, Key=manifest["reports"]["spdx"])["Body"].read())
    document = parse_file(str(spdx_file))
    assert validate_full_spdx_document(document) == []
    assert {p.name for p in document.packages} >= {"foo"}
    assert len(document.files) == len(FLAGGED)  # every file, with its SHA-1 and SHA-256
    cdx_text = s3.get_object(Bucket=bucket, Key=manifest["reports"]["cyclonedx"])["Body"].read().decode()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(cdx_text) is None
    assert "pkg:generic/foo@1.0" in {c.get("purl") for c in json.loads(cdx_text)["components"]}

    [note] = stack.mailbox.for_scan(scan_id)
    assert note.subject.startswith("dropscan: acme/router.tar.gz — action-required: ")
    assert "non-commercial" in note.message and "CONFIG_ARM=y" in note.message
    links = [line.split()[-1] for line in note.message.splitlines() if "X-Amz-Signature=" in line]
    assert len(links) == 4  # manifest, html, spdx, cyclonedx
    assert all("X-Amz-Expires=43200" in link for link in links)

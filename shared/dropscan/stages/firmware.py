"""Stage 6, firmware: the images uploaded beside a drop -> its manifest revised with their ``firmware``
section and its reports rendered again; the new revision fires its own notification.

An image is uploaded to ``firmware/<supplier>/<drop name>/<image name>`` (keys.firmware_key), before,
during or after its drop's scan, and either order ends in the same manifest (docs/firmware.md, "In the
service"):

- an image whose drop's manifest is written: its S3 event reaches the firmware queue, the manifest is
  revised here (revision n + 1, the earlier one kept under ``revisions/``) and notified again;
- an image that came first, or while the drop was scanned: notify finds it under the drop's firmware
  folder before it publishes, holds the notification back and sends the scan here; the revision's
  notification is then the pair's only one.

Every image of a scan ends in a section of its manifest, read or not (a reason says why not).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_lambda_powertools import Logger

from dropscan import reports
from dropscan.audit.manifest import to_json
from dropscan.keys import (
    drop_key,
    manifest_key,
    manifest_revision_key,
    parse_firmware_key,
    scan_id_for,
)
from dropscan.stages.firmware_check import attach, firmware_section, unread_section
from dropscan.store.desk import write_index
from dropscan.store.firmware_uploads import pending_images
from dropscan.store.idempotency import once
from dropscan.store.objects import StoredObject
from dropscan.store.scans import now
from dropscan.store.services import Services
from dropscan.store.work import AWS_ERRORS

logger = Logger(service="dropscan", child=True)


def image_uploaded(svc: Services, bucket: str, key: str) -> str | None:
    """An image's upload: revise its drop's manifest if it is written; returns the manifest's key when
    revised now, None when the drop's scan will take the image (or the key is not an image's)."""
    parsed = parse_firmware_key(key)
    if parsed is None:
        logger.warning("not a firmware key: firmware/<supplier>/<drop name>/<image>", extra={"key": key})
        return None
    supplier, drop_name, _ = parsed
    drop = svc.objects.find(svc.settings.drops_bucket, drop_key(supplier, drop_name))
    if drop is None:
        logger.info("the drop is not uploaded yet: its scan takes the image", extra={"key": key})
        return None
    scan_id = scan_id_for(drop.bucket, drop.key, drop.etag)
    if not svc.work.exists(manifest_key(supplier, scan_id)):
        logger.info("the drop is being scanned: notify sends the image here", extra={"scan_id": scan_id})
        return None
    return revise(svc, supplier, scan_id)


def revise(svc: Services, supplier: str, scan_id: str) -> str | None:
    """The manifest with a section for each image not yet in it, once per set of images; returns its
    key, None when there was nothing to add (or another invocation added it)."""
    key = manifest_key(supplier, scan_id)
    manifest: dict[str, Any] = svc.work.get_document(key)
    images = pending_images(svc, manifest)
    if not images:
        return None
    identity = {"scan_id": scan_id, "images": ",".join(f"{o.key}@{o.etag}" for o in images)}
    return once(svc, "firmware", _revise, svc=svc, manifest=manifest, images=images, identity=identity)


def _revise(
    *, svc: Services, manifest: dict[str, Any], images: Sequence[StoredObject], identity: dict[str, str]
) -> str:
    """Check each image against the drop, keep the earlier revision, write the new one and its reports."""
    supplier, scan_id = manifest["supplier"], manifest["scan_id"]
    revision = int(manifest.get("revision") or 1)
    earlier = to_json(manifest)
    replaced = {o.key for o in images}
    kept = [
        s
        for s in (manifest.get("firmware") or {}).get("images") or []
        if (s.get("source") or {}).get("key") not in replaced
    ]
    sections = kept + _sections(svc, manifest, images)
    attach(manifest, sorted(sections, key=lambda s: str((s.get("source") or {}).get("key"))))
    manifest["revision"] = revision + 1
    manifest["revised_at"] = now()
    svc.work.put_text(manifest_revision_key(supplier, scan_id, revision), earlier, "application/json")
    for fmt, text in reports.render_all(manifest, manifest["reports"], workers=1).items():
        svc.work.put_text(manifest["reports"][fmt], text, reports.FORMATS[fmt].media_type)
    key = manifest_key(supplier, scan_id)
    etag = svc.work.put_text(key, to_json(manifest), "application/json")  # fires the notification
    try:
        write_index(svc.work.s3, svc.work.bucket, manifest, etag)
    except AWS_ERRORS:
        logger.exception("the desk index was not written", extra={"scan_id": scan_id})
    logger.info(
        "manifest revised with firmware",
        extra={"scan_id": scan_id, "revision": revision + 1, "verdict": manifest["firmware"]["verdict"]},
    )
    return key


def _sections(
    svc: Services, manifest: Mapping[str, Any], images: Sequence[StoredObject]
) -> list[dict[str, Any]]:
    """One section per image, the drop and each image downloaded into one scratch folder in turn."""
    src = manifest["source"]
    out = []
    with tempfile.TemporaryDirectory(prefix="firmware-", dir=svc.settings.scratch_dir) as tmp:
        drop = Path(tmp) / "drop"
        with drop.open("wb") as spool:
            svc.objects.download(src["bucket"], src["key"], src.get("version_id"), spool)
        for image in images:
            out.append(_section(svc, manifest, image, drop, Path(tmp)))
    return out


def _section(
    svc: Services, manifest: Mapping[str, Any], image: StoredObject, drop: Path, tmp: Path
) -> dict[str, Any]:
    limit = svc.settings.firmware_max_mib << 20
    if image.size > limit:
        reason = f"the image is larger than FirmwareMaxMiB ({limit:,} bytes)"
        section = unread_section(image.name, image.size, reason)
    else:
        local = tmp / "images" / image.name
        local.parent.mkdir(exist_ok=True)
        with local.open("wb") as spool:
            svc.objects.download(image.bucket, image.key, None, spool)
        try:
            section = firmware_section(local, manifest, drop, scratch=tmp, upstream=svc.literals())
        except AWS_ERRORS:
            raise
        except Exception as e:  # errors are data: the image's section says the check broke, and why
            logger.exception("firmware check failed", extra={"key": image.key})
            reason = f"the check failed: {type(e).__name__}: {e}"[:300]
            section = unread_section(image.name, image.size, reason)
        local.unlink()
    section["source"] = {"bucket": image.bucket, "key": image.key, "etag": image.etag}
    return section

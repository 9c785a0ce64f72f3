"""Stage 5, notify: a manifest written -> its audit summary on the notification topic, once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger

from dropscan.reports.summary import body, message_attributes, subject
from dropscan.store.firmware_uploads import pending_images
from dropscan.store.idempotency import once
from dropscan.store.services import Services

logger = Logger(service="dropscan", child=True)


def notify_manifest(svc: Services, bucket: str, key: str) -> str | None:
    """Publish the summary of one revision of a manifest once; returns the SNS message id, None if
    published before or held back for the firmware images of its drop that are not in it yet."""
    manifest = svc.work.get_document(key, bucket)
    if svc.settings.firmware_queue_url and pending_images(svc, manifest):
        # the revision with them is the one notified (stages.firmware): one notification for the pair
        svc.work.send_firmware(manifest["supplier"], manifest["scan_id"])
        logger.info("notification held for firmware images", extra={"scan_id": manifest["scan_id"]})
        return None
    identity = {"bucket": bucket, "key": key}
    revision = int(manifest.get("revision") or 1)
    if revision > 1:
        identity["revision"] = str(revision)
    return once(
        svc, "notify", _publish_summary, svc=svc, bucket=bucket, manifest=manifest, key=key, identity=identity
    )


def _publish_summary(
    *, svc: Services, bucket: str, key: str, manifest: Mapping[str, Any], identity: dict[str, str]
) -> str:
    """Link the manifest's reports, publish."""
    links = report_links(svc, bucket, key, manifest)
    text = body(manifest, links=links, links_expire=svc.settings.report_link_expiry)
    return svc.work.publish(
        subject(manifest), desk_line(svc.settings.desk_url, manifest) + text, message_attributes(manifest)
    )


def desk_line(desk_url: str, manifest: Mapping[str, Any]) -> str:
    """The e-mail's first line when the stack has a review desk: the drop's page on it (a sign-in page
    that opens the drop once signed in, docs/web.md); nothing without a desk."""
    if not desk_url:
        return ""
    return f"Review it on the desk: {desk_url.rstrip('/')}/#/scans/{manifest['scan_id']}\n\n"


def report_links(svc: Services, bucket: str, key: str, manifest: Mapping[str, Any]) -> dict[str, str]:
    """Pre-signed GET URLs of the manifest and its reports (never logged: they are bearer tokens)."""
    keys = {"manifest": key, **(manifest.get("reports") or {})}
    return {name: svc.work.presign(bucket, k) for name, k in keys.items()}

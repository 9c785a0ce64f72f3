"""Stage 5, notify: a manifest written -> its audit summary on the notification topic, once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dropscan.reports.summary import body, message_attributes, subject
from dropscan.store.idempotency import once
from dropscan.store.services import Services


def notify_manifest(svc: Services, bucket: str, key: str) -> str | None:
    """Publish the summary of one manifest once; returns the SNS message id, None if published before."""
    identity = {"bucket": bucket, "key": key}
    return once(svc, "notify", _publish_summary, svc=svc, bucket=bucket, key=key, identity=identity)


def _publish_summary(*, svc: Services, bucket: str, key: str, identity: dict[str, str]) -> str:
    """Read the manifest, link its reports, publish."""
    manifest = svc.work.get_document(key, bucket)
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

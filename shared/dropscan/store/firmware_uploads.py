"""The firmware images uploaded beside a drop (``firmware/<supplier>/<drop name>/``), against the ones
a manifest's ``firmware`` section holds. Light on purpose: notify asks it of every manifest, and the
extractors (stages.firmware) ship only where the firmware function runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dropscan.keys import firmware_prefix, parse_drop_key
from dropscan.store.objects import StoredObject
from dropscan.store.services import Services


def pending_images(svc: Services, manifest: Mapping[str, Any]) -> list[StoredObject]:
    """The images uploaded for the manifest's drop that are not in its ``firmware`` section as they are
    now (a new image, or one uploaded again with other bytes)."""
    parsed = parse_drop_key(str(manifest.get("source", {}).get("key") or ""))
    if parsed is None:
        return []
    listed = svc.objects.listed(svc.settings.drops_bucket, firmware_prefix(*parsed))
    done = {_identity(s.get("source") or {}) for s in (manifest.get("firmware") or {}).get("images") or []}
    return [o for o in listed if (o.key, o.etag) not in done]


def _identity(source: Mapping[str, Any]) -> tuple[str | None, str | None]:
    return source.get("key"), source.get("etag")

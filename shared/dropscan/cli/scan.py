"""``dropscan scan``: ingest the upstreams, upload the drop, wait for its manifest, and say where the
results and the database it used are."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dropscan.cli.common import UsageError, default_data_dir, progress, where
from dropscan.keys import parse_archive_name
from dropscan.models import Trust
from dropscan.scan_text import scan_progress, size_text


@dataclass(frozen=True)
class UpstreamArg:
    package: str
    version: str
    archive: Path


def parse_upstream(text: str) -> UpstreamArg:
    """PACKAGE@VERSION=ARCHIVE, or just ARCHIVE named like busybox-1.35.0.tar.bz2."""
    spec, sep, path = text.partition("=")
    if not sep:
        spec, path = "", text
    archive = Path(path).expanduser()
    if spec:
        package, at, version = spec.partition("@")
        if not at or not package or not version:
            raise UsageError(f"--upstream {text!r}: expected PACKAGE@VERSION=ARCHIVE")
    else:
        parsed = parse_archive_name(archive.name)
        if parsed is None:
            raise UsageError(
                f"--upstream {text!r}: cannot tell package and version; use PACKAGE@VERSION=ARCHIVE"
            )
        package, version = parsed
    if not archive.is_file():
        raise UsageError(f"--upstream {text!r}: no such file {archive}")
    return UpstreamArg(package, version, archive)


@dataclass(frozen=True)
class ScanRequest:
    """One ``dropscan scan``: a drop, the upstreams to ingest first, and where the results go."""

    drop: Path
    supplier: str = "local"
    upstreams: Sequence[UpstreamArg] = ()
    firmware: Sequence[Path] = ()  # the images the drop is the source of, checked against it
    low_trust: Sequence[str] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    manifest_out: Path | None = None
    eml_dir: Path | None = None
    data_dir: Path = field(default_factory=lambda: default_data_dir())
    endpoint_url: str | None = None
    stack: str | None = None
    timeout: float = 3600.0
    quiet: bool = False


def cmd_scan(a: argparse.Namespace) -> int:
    drop = Path(a.drop).expanduser()
    if not drop.is_file():
        raise UsageError(f"no such drop archive: {drop}")
    firmware = [Path(f).expanduser() for f in a.firmware]
    for image in firmware:
        if not image.is_file():
            raise UsageError(f"no such firmware image: {image}")
    if len({image.name for image in firmware}) < len(firmware):
        raise UsageError("--firmware: two images have the same file name (they are stored by it)")
    metadata = {"components": ",".join(a.declare)} if a.declare else {}
    if a.arch:
        metadata["arch"] = a.arch
    if a.product:
        metadata["product"] = a.product
    request = ScanRequest(
        drop=drop,
        supplier=a.supplier,
        upstreams=[parse_upstream(u) for u in a.upstream],
        firmware=firmware,
        low_trust=a.low_trust,
        metadata=metadata,
        manifest_out=Path(a.manifest_out) if a.manifest_out else None,
        eml_dir=Path(a.eml_dir) if a.eml_dir else None,
        data_dir=Path(a.data_dir),
        endpoint_url=a.endpoint_url,
        stack=a.stack,
        timeout=a.timeout,
        quiet=a.quiet,
    )
    return scan_drop(request)


def scan_drop(r: ScanRequest) -> int:
    """Ingest the upstreams, upload the drop, wait for its manifest and notification, save the results;
    0 when the scan completed, 1 when it was rejected, failed or did not end in time."""
    from dropscan.cli.common import open_stack

    status = progress(r.quiet)
    with open_stack(r.endpoint_url, r.stack, r.data_dir) as (client, mailbox, save_db_beside):
        for u in r.upstreams:
            size = size_text(u.archive.stat().st_size)
            text = f"ingesting {u.package} {u.version} from {u.archive.name} ({size})"
            with status(text + "…") as update, watching(client, text, update):
                client.ingest(
                    u.archive, u.package, u.version, trust=Trust.LOW if u.package in r.low_trust else None
                )
        for p in r.low_trust:
            client.set_trust(p, Trust.LOW)
        save_db_beside()
        text = f"scanning {r.drop.name} ({size_text(r.drop.stat().st_size)})"
        with status(f"{text}: uploading…") as update:
            # the images first: the drop's manifest is then notified once, with their section in it
            images = [client.upload_firmware(image, r.supplier, r.drop.name) for image in r.firmware]
            key, scan_id = client.upload_drop(r.drop, r.supplier, metadata=r.metadata)
            with watching(client, text, update, scan_id):
                manifest = client.wait_manifest(r.supplier, scan_id, timeout=r.timeout, firmware=images)
        if manifest is None:
            print(
                f"dropscan: no manifest for {key} within {r.timeout:.0f} s (scan {scan_id})", file=sys.stderr
            )
            return 1
        # the stack named its endpoint or table; this command knows the data folder or the stack's name
        kind, location = where(r.endpoint_url, r.stack, r.data_dir)
        manifest["database"] = {**(manifest.get("database") or database_record(client)), "kind": kind}
        manifest["database"]["location"] = location
        note = None
        if mailbox is not None:
            with status("waiting for the notification…"):
                client.pump(lambda: bool(mailbox.for_scan(scan_id)), 60)
            notes = mailbox.for_scan(scan_id)
            note = notes[0] if notes else None
        beside_eml = r.eml_dir / scan_id / "manifest.json" if r.eml_dir and mailbox is not None else None
        local = _save_results(client, manifest, r.manifest_out or beside_eml)
        if note is not None and r.eml_dir:
            from dropscan.local.embedded import Notification, write_eml
            from dropscan.reports.summary import body

            # the run's own e-mail links the files it wrote, not a bucket that ends with the run
            links = {name: path.resolve().as_uri() for name, path in local.items()}
            message = body(manifest, local=links) if links else note.message
            write_eml(Notification(note.subject, message, note.attributes), r.eml_dir, scan_id)
    if not r.quiet:
        from dropscan.reports.summary import body, subject

        print(subject(manifest))
        print()
        print(body(manifest, local={name: str(path) for name, path in local.items()} or None))
    return 0 if manifest["status"] == "complete" else 1


def _save_results(client: Any, manifest: dict[str, Any], manifest_out: Path | None) -> dict[str, Path]:
    """The manifest at ``manifest_out`` and the reports triage wrote beside it (not rendered again: a big
    drop's documents take a while); name -> local file, empty without a place to put them."""
    if manifest_out is None:
        return {}
    from dropscan.audit.manifest import to_json

    manifest_out.parent.mkdir(parents=True, exist_ok=True)
    manifest_out.write_text(to_json(manifest))
    reports = client.download_reports(manifest, manifest_out.parent)
    names = list((manifest.get("reports") or {}).keys())
    return {"manifest": manifest_out, **dict(zip(names, reports, strict=True))}


def database_record(client: Any) -> dict[str, Any]:
    """``database`` for a manifest of a stack that wrote none (deployed before finalize wrote it)."""
    from dropscan.audit.manifest import database_entry

    return database_entry("stack", "", client.names.upstream_table, client.db.packages())


# ------------------------------------------------------------------ progress
class watching:
    """While the client waits on the stack, the scan's counts (or the time an ingest takes) on the status
    line every REFRESH_S seconds, looked up by a thread of its own: the embedded stack runs the functions
    in this thread, and one long invocation (the kernel's unpack) holds it for minutes."""

    REFRESH_S = 0.5

    def __init__(
        self,
        client: Any,
        text: str,
        update: Callable[[str], None],
        scan_id: str | None = None,
    ) -> None:
        self.client, self.text, self.update, self.scan_id = client, text, update, scan_id
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="progress", daemon=True)

    def __enter__(self) -> watching:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.REFRESH_S):
            try:
                self.look()
            except Exception:  # in-process moto changing the item as it was read: the next look will do
                continue

    def look(self) -> str:
        """Show where the work is now; returns the text shown."""
        elapsed = f"{time.monotonic() - self._start:.0f} s"
        if self.scan_id is None:
            text = f"{self.text}: {elapsed}…"
        else:
            text = f"{self.text}: {scan_progress(self.client.scans.get(self.scan_id))}, {elapsed}…"
        self.update(text)
        return text


def add_scan_command(sub: Any, add_target: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("scan", help="scan a drop through the whole flow and print its audit summary")
    p.add_argument("drop", help="the drop archive (tar, tar.gz/bz2/xz/zst, zip, 7z ...)")
    p.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="PACKAGE@VERSION=ARCHIVE",
        help="ingest this upstream release first (skipped when already in the database); repeatable",
    )
    p.add_argument(
        "--low-trust",
        action="append",
        default=[],
        metavar="PACKAGE",
        help="mark this upstream package low-trust (its matches are reported as such); repeatable",
    )
    p.add_argument(
        "--firmware",
        action="append",
        default=[],
        metavar="IMAGE",
        help="a firmware image the drop is the source of (uploaded to firmware/SUPPLIER/DROP/IMAGE): each"
        " binary in it is checked against the drop; repeatable",
    )
    p.add_argument("--supplier", default="local", help="supplier name: the drop goes to drops/SUPPLIER/")
    p.add_argument(
        "--declare",
        action="append",
        default=[],
        metavar="PACKAGE@VERSION",
        help="a component the supplier says the drop holds (x-amz-meta-components); repeatable",
    )
    p.add_argument(
        "--arch", help="the device's architecture (x-amz-meta-arch), e.g. mips: configurations must match"
    )
    p.add_argument(
        "--product",
        help="the product the drop is a release of (x-amz-meta-product), compared with its previous drop;"
        " default: the drop's file name without version-like parts",
    )
    p.add_argument(
        "--manifest-out",
        metavar="FILE",
        help="write the result manifest (JSON) here, and the reports (HTML, SPDX, CycloneDX) beside it",
    )
    p.add_argument(
        "--eml-dir",
        metavar="DIR",
        help="write the notification as an .eml file here (embedded stack), linking the files of this run",
    )
    p.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds to wait for the manifest (default 3600)"
    )
    add_target(p)
    p.set_defaults(func=cmd_scan)

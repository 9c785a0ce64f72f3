"""The firmware stage: one image against a finished manifest and its drop -> the manifest's
``firmware`` section (docs/firmware.md). Not yet part of the scan pipeline, the CLI or the schema.

unpack -> inventory -> read the drop's sources -> match each binary -> check the kernel and BusyBox ->
verdict. Everything it cannot read is in the section with a reason; it raises only on bugs.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dropscan.archive.limits import Limits
from dropscan.firmware import carve, inventory, matching
from dropscan.firmware.sources import read_drop

# literals are compared only for binaries that state no identifier; their strings are read this far
STRINGS_MAX = 32 << 20


def firmware_section(
    image: Path,
    manifest: Mapping[str, Any],
    drop: Path,
    limits: Limits = carve.FIRMWARE_LIMITS,
    seconds: float = carve.DEFAULT_SECONDS,
    scratch: Path | None = None,
) -> dict[str, Any]:
    """The ``firmware`` section of ``manifest`` for ``image``, the drop read again from ``drop``."""
    work = Path(tempfile.mkdtemp(prefix="firmware-", dir=scratch))
    clock: dict[str, float] = {}
    try:
        started = time.monotonic()
        unpacked = carve.unpack(image, work, limits=limits, seconds=seconds)
        clock["unpack"] = time.monotonic() - started
        started = time.monotonic()
        found = inventory.take(unpacked.contents(), unpacked.stated_arch())
        clock["inventory"] = time.monotonic() - started
        started = time.monotonic()
        components = list(manifest.get("components") or [])
        sources = read_drop(drop, [str(c.get("prefix") or "") for c in components]).sources(components)
        strings = _strings_to_place(unpacked, found, {s.package for s in sources if s.package})
        matches = matching.match_all(found, strings, sources)
        kernel = _kernel_check(found, sources)
        applets = _applet_check(found, sources)
        clock["match"] = time.monotonic() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _section(image, unpacked, found, matches, kernel, applets, clock)


VERDICT_ORDER = ("complete", "incomplete", "wrong")


def attach(manifest: dict[str, Any], sections: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``manifest`` with its ``firmware`` part: one section per image (``firmware_section``) and the
    pair's verdict, the worst of theirs (the one place the pipeline and the CLI put it there)."""
    verdicts = [str(s.get("verdict") or "complete") for s in sections]
    manifest["firmware"] = {
        "verdict": max(verdicts, key=VERDICT_ORDER.index) if verdicts else None,
        "images": [dict(s) for s in sections],
    }
    return manifest


def _strings_to_place(
    unpacked: carve.Unpacked, found: inventory.Inventory, packages: set[str]
) -> dict[str, frozenset[str]]:
    """Printable strings of the binaries whose identifiers name no package of the drop: the literals
    must place them."""
    wanted = {b.path for b in found.binaries if matching.stated(b)[0] not in packages}
    strings = {}
    for entry in unpacked.files():
        if entry.path in wanted and entry.local is not None:
            with entry.local.open("rb") as handle:
                strings[entry.path] = frozenset(inventory.printable_strings(handle.read(STRINGS_MAX)))
    return strings


def _kernel_check(found: inventory.Inventory, sources: list[matching.Source]) -> matching.KernelCheck | None:
    if found.kernel is None and not any(b.kind == "module" for b in found.binaries):
        return None
    linux = next((s for s in sources if s.package == "linux"), None)
    modules = [b for b in found.binaries if b.kind == "module"]
    return matching.check_kernel(
        found.kernel,
        found.kernel_arch,
        modules,
        linux.version if linux else None,
        linux.config if linux else None,
    )


def _applet_check(found: inventory.Inventory, sources: list[matching.Source]) -> dict[str, Any] | None:
    busybox = next((s for s in sources if s.package == "busybox" and s.config is not None), None)
    binary = next((b for b in found.binaries if b.applets), None)
    if busybox is None or binary is None or busybox.config is None:
        return None
    return {"path": binary.path, "applets": len(binary.applets),
            "not_configured": matching.check_applets(binary.applets, busybox.config)}  # fmt: skip


def _section(
    image: Path,
    unpacked: carve.Unpacked,
    found: inventory.Inventory,
    matches: list[matching.Match],
    kernel: matching.KernelCheck | None,
    applets: dict[str, Any] | None,
    clock: dict[str, float],
) -> dict[str, Any]:
    by_path = {b.path: b for b in found.binaries}
    counts: dict[str, int] = {}
    for m in matches:
        counts[m.status] = counts.get(m.status, 0) + 1
    return {
        "image": image.name,
        "size": unpacked.size,
        "arch": found.arch,
        "verdict": matching.verdict(matches, kernel),
        "stopped": unpacked.stopped,
        "blobs": [
            {
                "path": b.path,
                "format": b.fmt,
                "offset": b.offset,
                "size": b.size,
                "detail": b.detail,
                "status": b.status,
                "reason": b.reason,
            }
            for b in unpacked.blobs
        ],
        "binaries": [_binary(m, by_path[m.path]) for m in matches],
        "kernel": _kernel(kernel),
        "busybox": applets,
        "summary": {"binaries": len(matches), "statuses": counts, "files": len(unpacked.files())},
        "seconds": {k: round(v, 3) for k, v in clock.items()},
    }


def _binary(m: matching.Match, b: inventory.Binary) -> dict[str, Any]:
    return {
        "path": m.path,
        "kind": b.kind,
        "arch": b.elf.arch if b.elf else None,
        "sha256": b.sha256,
        "license": m.license,
        "component": m.component,
        "package": m.package,
        "version": m.version,
        "status": m.status,
        "evidence": {"by": m.by, "identifiers": list(m.identifiers), "literals": m.literals},
        "elf": None
        if b.elf is None
        else {
            "machine": b.elf.machine,
            "bits": b.elf.bits,
            "endian": b.elf.endian,
            "type": b.elf.type,
            "build_id": b.elf.build_id,
            "interpreter": b.elf.interpreter,
            "needed": list(b.elf.needed),
            "soname": b.elf.soname,
        },
    }


def _kernel(check: matching.KernelCheck | None) -> dict[str, Any] | None:
    if check is None:
        return None
    return {
        "version": check.version,
        "arch": check.arch,
        "drop_version": check.drop_version,
        "version_mismatch": check.version_mismatch,
        "config_arch": check.config_arch,
        "config_arch_mismatch": check.config_arch_mismatch,
        "modules_other_release": list(check.modules_other_release),
        "option_differences": {k: list(v) for k, v in check.option_differences.items()},
    }

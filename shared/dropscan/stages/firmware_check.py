"""The firmware stage: one image against a finished manifest and its drop -> the manifest's
``firmware`` section (docs/firmware.md). Not yet part of the scan pipeline, the CLI or the schema.

unpack -> inventory -> read the drop's sources -> match each binary -> name the rest from the upstream
database's literals (``upstream``) -> which source files are in the binaries -> check the kernel and
BusyBox -> verdict. Everything it cannot read is in the section with a reason; it raises only on bugs.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from dropscan import forked
from dropscan.archive.limits import Limits
from dropscan.firmware import carve, inventory, matching
from dropscan.firmware.literals import binary_parts
from dropscan.firmware.sources import read_drop
from dropscan.store.upstream_literals import ReleaseLiterals

# literals are compared only for binaries that state no identifier; their strings are read this far
STRINGS_MAX = 32 << 20
BUILTIN_MAX = 4 << 20


class Upstream(Protocol):
    """What the stage asks of the upstream database (``store.upstream_literals.UpstreamLiterals``)."""

    def holding(self, literals: Iterable[str]) -> Mapping[str, Iterable[str]]:
        """Each literal some release recorded -> those releases (``package@version``)."""
        ...

    def release(self, package: str, version: str) -> ReleaseLiterals | None:
        """What the release's ingest recorded: how many literals, its licence."""
        ...


def firmware_section(
    image: Path,
    manifest: Mapping[str, Any],
    drop: Path,
    limits: Limits = carve.FIRMWARE_LIMITS,
    seconds: float = carve.DEFAULT_SECONDS,
    scratch: Path | None = None,
    *,
    upstream: Upstream | None = None,
) -> dict[str, Any]:
    """The ``firmware`` section of ``manifest`` for ``image``, the drop read again from ``drop``;
    ``upstream`` (``Services.literals()``): the releases' literals recorded at ingest, which name the
    binaries no component of the drop explains (None: they are named by SONAME or not at all)."""
    work = Path(tempfile.mkdtemp(prefix="firmware-", dir=scratch))
    clock: dict[str, float] = {}
    components = list(manifest.get("components") or [])
    prefixes = [str(c.get("prefix") or "") for c in components]
    try:
        # the drop is read beside the unpacking, which mostly waits for its tools (and libarchive leaves
        # the GIL while it inflates); "sources" is the wait for it afterwards
        with ThreadPoolExecutor(1) as reader:
            reading = reader.submit(read_drop, drop, prefixes)
            started = time.monotonic()
            unpacked = carve.unpack(image, work, limits=limits, seconds=seconds)
            clock["unpack"] = time.monotonic() - started
            started = time.monotonic()
            sources = reading.result().sources(components)
            clock["sources"] = time.monotonic() - started
        started = time.monotonic()
        found, strings = _inventory(unpacked, frozenset(s.package for s in sources if s.package))
        clock["inventory"] = time.monotonic() - started
        started = time.monotonic()
        matches = matching.match_all(found, strings, sources)
        clock["match"] = time.monotonic() - started
        if upstream is not None:
            started = time.monotonic()
            matches = _name_from_upstream(matches, strings, upstream)
            clock["upstream"] = time.monotonic() - started
        started = time.monotonic()
        files = _files_in_binaries(unpacked, matches, sources, strings)
        kernel = _kernel_check(found, sources, _builtin(unpacked))
        applets = _applet_check(found, sources)
        clock["files_and_checks"] = time.monotonic() - started
    finally:
        started = time.monotonic()
        shutil.rmtree(work, ignore_errors=True)
        clock["cleanup"] = time.monotonic() - started  # a second here: ext4 mounted with discard
    section = _section(image, unpacked, found, matches, kernel, applets, clock)
    section["components"] = files
    return section


VERDICT_ORDER = ("complete", "unknown", "incomplete", "wrong")


def unread_section(name: str, size: int, reason: str) -> dict[str, Any]:
    """The section of an image that was not read at all (too big to fetch): nothing is told about it."""
    return {
        "image": name,
        "size": size,
        "arch": None,
        "verdict": "unknown",
        "stopped": reason,
        "blobs": [],
        "binaries": [],
        "kernel": None,
        "busybox": None,
        "summary": {"binaries": 0, "statuses": {}, "files": 0},
        "seconds": {},
        "components": [],
    }


def attach(manifest: dict[str, Any], sections: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``manifest`` with its ``firmware`` part: one section per image (``firmware_section``) and the
    pair's verdict, the worst of theirs (the one place the pipeline and the CLI put it there).

    Each file of a component matched to a binary gets ``in_binary`` (true when some image's binaries
    hold its literals, false when the images that tell all say not, null when none can tell), and the
    red flags in files no shipped binary contains are marked ``shipped: false`` and ranked below."""
    verdicts = [str(s.get("verdict") or "complete") for s in sections]
    manifest["firmware"] = {
        "verdict": max(verdicts, key=VERDICT_ORDER.index) if verdicts else None,
        "images": [dict(s) for s in sections],
    }
    told = _in_binary(sections)
    if told:
        for entry in manifest.get("files") or []:
            if entry.get("path") in told:
                entry["in_binary"] = told[entry["path"]]
        if manifest.get("flags"):
            manifest["flags"] = matching.mark_unshipped(manifest["flags"], told)
    return manifest


def _in_binary(sections: Iterable[Mapping[str, Any]]) -> dict[str, bool | None]:
    """path -> in_binary over every image: any true wins, else any false, else null."""
    told: dict[str, bool | None] = {}
    for section in sections:
        for component in section.get("components") or []:
            for path, value in (component.get("files") or {}).items():
                if value is True or told.get(path) is None:
                    told[path] = value
    return told


def _inventory(
    unpacked: carve.Unpacked, packages: frozenset[str]
) -> tuple[inventory.Inventory, dict[str, frozenset[str]]]:
    """The image's inventory and the printable strings of its binaries that state no package of the
    drop (the ones the literals place): each file read once, on every usable CPU (``forked.spread``;
    describing and the strings' regex are pure Python, most of the stage's time after the unpacking)."""
    files = unpacked.files()
    # largest first, so that the interleaved shares of ``spread`` are even (a 30 MB library among 1 MB ones)
    order = sorted(range(len(files)), key=lambda i: -files[i].size)
    work = partial(_describe, packages=packages)
    shared = forked.spread(work, [files[i] for i in order], forked.usable_cpus())
    described: list[tuple[inventory.Binary | None, str | None]] = [(None, None)] * len(files)
    for at, index in enumerate(order):
        described[index] = shared[at]
    binaries = [binary for binary, _ in described if binary is not None]
    strings = {
        binary.path: frozenset(text.split("\n")) if text else frozenset()
        for binary, text in described
        if binary is not None and text is not None
    }
    return inventory.assemble(binaries, unpacked.stated_arch()), strings


def _describe(
    entries: list[carve.Entry], packages: frozenset[str]
) -> list[tuple[inventory.Binary | None, str | None]]:
    """Each file's ``describe`` and, for a binary stating no package of ``packages``, its distinct
    strings (read up to ``STRINGS_MAX``) joined by newlines, which no printable string holds: one string
    crosses the pipe from a worker three times faster than a pickled set of 100,000."""
    done: list[tuple[inventory.Binary | None, str | None]] = []
    for entry in entries:
        assert entry.local is not None
        data = entry.local.read_bytes()
        binary = inventory.describe(entry.path, data)
        wanted = binary is not None and matching.stated(binary)[0] not in packages
        text = "\n".join(set(inventory.printable_strings(data[:STRINGS_MAX]))) if wanted else None
        done.append((binary, text))
    return done


def _strings(unpacked: carve.Unpacked, wanted: set[str]) -> dict[str, frozenset[str]]:
    """Printable strings of the binaries at ``wanted`` paths (read up to ``STRINGS_MAX`` each)."""
    strings = {}
    for entry in unpacked.files():
        if entry.path in wanted and entry.local is not None:
            with entry.local.open("rb") as handle:
                strings[entry.path] = frozenset(inventory.printable_strings(handle.read(STRINGS_MAX)))
    return strings


def _name_from_upstream(
    matches: list[matching.Match], strings: Mapping[str, frozenset[str]], upstream: Upstream
) -> list[matching.Match]:
    """The binaries no component explains, named by the upstream release whose recorded literals they
    hold (one lookup for all their strings), when enough of them are there."""
    open_ = [m for m in matches if m.component is None and m.path in strings]
    parts = {m.path: frozenset(binary_parts(strings[m.path])) for m in open_}
    holding = upstream.holding(set().union(*parts.values())) if parts else {}
    if not holding:
        return matches
    named: dict[str, matching.Match] = {}
    for m in open_:
        hit = matching.upstream_candidate(parts[m.path], holding)
        facts = upstream.release(hit.package, hit.version) if hit is not None else None
        if hit is not None and facts is not None and matching.upstream_accepts(hit, facts.recorded):
            named[m.path] = matching.named_upstream(m, hit, facts.license)
    return [named.get(m.path, m) for m in matches]


def _files_in_binaries(
    unpacked: carve.Unpacked,
    matches: list[matching.Match],
    sources: list[matching.Source],
    strings: Mapping[str, frozenset[str]],
) -> list[dict[str, Any]]:
    """Per component matched to binaries: each of its source files' ``in_binary``, from its literals
    (distinctive within the drop) among the strings of all the component's binaries."""
    by_component: dict[str, list[str]] = {}
    for m in matches:
        if m.component is not None:
            by_component.setdefault(m.component, []).append(m.path)
    unique = matching.file_distinctive(s for s in sources if s.files)
    wanted = {p for prefix, paths in by_component.items() if unique.get(prefix) for p in paths}
    more = _strings(unpacked, wanted - set(strings))
    found = []
    for prefix, paths in sorted(by_component.items()):
        if not unique.get(prefix):
            continue
        held = frozenset(binary_parts(s for p in paths for s in strings.get(p) or more.get(p) or ()))
        files = matching.files_in_binary(unique[prefix], held)
        counts = {str(v).lower(): sum(1 for x in files.values() if x is v) for v in (True, False, None)}
        found.append({"prefix": prefix, "binaries": len(paths), "counts": counts, "files": files})
    return found


def _builtin(unpacked: carve.Unpacked) -> list[str]:
    """The lines of the image's ``modules.builtin`` (the kernel's built-in objects), if it has one."""
    for entry in unpacked.files():
        if entry.path.endswith("/modules.builtin") and entry.local is not None:
            with entry.local.open("rb") as handle:
                return handle.read(BUILTIN_MAX).decode("utf-8", "replace").splitlines()
    return []


def _kernel_check(
    found: inventory.Inventory, sources: list[matching.Source], builtin: list[str]
) -> matching.KernelCheck | None:
    if found.kernel is None and not any(b.kind == "module" for b in found.binaries):
        return None
    linux = next((s for s in sources if s.package == "linux"), None)
    modules = [b for b in found.binaries if b.kind == "module"]
    objects = [o for b in modules if (o := matching.module_object(b.path)) is not None]
    implied = matching.implied_config(objects, builtin, linux.kbuild) if linux else {}
    return matching.check_kernel(
        found.kernel,
        found.kernel_arch,
        modules,
        linux.version if linux else None,
        linux.config if linux else None,
        implied,
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
        "verdict": _verdict(unpacked, matches, kernel),
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


def _verdict(
    unpacked: carve.Unpacked, matches: list[matching.Match], kernel: matching.KernelCheck | None
) -> str:
    """The matching's verdict; ``unknown`` in place of ``complete`` when the image could not be read to
    the end or showed no binary at all: what was not seen cannot be said to have its source."""
    told = matching.verdict(matches, kernel)
    if told == "complete" and (unpacked.stopped or not matches):
        return "unknown"
    return told


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
        "config_source": check.config_source,
        "implied_options": check.implied_options,
        "option_differences": {k: list(v) for k, v in check.option_differences.items()},
    }

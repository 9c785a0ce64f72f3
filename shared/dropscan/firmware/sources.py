"""What the drop's components say to the matching: their C string literals (per file, comments left
out), the version their Makefile states, their ``.config`` and, for a kernel, which CONFIG_ option
builds which object (its Kbuild Makefiles), read from the drop's archive with libarchive
(``dropscan.archive.binding``).

One pass over the archive's top level; members are read up to ``MEMBER_MAX`` bytes each (a generated
source past it holds tables, not messages). Nested archives are not opened in this round.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from pathlib import Path

from dropscan.archive import binding
from dropscan.firmware.inventory import parse_config
from dropscan.firmware.literals import SOURCE_SUFFIXES, code_literals
from dropscan.firmware.matching import Source

MEMBER_MAX = 4 << 20
MAKEFILE_FIELD = re.compile(r"^(VERSION|PATCHLEVEL|SUBLEVEL)\s*=\s*(\d+)\s*$", re.M)
KBUILD_OBJ = re.compile(r"^\s*obj-\$\((CONFIG_\w+)\)\s*[+:]?=\s*(.*)$", re.M)
KBUILD_NAMES = ("Makefile", "Kbuild")


def kbuild_objects(folder: str, text: str) -> dict[str, str]:
    """``obj-$(CONFIG_USB_UAS) += uas.o`` in ``drivers/usb/storage/Makefile`` ->
    ``{"drivers/usb/storage/uas": "CONFIG_USB_UAS"}`` (continued lines joined; folders and plain
    ``obj-y``/``obj-m`` name no option)."""
    found: dict[str, str] = {}
    text = text.replace("\\\n", " ")
    for option, objects in KBUILD_OBJ.findall(text):
        for obj in objects.split("#", 1)[0].split():
            if obj.endswith(".o"):
                found[posixpath.normpath(posixpath.join(folder, obj[:-2]))] = option
    return found


def makefile_version(text: str) -> str | None:
    """``VERSION = 6``, ``PATCHLEVEL = 1``, ``SUBLEVEL = 176`` (Linux, BusyBox) -> ``6.1.176``."""
    fields = dict(MAKEFILE_FIELD.findall(text))
    if "VERSION" not in fields or "PATCHLEVEL" not in fields:
        return None
    return ".".join(fields[k] for k in ("VERSION", "PATCHLEVEL", "SUBLEVEL") if k in fields)


class DropSources:
    """The drop's components, read once: literals, Makefile versions and .config by prefix."""

    def __init__(self) -> None:
        self.literals: dict[str, set[str]] = {}
        self.files: dict[str, dict[str, frozenset[str]]] = {}  # prefix -> drop path -> literals
        self.versions: dict[str, str] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.kbuild: dict[str, dict[str, str]] = {}  # prefix -> object -> CONFIG_ option

    def sources(self, components: list[Mapping[str, object]]) -> list[Source]:
        """The manifest's components, each with what its files say."""
        found = []
        for component in components:
            prefix = str(component.get("prefix") or "")
            # a scan's manifest names a component's folder with its slash ("busybox-1.35.0/"): kept as
            # given, looked up without it, as the drop's read keys what it found
            root = prefix.rstrip("/")
            package, version, licence = (component.get(k) for k in ("package", "version", "license"))
            found.append(
                Source(
                    prefix=prefix,
                    package=str(package) if package else _package_of(prefix),
                    version=str(version) if version else self.versions.get(root),
                    license=str(licence) if licence else None,
                    literals=frozenset(self.literals.get(root, ())),
                    config=self.configs.get(root),
                    files=self.files.get(root, {}),
                    kbuild=self.kbuild.get(root, {}),
                )
            )
        return found


def _package_of(prefix: str) -> str | None:
    """``linux-6.1.176`` -> ``linux``: the name a top folder gives an unidentified component."""
    match = re.match(r"([a-zA-Z][\w+.-]*?)[-_]v?\d", prefix.rstrip("/"))
    return match.group(1).lower() if match else None


def read_drop(drop: Path, prefixes: list[str]) -> DropSources:
    """One pass over the drop: each component's literals, its Makefile's version and its .config."""
    found = DropSources()
    roots = sorted((p.rstrip("/") + "/" for p in prefixes), key=len, reverse=True)
    with drop.open("rb") as handle:
        reader, entry = binding.open_reader(handle, seekable=False)
        with reader:
            while entry is not None:
                name = binding.raw_name(entry).decode("utf-8", "replace").removeprefix("./")
                prefix = next((r for r in roots if name.startswith(r)), None)
                kind = binding.entry_filetype(entry) & binding.TYPE_MASK
                if prefix is not None and binding.has_data(kind, binding.entry_hardlink(entry)):
                    _take(found, prefix.rstrip("/"), name[len(prefix) :], reader)
                entry = reader.next_entry()
    return found


def _take(found: DropSources, prefix: str, inner: str, reader: binding.Reader) -> None:
    base = inner.rsplit("/", 1)[-1]
    wanted = inner.endswith(SOURCE_SUFFIXES) or base in KBUILD_NAMES or inner == ".config"
    if not wanted:
        return
    chunks, size = [], 0
    while size < MEMBER_MAX and (block := reader.read()):
        chunks.append(block)
        size += len(block)
    text = b"".join(chunks)[:MEMBER_MAX].decode("utf-8", "replace")
    if base in KBUILD_NAMES:
        version = makefile_version(text) if inner == "Makefile" else None
        if version is not None:
            found.versions[prefix] = version
        folder = inner.rpartition("/")[0]
        if "obj-$(CONFIG_" in text:
            found.kbuild.setdefault(prefix, {}).update(kbuild_objects(folder, text))
    elif inner == ".config":
        found.configs[prefix] = parse_config(text)
    else:
        literals = code_literals(text)
        found.literals.setdefault(prefix, set()).update(literals)
        found.files.setdefault(prefix, {})[f"{prefix}/{inner}"] = frozenset(literals)

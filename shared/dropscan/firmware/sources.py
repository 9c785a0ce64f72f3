"""What the drop's components say to the matching: their C string literals, the version their Makefile
states and their ``.config``, read from the drop's archive with libarchive (``dropscan.archive.binding``).

One pass over the archive's top level; members are read up to ``MEMBER_MAX`` bytes each (a generated
source past it holds tables, not messages). Nested archives are not opened in this round.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from dropscan.archive import binding
from dropscan.firmware.inventory import parse_config
from dropscan.firmware.matching import Source, c_literals

MEMBER_MAX = 4 << 20
SOURCE_SUFFIXES = (".c", ".h", ".cc", ".cpp")
MAKEFILE_FIELD = re.compile(r"^(VERSION|PATCHLEVEL|SUBLEVEL)\s*=\s*(\d+)\s*$", re.M)


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
        self.versions: dict[str, str] = {}
        self.configs: dict[str, dict[str, str]] = {}

    def sources(self, components: list[Mapping[str, object]]) -> list[Source]:
        """The manifest's components, each with what its files say."""
        found = []
        for component in components:
            prefix = str(component.get("prefix") or "")
            package, version, licence = (component.get(k) for k in ("package", "version", "license"))
            found.append(
                Source(
                    prefix=prefix,
                    package=str(package) if package else _package_of(prefix),
                    version=str(version) if version else self.versions.get(prefix),
                    license=str(licence) if licence else None,
                    literals=frozenset(self.literals.get(prefix, ())),
                    config=self.configs.get(prefix),
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
    wanted = inner.endswith(SOURCE_SUFFIXES) or inner in ("Makefile", ".config")
    if not wanted:
        return
    chunks, size = [], 0
    while size < MEMBER_MAX and (block := reader.read()):
        chunks.append(block)
        size += len(block)
    text = b"".join(chunks)[:MEMBER_MAX].decode("utf-8", "replace")
    if inner == "Makefile":
        version = makefile_version(text)
        if version is not None:
            found.versions[prefix] = version
    elif inner == ".config":
        found.configs[prefix] = parse_config(text)
    else:
        found.literals.setdefault(prefix, set()).update(c_literals(text))

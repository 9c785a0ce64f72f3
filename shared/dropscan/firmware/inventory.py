"""What a firmware image ships: each binary described from its bytes (pure), and the image's list.

For every ELF (LIEF): machine, class, endianness, type, build-id, interpreter, NEEDED and SONAME,
``.comment``; for a kernel module its ``.modinfo`` (vermagic, license, srcversion, ...); for any binary
the identifiers its strings state: the Linux banner (release, builder, compiler) and the kernel's
configuration when built in (IKCONFIG), the BusyBox version and applet table, a U-Boot banner, and
licence statements. ``printable_strings`` gives the literals the matching rules compare with sources.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import re
import zlib
from collections.abc import Iterable

import lief

lief.logging.disable()  # its warnings on odd sections would go to stderr; what it cannot read is None
# parse_elf reads the header, notes, dynamic entries and sections: symbols, relocations, symbol versions
# and the overlay are left unparsed, a quarter of the time for the same answers (docs/firmware.md)
ELF_PARSER = lief.ELF.ParserConfig()
ELF_PARSER.parse_relocations = False
ELF_PARSER.parse_dyn_symbols = False
ELF_PARSER.parse_symtab_symbols = False
ELF_PARSER.parse_symbol_versions = False
ELF_PARSER.parse_overlay = False

# e_machine names (LIEF's ARCH names with EM_) -> the architecture names of dropscan (as --arch and a
# kernel .config's CONFIG_<ARCH> use them)
ARCHITECTURES = {
    "EM_MIPS": "mips",
    "EM_ARM": "arm",
    "EM_AARCH64": "arm64",
    "EM_386": "x86",
    "EM_X86_64": "x86",
    "EM_PPC": "powerpc",
    "EM_PPC64": "powerpc",
    "EM_RISCV": "riscv",
    "EM_SH": "sh",
    "EM_SPARC": "sparc",
    "EM_SPARCV9": "sparc",
    "EM_S390": "s390",
    "EM_ARC_COMPACT": "arc",
    "EM_ARC_COMPACT2": "arc",
    "EM_XTENSA": "xtensa",
    "EM_LOONGARCH": "loongarch",
    "EM_MICROBLAZE": "microblaze",
}
STRING_MIN = 6
BANNER = re.compile(rb"Linux version (\d+\.\d+[\w.+~-]*) \(([^)\n]*)\) \(([^\n]*?)\) (#[^\n\0]*)")
BUSYBOX = re.compile(rb"BusyBox v(\d+\.\d+(?:\.\d+)?[\w.-]*)")
UBOOT = re.compile(rb"U-Boot (?:SPL )?(\d{4}\.\d{2}[\w.+~-]*)(?: \(([^)\0\n]{1,60})\))?")
LICENCE = re.compile(
    rb"(?:SPDX-License-Identifier: [\w.+() -]{2,60}"
    rb"|GNU (?:Lesser |Library |Affero )?General Public License[^\0\n]{0,60}"
    rb"|(?:Licensed|released|distributed) under the (?:terms of the )?[^\0\n]{3,60}"
    rb"|license=[\w /+.-]{2,40}"
    rb"|[Pp]ermission is hereby granted[^\0\n]{0,60}"
    rb"|non-commercial[^\0\n]{0,60})"
)
LICENCE_WORDS = (
    b"SPDX-License-Identifier",
    b"General Public License",
    b"icensed under",
    b"released under",
    b"distributed under",
    b"license=",
    b"ermission is hereby granted",
    b"non-commercial",
)
IKCONFIG_START, IKCONFIG_END = b"IKCFG_ST", b"IKCFG_ED"
APPLET_START = b"[\x00[[\x00"
APPLET = re.compile(rb"[a-z0-9][a-z0-9._-]{0,30}")


@dataclasses.dataclass(frozen=True, slots=True)
class Elf:
    """An ELF's header and dynamic identifiers."""

    machine: str  # e.g. "EM_MIPS"
    arch: str | None  # e.g. "mips"
    bits: int
    endian: str  # "little" | "big"
    type: str  # "EXEC" | "DYN" | "REL" | "CORE"
    build_id: str | None
    interpreter: str | None
    needed: tuple[str, ...]
    soname: str | None
    comment: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Kernel:
    """What a Linux image states about itself."""

    release: str  # "6.1.0-50-4kc-malta"
    version: str  # the upstream version: "6.1.176" (as a distribution's build string states it), else
    # the numbers the release starts with
    builder: str
    compiler: str
    build: str  # "#1 SMP Debian 6.1.176-1 (2026-07-02)"
    config: dict[str, str] | None  # IKCONFIG, option -> value, when built in


@dataclasses.dataclass(frozen=True, slots=True)
class Binary:
    """One file of the image described: its identifiers, as its bytes state them."""

    path: str
    size: int
    sha256: str
    kind: str  # "elf" | "module" | "kernel" | "bootloader" | "data"
    elf: Elf | None = None
    modinfo: dict[str, str] | None = None
    kernel: Kernel | None = None
    busybox: str | None = None  # the version it states
    applets: tuple[str, ...] = ()
    uboot: str | None = None
    licences: tuple[str, ...] = ()


def describe(path: str, data: bytes) -> Binary | None:
    """A binary's identifiers, or None for a file that is no binary and states nothing (text, data)."""
    parsed = parse_elf(data) if data.startswith(b"\x7fELF") else None
    elf, modinfo = parsed if parsed is not None else (None, None)
    kernel = kernel_info(data)
    busybox = BUSYBOX.search(data)
    uboot = UBOOT.search(data) if elf is None or kernel is None else None
    if elf is None and kernel is None and uboot is None and busybox is None:
        return None
    if modinfo is not None:
        kind = "module"
    elif kernel is not None:
        kind = "kernel"
    elif uboot is not None and (elf is None or b"U-Boot" in data[:4096] or _names_uboot(data)):
        kind = "bootloader"
    else:
        kind = "elf" if elf is not None else "data"
    return Binary(
        path=path,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        kind=kind,
        elf=elf,
        modinfo=modinfo,
        kernel=kernel,
        busybox=busybox.group(1).decode() if busybox else None,
        applets=busybox_applets(data) if busybox else (),
        uboot=uboot.group(1).decode() if uboot and kind == "bootloader" else None,
        licences=licence_statements(data),
    )


def _names_uboot(data: bytes) -> bool:
    return data.count(b"U-Boot") >= 3 and b"bootcmd" in data


def parse_elf(data: bytes) -> tuple[Elf, dict[str, str] | None] | None:
    """An ELF's identifiers and, for a kernel module, its ``.modinfo``; None when LIEF cannot read it."""
    binary = lief.ELF.parse(data, ELF_PARSER)
    if binary is None:
        return None
    header = binary.header
    machine = "EM_" + header.machine_type.name
    build_id = None
    for note in binary.notes:
        if note.type == lief.ELF.Note.TYPE.GNU_BUILD_ID:
            build_id = bytes(note.description).hex()
    soname = None
    for entry in binary.dynamic_entries:
        if isinstance(entry, lief.ELF.DynamicSharedObject):
            soname = _text(entry.name)
    comment = binary.get_section(".comment")
    elf = Elf(
        machine=machine,
        arch=ARCHITECTURES.get(machine),
        bits=32 if header.identity_class == lief.ELF.Header.CLASS.ELF32 else 64,
        endian="little" if header.identity_data == lief.ELF.Header.ELF_DATA.LSB else "big",
        type=header.file_type.name,
        build_id=build_id,
        interpreter=binary.interpreter if binary.has_interpreter else None,
        needed=tuple(_text(name) for name in binary.libraries),
        soname=soname,
        comment=tuple(sorted(set(printable_strings(bytes(comment.content), 4)))) if comment else (),
    )
    modinfo = binary.get_section(".modinfo") if elf.type == "REL" else None
    return elf, (parse_modinfo(bytes(modinfo.content)) if modinfo is not None else None)


def _text(name: str | bytes) -> str:
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else name


def parse_modinfo(raw: bytes) -> dict[str, str] | None:
    """A kernel module's ``.modinfo`` (NUL-separated key=value strings); several values of one key
    (aliases, parameters) are kept, newline-separated."""
    info: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            name = key.decode("ascii", "replace")
            text = value.decode("utf-8", "replace")
            info[name] = f"{info[name]}\n{text}" if name in info else text
    return info or None


def kernel_info(data: bytes) -> Kernel | None:
    """The Linux banner and, when built in, the configuration (IKCONFIG) of a kernel image."""
    banner = BANNER.search(data)
    if banner is None:
        return None
    release = banner.group(1).decode("utf-8", "replace")
    build = banner.group(4).decode("utf-8", "replace").strip()
    # distributions name the release by their ABI (6.1.0-50-4kc-malta) and state the upstream version
    # in the build string ("#1 SMP Debian 6.1.176-1 (2026-07-02)")
    stated = re.search(r"(?:Debian|Ubuntu) (\d+\.\d+\.\d+)", build)
    return Kernel(
        release=release,
        version=stated.group(1) if stated else kernel_version(release),
        builder=banner.group(2).decode("utf-8", "replace"),
        compiler=banner.group(3).decode("utf-8", "replace"),
        build=build,
        config=ikconfig(data),
    )


def kernel_version(release: str) -> str:
    """``6.1.0-50-4kc-malta`` -> ``6.1.0``; ``5.10.110`` -> ``5.10.110``: the numbers before any suffix."""
    match = re.match(r"\d+\.\d+(?:\.\d+)?", release)
    return match.group() if match else release


def ikconfig(data: bytes) -> dict[str, str] | None:
    """The gzip between IKCFG_ST and IKCFG_ED (CONFIG_IKCONFIG), as option -> value."""
    start = data.find(IKCONFIG_START)
    if start < 0:
        return None
    end = data.find(IKCONFIG_END, start)
    blob = data[start + len(IKCONFIG_START) : end if end > 0 else start + (4 << 20)]
    try:
        text = gzip.decompress(blob).decode("utf-8", "replace")
    except (OSError, EOFError, zlib.error):
        return None
    return parse_config(text)


def parse_config(text: str) -> dict[str, str]:
    """A kernel or BusyBox ``.config``: set options with their values, ``is not set`` ones as "n"."""
    options: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("# CONFIG_") and line.endswith(" is not set"):
            options[line[2:].split()[0]] = "n"
        elif line.startswith("CONFIG_") and "=" in line:
            key, _, value = line.partition("=")
            options[key] = value.strip('"')
    return options


def busybox_applets(data: bytes) -> tuple[str, ...]:
    """The applet table of a BusyBox binary: the sorted, NUL-separated names that start ``[``, ``[[``."""
    start = data.find(APPLET_START)
    if start < 0:
        return ()
    names = ["[", "[["]
    at = start + len(APPLET_START)
    while True:
        end = data.find(b"\0", at, at + 64)
        if end <= at:
            break
        match = APPLET.fullmatch(data, at, end)
        if match is None or match.group().decode() < names[-1]:
            break
        names.append(match.group().decode())
        at = end + 1
    return tuple(names)


def licence_statements(data: bytes, limit: int = 20) -> tuple[str, ...]:
    """Distinct licence statements in a binary's strings (SPDX tags, GPL wording, module licences).

    Each statement starts with one of a few words, found with ``bytes.find`` (a regex alternation
    over the whole binary costs twenty times as much); the statement is read from there.
    """
    seen: dict[str, None] = {}
    for word in LICENCE_WORDS:
        at = data.find(word)
        while at >= 0 and len(seen) < limit:
            start = max(data.rfind(b"\0", max(at - 24, 0), at) + 1, at - 24)
            match = LICENCE.search(data, start, at + 128)
            if match is not None:
                seen.setdefault(match.group().decode("utf-8", "replace").strip(), None)
            at = data.find(word, at + len(word))
    return tuple(seen)


def printable_strings(data: bytes, minimum: int = STRING_MIN) -> list[str]:
    """The printable ASCII runs of at least ``minimum`` characters, as ``strings`` finds them.

    ``findall`` with a possessive run (nothing to backtrack into) is about 15 % faster than ``finditer``
    with a group per match; it is most of the inventory's time on a large image (docs/firmware.md)."""
    return [run.decode("ascii") for run in re.findall(rb"[\x20-\x7e\t]{%d,}+" % minimum, data)]


def architectures(binaries: Iterable[Binary]) -> dict[str, int]:
    """How many ELF binaries the image has per architecture (its programs say what the device runs)."""
    counts: dict[str, int] = {}
    for binary in binaries:
        if binary.elf is not None and binary.elf.arch is not None:
            counts[binary.elf.arch] = counts.get(binary.elf.arch, 0) + 1
    return counts


@dataclasses.dataclass
class Inventory:
    """Every binary of one image, its kernel and the architecture its programs are built for."""

    binaries: list[Binary]
    kernel: Kernel | None
    kernel_path: str | None
    arch: str | None  # the architecture most of its ELF files are for
    kernel_arch: str | None  # as the kernel's container (uImage) or its modules state it
    stated_arch: tuple[str, ...] = ()  # what the image's containers (uImage headers) state


def take(files: Iterable[tuple[str, bytes]], stated_arch: Iterable[str] = ()) -> Inventory:
    """The inventory of an image from its files (path in the image, contents)."""
    return assemble([b for b in (describe(path, data) for path, data in files) if b is not None], stated_arch)


def assemble(binaries: list[Binary], stated_arch: Iterable[str] = ()) -> Inventory:
    """The inventory of an image from its binaries, described (``describe``) in the order of its files."""
    kernels = [b for b in binaries if b.kind == "kernel" and b.kernel is not None]
    counts = architectures(binaries)
    modules = architectures(b for b in binaries if b.kind == "module")
    stated = tuple(dict.fromkeys(stated_arch))
    kernel_elf = kernels[0].elf if kernels else None
    kernel_arch = (
        (kernel_elf.arch if kernel_elf is not None else None)
        or (stated[0] if stated else None)
        or (max(modules, key=modules.__getitem__) if modules else None)
    )
    return Inventory(
        binaries=binaries,
        kernel=kernels[0].kernel if kernels else None,
        kernel_path=kernels[0].path if kernels else None,
        arch=max(counts, key=counts.__getitem__) if counts else None,
        kernel_arch=kernel_arch,
        stated_arch=stated,
    )

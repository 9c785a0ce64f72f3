"""Each binary of a firmware image matched to its source in the drop, and the checks (pure rules).

A binary goes to a drop's component (``components[].prefix``) by what it states (BusyBox's version
string, the Linux banner and module vermagic, a U-Boot banner) and else by the string literals of the
component's sources found in it, ranked as BAT ranks them: a literal counts for a component only when
no other component of the drop has it, so the common ones ("%s: %s", "usage") say nothing. A binary no
component claims is named from its own identifiers (SONAME, program name: ``IDENTIFIED``) when it can
be, so that a copyleft binary without source is ``source-missing`` with its package and licence.

Statuses: ``corresponds`` | ``wrong-version`` (the binary states X, the component is Y) |
``source-missing`` (copyleft, no source in the drop) | ``no-obligation`` (a permissive licence) |
``unknown``. The kernel's checks compare its version with the drop's Makefile, its architecture with
the drop's ``.config``, every module's vermagic with its release; BusyBox's applets are compared with
the drop's BusyBox ``.config``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from dropscan.firmware.inventory import Binary, Inventory, Kernel

# a literal is distinctive enough to count when it has this many characters and appears in the
# sources of one component only; a component is the binary's when this many of its literals are there
# and they are this share of the binary's strings (a C library shares dozens of a BusyBox's messages,
# a small share of its own: docs/firmware.md has the figures)
LITERAL_MIN = 8
MATCH_MIN = 10
MATCH_SHARE = 0.10
C_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.){' + str(LITERAL_MIN) + r',})"')
ESCAPES = {"\\n": "\n", "\\t": "\t", '\\"': '"', "\\\\": "\\"}
# what a binary states of itself, by package: identifiers the inventory reads
STATED_PACKAGES = ("busybox", "linux", "u-boot")
# binaries known by a SONAME or a program name, for those no component of the drop claims
IDENTIFIED: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"^(libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libBrokenLocale|libnsl|libnss_\w+"
                r"|libc_malloc_debug|libthread_db|libmemusage|libpcprofile)\.so(\.\d+)*$|^ld\.so\.1$"),
     "glibc", "LGPL-2.1-or-later"),
    (re.compile(r"^lib(xtables|ip4tc|ip6tc)\.so\.\d+$|^xtables-(legacy|nft)-multi$|^lib(xt|ipt|ip6t|ebt|arpt)_|^nfnl_osf$"),
     "iptables", "GPL-2.0-or-later"),
    (re.compile(r"^libnftnl\.so\.\d+$"), "libnftnl", "GPL-2.0-or-later"),
    (re.compile(r"^libmnl\.so\.\d+$"), "libmnl", "LGPL-2.1-or-later"),
    (re.compile(r"^libnetfilter_conntrack\.so\.\d+$"), "libnetfilter-conntrack", "GPL-2.0-or-later"),
    (re.compile(r"^libnfnetlink\.so\.\d+$"), "libnfnetlink", "GPL-2.0-or-later"),
    (re.compile(r"^(dropbear|dbclient|dropbearkey|dropbearconvert)$"), "dropbear", "MIT"),
    (re.compile(r"^libtomcrypt\.so\.\d+$"), "libtomcrypt", "Unlicense"),
    (re.compile(r"^libtommath\.so\.\d+$"), "libtommath", "Unlicense"),
    (re.compile(r"^libz\.so\.\d+$"), "zlib", "Zlib"),
    (re.compile(r"^libcrypt\.so\.\d+$"), "libxcrypt", "LGPL-2.1-or-later"),
    (re.compile(r"^libgcc_s\.so\.\d+$"), "libgcc", "GPL-3.0-or-later WITH GCC-exception-3.1"),
    (re.compile(r"^busybox$"), "busybox", "GPL-2.0-only"),
)  # fmt: skip
COPYLEFT = re.compile(r"\b(A?GPL|LGPL|MPL|EPL|CDDL|EUPL)\b|\bGPL\b|GNU")
# a licence with an exception that lifts the source obligation of what links to it
EXCEPTED = re.compile(r"WITH (GCC-exception|Linux-syscall-note|Autoconf-exception|Classpath-exception)")
# the kernel's architecture symbols, as a .config selects one of them
CONFIG_ARCH = {
    "CONFIG_MIPS": "mips",
    "CONFIG_ARM": "arm",
    "CONFIG_ARM64": "arm64",
    "CONFIG_X86": "x86",
    "CONFIG_PPC": "powerpc",
    "CONFIG_RISCV": "riscv",
    "CONFIG_SUPERH": "sh",
    "CONFIG_SPARC": "sparc",
    "CONFIG_S390": "s390",
    "CONFIG_ARC": "arc",
    "CONFIG_XTENSA": "xtensa",
    "CONFIG_LOONGARCH": "loongarch",
    "CONFIG_MICROBLAZE": "microblaze",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """A component of the drop as the matching sees it: the manifest's entry, plus what its sources say."""

    prefix: str
    package: str | None
    version: str | None  # the matched upstream release's, else what its Makefile states
    license: str | None
    literals: frozenset[str] = frozenset()
    config: Mapping[str, str] | None = None  # its .config, when the drop has one at the top


@dataclasses.dataclass(frozen=True, slots=True)
class Match:
    """One binary's answer."""

    path: str
    status: str
    component: str | None  # the prefix of the drop's component
    package: str | None
    version: str | None  # as the binary states it
    license: str | None
    by: str  # "identifier" | "literals" | "soname" | "none"
    literals: int = 0  # distinctive literals of the component found in the binary
    identifiers: tuple[str, ...] = ()


def c_literals(text: str) -> set[str]:
    """The string literals of a C source of at least ``LITERAL_MIN`` characters, escapes resolved."""
    found: set[str] = set()
    for match in C_LITERAL.finditer(text):
        literal = re.sub(r"\\[nt\"\\]", lambda m: ESCAPES[m.group()], match.group(1))
        found.update(
            part for part in re.split(r"[\n\t]|%[-#0-9.]*[a-z]", literal) if len(part) >= LITERAL_MIN
        )
    return found


def distinctive(sources: Iterable[Source]) -> dict[str, frozenset[str]]:
    """Each component's literals that no other component of the drop has (by prefix)."""
    sources = list(sources)
    seen: dict[str, int] = {}
    for source in sources:
        for literal in source.literals:
            seen[literal] = seen.get(literal, 0) + 1
    return {s.prefix: frozenset(lit for lit in s.literals if seen[lit] == 1) for s in sources}


def stated(binary: Binary) -> tuple[str | None, str | None, tuple[str, ...]]:
    """The package and version a binary states of itself, and the identifiers it said them with."""
    if binary.busybox is not None:
        return "busybox", binary.busybox, (f"BusyBox v{binary.busybox}",)
    if binary.kernel is not None:
        return "linux", binary.kernel.version, (f"Linux version {binary.kernel.release}",)
    if binary.modinfo is not None:
        vermagic = binary.modinfo.get("vermagic", "")
        return "linux", None, (f"vermagic={vermagic.strip()}",)
    if binary.uboot is not None:
        return "u-boot", binary.uboot, (f"U-Boot {binary.uboot}",)
    return None, None, ()


def identified(binary: Binary) -> tuple[str, str] | None:
    """(package, licence) of a binary known by its SONAME or file name, else None."""
    names = [binary.path.rsplit("/", 1)[-1]]
    if binary.elf is not None and binary.elf.soname:
        names.insert(0, binary.elf.soname)
    for name in names:
        for pattern, package, licence in IDENTIFIED:
            if pattern.search(name):
                return package, licence
    return None


def obligation(licence: str | None) -> str:
    """``source-missing`` for a copyleft licence without a lifting exception, ``no-obligation`` for
    another known licence, ``unknown`` without one."""
    if not licence:
        return "unknown"
    if COPYLEFT.search(licence) and not EXCEPTED.search(licence):
        return "source-missing"
    return "no-obligation"


def same_version(stated_version: str, component_version: str) -> bool:
    """Whether a version a binary states is the component's (1.35.0 vs 1.35.0; 2023.01+dfsg-2 vs 2023.01)."""
    core = re.match(r"[\w.]+?(?=[+~-]|$)", stated_version)
    return (core.group() if core else stated_version) == component_version.split("+")[0].split("-")[0]


def match_binary(
    binary: Binary, strings: frozenset[str], sources: list[Source], unique: Mapping[str, frozenset[str]]
) -> Match:
    """The binary's component and status; ``strings`` are its printable strings."""
    package, version, identifiers = stated(binary)
    component: Source | None = None
    by, literals = "none", 0
    if package is not None:
        component = next((s for s in sources if s.package == package), None)
        by = "identifier" if component is not None else by
    if component is None:
        scores = {prefix: len(lits & strings) for prefix, lits in unique.items()}
        best = max(scores, key=scores.__getitem__, default=None)
        if best is not None and scores[best] >= max(MATCH_MIN, MATCH_SHARE * len(strings)):
            component = next(s for s in sources if s.prefix == best)
            by, literals = "literals", scores[best]
    elif component.prefix in unique:
        literals = len(unique[component.prefix] & strings)
    if component is not None:
        wrong = (
            version is not None
            and component.version is not None
            and not same_version(version, component.version)
        )
        return Match(
            binary.path, "wrong-version" if wrong else "corresponds", component.prefix,
            component.package, version, component.license, by, literals, identifiers,
        )  # fmt: skip
    known = identified(binary)
    licence = _stated_licence(binary) or (known[1] if known else None)
    name = known[0] if known else package
    identifiers = identifiers + ((f"SONAME {binary.elf.soname}",) if binary.elf and binary.elf.soname else ())
    return Match(
        binary.path, obligation(licence), None, name, version, licence,
        "soname" if known else "none", 0, identifiers,
    )  # fmt: skip


def _stated_licence(binary: Binary) -> str | None:
    if binary.modinfo is not None and binary.modinfo.get("license"):
        return binary.modinfo["license"]
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class KernelCheck:
    """The kernel of the image against the drop's kernel component."""

    version: str | None
    arch: str | None
    drop_version: str | None
    version_mismatch: bool
    config_arch: str | None
    config_arch_mismatch: bool
    modules_other_release: tuple[str, ...]  # modules whose vermagic names another release
    option_differences: dict[str, tuple[str | None, str | None]]  # option -> (image, drop)


def config_arch(config: Mapping[str, str]) -> str | None:
    """The architecture a kernel .config selects (CONFIG_MIPS=y -> mips); 64-bit x86 is x86."""
    for symbol, arch in CONFIG_ARCH.items():
        if config.get(symbol) == "y":
            return arch
    return None


def check_kernel(
    kernel: Kernel | None, arch: str | None, modules: Iterable[Binary], drop_version: str | None,
    drop_config: Mapping[str, str] | None,
) -> KernelCheck:  # fmt: skip
    """Version against the drop's Makefile, architecture against its .config, modules against the release,
    and option by option when the image carries its configuration (IKCONFIG)."""
    release = kernel.release if kernel else None
    other = tuple(
        m.path
        for m in modules
        if m.modinfo is not None
        and release is not None
        and m.modinfo.get("vermagic", "").split()[:1] != [release]
    )
    selected = config_arch(drop_config) if drop_config else None
    differences: dict[str, tuple[str | None, str | None]] = {}
    if kernel is not None and kernel.config is not None and drop_config is not None:
        for option in sorted(set(kernel.config) | set(drop_config)):
            ours, theirs = kernel.config.get(option, "n"), drop_config.get(option, "n")
            if ours != theirs:
                differences[option] = (kernel.config.get(option), drop_config.get(option))
    version = kernel.version if kernel else None
    return KernelCheck(
        version=version,
        arch=arch,
        drop_version=drop_version,
        version_mismatch=bool(version and drop_version and version != drop_version),
        config_arch=selected,
        config_arch_mismatch=bool(selected and arch and selected != arch),
        modules_other_release=other,
        option_differences=differences,
    )


def applet_symbol(applet: str) -> str:
    """BusyBox's config symbol of an applet: ``[`` and ``[[`` are TEST1/TEST2, others upper-cased."""
    return {"[": "CONFIG_TEST1", "[[": "CONFIG_TEST2"}.get(
        applet, "CONFIG_" + applet.upper().replace("-", "_")
    )


def check_applets(applets: Iterable[str], config: Mapping[str, str]) -> list[str]:
    """Applets the binary has that the drop's BusyBox .config leaves out (``# CONFIG_X is not set``):
    that binary was not built from that configuration. A symbol the config does not name is not told
    (it may be an applet of another release); the other direction needs BusyBox's Config.in to tell
    applets from options, and is not drawn."""
    return sorted(a for a in applets if config.get(applet_symbol(a), "y") != "y")


def verdict(matches: Iterable[Match], kernel: KernelCheck | None) -> str:
    """``complete`` when every binary with an obligation corresponds; ``wrong`` when one states another
    version than the drop or the kernel's config is for another architecture; else ``incomplete``."""
    statuses = {m.status for m in matches}
    if "wrong-version" in statuses or (
        kernel is not None and (kernel.config_arch_mismatch or kernel.version_mismatch)
    ):
        return "wrong"
    if "source-missing" in statuses:
        return "incomplete"
    return "complete"


def match_all(
    inventory: Inventory, strings: Mapping[str, frozenset[str]], sources: list[Source]
) -> list[Match]:
    """Every binary of the inventory matched; ``strings`` by binary path."""
    unique = distinctive(sources)
    return [match_binary(b, strings.get(b.path, frozenset()), sources, unique) for b in inventory.binaries]

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
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import chain

from dropscan.firmware.inventory import Binary, Inventory, Kernel
from dropscan.firmware.literals import LITERAL_MIN, binary_parts, c_literals, code_literals
from dropscan.models import version_key

__all__ = ["LITERAL_MIN", "binary_parts", "c_literals", "code_literals"]

# a component is the binary's when this many of its distinctive literals are there and they are this
# share of the binary's strings (a C library shares dozens of a BusyBox's messages, a small share of
# its own: docs/firmware.md has the figures)
MATCH_MIN = 10
MATCH_SHARE = 0.10
# an upstream release recorded at ingest names a binary when this many of its literals, held by no
# other package's release, are in the binary and they are this share of what the release recorded
# (busybox holds 365 of BusyBox 1.35.0's 2,000, glibc 1: docs/firmware.md)
UPSTREAM_MIN = 10
UPSTREAM_SHARE = 0.05
# a source file is not in a binary when at least this many of its distinctive literals are all absent
ABSENT_MIN = 2
GLIBC_VERSION = re.compile(r"GNU C Library \([^)]*\) (?:stable )?release version (\d+\.\d+(?:\.\d+)?)")
# what a binary states of itself, by package: identifiers the inventory reads
STATED_PACKAGES = ("busybox", "linux", "u-boot")
# the one folder of a kernel tree whose sources are built into programs (perf, usbip, bpftool)
KERNEL_USERLAND = "tools/"
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
    files: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)  # path -> its literals
    kbuild: Mapping[str, str] = dataclasses.field(default_factory=dict)  # module name -> CONFIG_ option


@dataclasses.dataclass(frozen=True, slots=True)
class Match:
    """One binary's answer."""

    path: str
    status: str
    component: str | None  # the prefix of the drop's component
    package: str | None
    version: str | None  # as the binary states it
    license: str | None
    by: str  # "identifier" | "literals" | "upstream-literals" | "soname" | "gconv" | "none"
    literals: int = 0  # distinctive literals of the component found in the binary
    identifiers: tuple[str, ...] = ()


def distinctive(sources: Iterable[Source]) -> dict[str, frozenset[str]]:
    """Each component's literals that no other component of the drop has (by prefix)."""
    sources = list(sources)
    seen = Counter(chain.from_iterable(s.literals for s in sources))  # counted in C: a kernel has 760,000
    return {s.prefix: frozenset(lit for lit in s.literals if seen[lit] == 1) for s in sources}


def userland_distinctive(
    sources: Iterable[Source], unique: Mapping[str, frozenset[str]]
) -> dict[str, frozenset[str]]:
    """``unique`` as it may claim a program or library (an ELF that is no kernel or module): a kernel
    tree builds only its ``tools/`` into userland, and the rest shares option names and messages with
    the userland that talks to it (iptables' extensions, zlib, gconv: docs/firmware.md)."""
    found = dict(unique)
    for source in sources:
        if source.package == "linux" and source.prefix in unique:
            tools = f"{source.prefix}/{KERNEL_USERLAND}"
            held = (lits for path, lits in source.files.items() if path.startswith(tools))
            found[source.prefix] = unique[source.prefix] & frozenset(chain.from_iterable(held))
    return found


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
    if is_gconv(binary):
        return "glibc", "LGPL-2.1-or-later"
    names = [binary.path.rsplit("/", 1)[-1]]
    if binary.elf is not None and binary.elf.soname:
        names.insert(0, binary.elf.soname)
    for name in names:
        for pattern, package, licence in IDENTIFIED:
            if pattern.search(name):
                return package, licence
    return None


def is_gconv(binary: Binary) -> bool:
    """A glibc gconv module: a shared object in a ``gconv/`` folder that needs ``libc.so.6``. No other
    project installs there: iconv(3) of glibc loads them by the ``gconv-modules`` list beside them, and
    they are built only in glibc's ``iconvdata/``, with the libc they need; the few with a SONAME
    (``libJIS.so``, ``libGB.so``) are the tables the others share (docs/firmware.md)."""
    folder = binary.path.rsplit("/", 2)
    return (
        len(folder) == 3
        and folder[1] == "gconv"
        and folder[2].endswith(".so")
        and binary.elf is not None
        and binary.elf.type == "DYN"
        and "libc.so.6" in binary.elf.needed
    )


def glibc_version(strings: Iterable[str]) -> str | None:
    """The version a glibc ``libc.so.6`` states ("GNU C Library (Debian GLIBC 2.36-9) stable release
    version 2.36.")."""
    for string in strings:
        found = GLIBC_VERSION.search(string)
        if found:
            return found.group(1)
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
    binary: Binary,
    strings: frozenset[str],
    sources: list[Source],
    unique: Mapping[str, frozenset[str]],
    glibc: str | None = None,
    userland: Mapping[str, frozenset[str]] | None = None,
) -> Match:
    """The binary's component and status; ``strings`` are its printable strings, ``glibc`` the version
    the image's libc.so.6 states (its libraries and gconv modules are that glibc's), ``userland`` the
    literals that may claim a program (``userland_distinctive``; default ``unique``)."""
    package, version, identifiers = stated(binary)
    component: Source | None = None
    by, literals = "none", 0
    if package is not None:
        component = next((s for s in sources if s.package == package), None)
        by = "identifier" if component is not None else by
    if component is None:
        claiming = userland if userland is not None and binary.kind == "elf" else unique
        scores = {prefix: len(lits & strings) for prefix, lits in claiming.items()}
        best = max(scores, key=scores.__getitem__, default=None)
        if best is not None and scores[best] >= max(MATCH_MIN, MATCH_SHARE * len(strings)):
            component = next(s for s in sources if s.prefix == best)
            by, literals = "literals", scores[best]
    elif component.prefix in unique:
        literals = len(unique[component.prefix] & strings)
    known = identified(binary)
    if component is None and known is not None:
        # a library known by its SONAME (a gconv module by its folder) whose project is in the drop
        component = next((s for s in sources if s.package == known[0]), None)
        if component is not None:
            by = "gconv" if is_gconv(binary) else "soname"
            literals = len(unique.get(component.prefix, frozenset()) & strings)
    if component is not None:
        wrong = (
            version is not None
            and component.version is not None
            and not same_version(version, component.version)
        )
        licence = (
            component.license
            or _stated_licence(binary)
            or PACKAGE_LICENCES.get(str(component.package or package))
            or (known[1] if known else None)
        )
        return Match(
            binary.path, "wrong-version" if wrong else "corresponds", component.prefix,
            component.package, version, licence, by, literals, identifiers,
        )  # fmt: skip
    licence = _stated_licence(binary) or (known[1] if known else None)
    name = known[0] if known else package
    identifiers = identifiers + ((f"SONAME {binary.elf.soname}",) if binary.elf and binary.elf.soname else ())
    by = ("gconv" if is_gconv(binary) else "soname") if known else "none"
    if name == "glibc" and glibc is not None:
        version = version or glibc
        identifiers += (f"GNU C Library release version {glibc} (libc.so.6)",)
    if by == "gconv":
        identifiers += ("gconv module, NEEDED libc.so.6",)
    return Match(binary.path, obligation(licence), None, name, version, licence, by, 0, identifiers)


@dataclasses.dataclass(frozen=True, slots=True)
class UpstreamHit:
    """The upstream release whose recorded literals a binary holds most of."""

    package: str
    version: str
    literals: int  # its literals in the binary that no other package's release has
    tied: tuple[str, ...] = ()  # other versions of the package with as many


def upstream_candidate(strings: Iterable[str], holding: Mapping[str, Iterable[str]]) -> UpstreamHit | None:
    """BAT's ranking against the upstream database: ``holding`` says which releases
    (``package@version``) recorded each literal; a literal counts only when all its releases are of one
    package; the release with most of the binary's literals wins (a tie: the highest version)."""
    counts: dict[str, int] = {}
    for string in set(strings):
        releases = set(holding.get(string, ()))
        if releases and len({r.rpartition("@")[0] for r in releases}) == 1:
            for release in releases:
                counts[release] = counts.get(release, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    top = sorted((r for r, n in counts.items() if n == best), key=lambda r: version_key(r.rpartition("@")[2]))
    package, _, version = top[-1].rpartition("@")
    return UpstreamHit(package, version, best, tuple(r.rpartition("@")[2] for r in top[:-1]))


def upstream_accepts(hit: UpstreamHit, recorded: int) -> bool:
    """Whether the release's literals in the binary are enough to name it (``UPSTREAM_MIN``, and
    ``UPSTREAM_SHARE`` of the ``recorded`` ones: a C library shares a few messages with everything)."""
    return hit.literals >= max(UPSTREAM_MIN, UPSTREAM_SHARE * recorded)


def named_upstream(match: Match, hit: UpstreamHit, licence: str | None) -> Match:
    """A binary no component of the drop explains, named by the upstream release it holds the literals
    of: that package, the version it states (else the release's), the release's licence."""
    licence = licence or match.license
    tied = (f"as many literals of {hit.package}@{v}" for v in hit.tied)
    identifiers = (*match.identifiers, f"upstream {hit.package}@{hit.version}", *tied)
    return dataclasses.replace(
        match,
        status=obligation(licence),
        package=hit.package,
        version=match.version or hit.version,
        license=licence,
        by="upstream-literals",
        literals=hit.literals,
        identifiers=identifiers,
    )


def file_distinctive(sources: Iterable[Source]) -> dict[str, dict[str, frozenset[str]]]:
    """Each source file's literals that no other file of the drop has: prefix -> path -> literals."""
    sources = list(sources)
    seen = Counter(chain.from_iterable(lits for s in sources for lits in s.files.values()))
    return {
        s.prefix: {path: frozenset(lit for lit in lits if seen[lit] == 1) for path, lits in s.files.items()}
        for s in sources
    }


def in_binary(literals: frozenset[str], strings: frozenset[str]) -> bool | None:
    """Whether a source file is in a binary, from its distinctive literals: one of them in the binary's
    strings says it is, ``ABSENT_MIN`` or more all absent say it is not; fewer tell nothing (None)."""
    if literals & strings:
        return True
    return False if len(literals) >= ABSENT_MIN else None


def files_in_binary(files: Mapping[str, frozenset[str]], strings: frozenset[str]) -> dict[str, bool | None]:
    """``in_binary`` of each file of a component matched to binaries whose strings are ``strings``."""
    return {path: in_binary(lits, strings) for path, lits in sorted(files.items())}


def mark_unshipped(
    flags: Iterable[Mapping[str, object]], shipped: Mapping[str, bool | None]
) -> list[dict[str, object]]:
    """The manifest's red flags with ``shipped: false`` on those in files no shipped binary contains
    (``shipped``: path -> in_binary), moved below the others, each group in its order."""
    marked = [dict(f) for f in flags]
    for flag in marked:
        if shipped.get(str(flag.get("path") or "")) is False:
            flag["shipped"] = False
    return sorted(marked, key=lambda f: f.get("shipped") is False)


# MODULE_LICENSE() strings as the kernel's license-rules.rst defines them, in SPDX
MODULE_LICENCES = {
    "GPL": "GPL-2.0-only",
    "GPL v2": "GPL-2.0-only",
    "GPL and additional rights": "GPL-2.0-only",
    "Dual BSD/GPL": "BSD-3-Clause OR GPL-2.0-only",
    "Dual MIT/GPL": "MIT OR GPL-2.0-only",
    "Dual MPL/GPL": "MPL-1.1 OR GPL-2.0-only",
    "Proprietary": "LicenseRef-proprietary",
}
# what a binary of these packages is under when the drop's component says nothing (an unidentified
# kernel tree: its COPYING is not what the binary was built from, so the project's rule is used)
PACKAGE_LICENCES = {"linux": "GPL-2.0-only", "busybox": "GPL-2.0-only", "u-boot": "GPL-2.0-or-later"}


def _stated_licence(binary: Binary) -> str | None:
    """A module's MODULE_LICENSE in SPDX (an unknown string as the module states it); a module built of
    several objects states one per object, one per line: all of them hold (AND)."""
    if binary.modinfo is not None and binary.modinfo.get("license"):
        stated = dict.fromkeys(MODULE_LICENCES.get(s, s) for s in binary.modinfo["license"].splitlines() if s)
        if len(stated) == 1:
            return next(iter(stated))
        return " AND ".join(f"({s})" if " OR " in s else s for s in stated) or None
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
    # option -> (image, drop, source): source "ikconfig" (built in) or "modules" (implied by the
    # modules shipped and modules.builtin, through the drop's Kbuild Makefiles)
    option_differences: dict[str, tuple[str | None, str | None, str]]
    config_source: str | None = None  # "ikconfig" | "modules" | None: what the image's side came from
    implied_options: int = 0  # options the modules and built-ins imply


def config_arch(config: Mapping[str, str]) -> str | None:
    """The architecture a kernel .config selects (CONFIG_MIPS=y -> mips); 64-bit x86 is x86."""
    for symbol, arch in CONFIG_ARCH.items():
        if config.get(symbol) == "y":
            return arch
    return None


MODULE_PATH = re.compile(r"/lib/modules/[^/]+/kernel/(.+)\.ko(?:\.(?:xz|gz|zst))?$")


def module_object(path: str) -> str | None:
    """``…/lib/modules/6.1.0/kernel/drivers/usb/storage/uas.ko`` -> ``drivers/usb/storage/uas``: the
    object Kbuild built it from, by its path in the source tree."""
    found = MODULE_PATH.search("/" + path.split("!")[-1].lstrip("/"))
    return found.group(1) if found else None


def implied_config(
    modules: Iterable[str], builtin: Iterable[str], kbuild: Mapping[str, str]
) -> dict[str, str]:
    """The options the image's kernel must have been built with: each shipped module's object (its path
    in the tree, ``module_object``) is ``obj-$(CONFIG_X) += x.o`` in its folder's Makefile (``kbuild``:
    object -> option), so CONFIG_X=m; each line of ``modules.builtin`` (``kernel/fs/binfmt_elf.ko``)
    likewise =y. Objects no Makefile of the drop names imply nothing."""
    implied: dict[str, str] = {}
    for obj in modules:
        if obj in kbuild:
            implied.setdefault(kbuild[obj], "m")
    for line in builtin:
        name = line.strip()
        built = name.removeprefix("kernel/").removesuffix(".ko") if name.endswith(".ko") else None
        if built and built in kbuild:
            implied[kbuild[built]] = "y"
    return implied


def check_kernel(
    kernel: Kernel | None, arch: str | None, modules: Iterable[Binary], drop_version: str | None,
    drop_config: Mapping[str, str] | None, implied: Mapping[str, str] | None = None,
) -> KernelCheck:  # fmt: skip
    """Version against the drop's Makefile, architecture against its .config, modules against the release,
    and option by option: against the image's configuration (IKCONFIG) when built in, else against what
    its modules and built-ins imply (``implied``: ``implied_config``)."""
    release = kernel.release if kernel else None
    other = tuple(
        m.path
        for m in modules
        if m.modinfo is not None
        and release is not None
        and m.modinfo.get("vermagic", "").split()[:1] != [release]
    )
    selected = config_arch(drop_config) if drop_config else None
    differences: dict[str, tuple[str | None, str | None, str]] = {}
    source = None
    if kernel is not None and kernel.config is not None and drop_config is not None:
        source = "ikconfig"
        for option in sorted(set(kernel.config) | set(drop_config)):
            ours, theirs = kernel.config.get(option, "n"), drop_config.get(option, "n")
            if ours != theirs:
                differences[option] = (kernel.config.get(option), drop_config.get(option), source)
    elif implied and drop_config is not None:
        source = "modules"
        for option, value in sorted(implied.items()):
            if drop_config.get(option, "n") != value:
                differences[option] = (value, drop_config.get(option), source)
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
        config_source=source,
        implied_options=len(implied or {}),
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
    userland = userland_distinctive(sources, unique)
    libc = next((b.path for b in inventory.binaries if b.elf and b.elf.soname == "libc.so.6"), None)
    glibc = glibc_version(strings.get(libc, ())) if libc else None
    return [
        match_binary(b, strings.get(b.path, frozenset()), sources, unique, glibc, userland)
        for b in inventory.binaries
    ]

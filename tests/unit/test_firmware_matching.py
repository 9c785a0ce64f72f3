"""Matching rules (dropscan.firmware.matching, pure): distinctive literals, statuses, kernel and BusyBox
checks, the verdict."""

from __future__ import annotations

import dataclasses
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dropscan.firmware import literals, matching
from dropscan.firmware.inventory import Binary, Elf, Inventory, Kernel
from dropscan.firmware.sources import _package_of, kbuild_objects, makefile_version


def _elf(soname: str | None = None, rel: bool = False) -> Elf:
    return Elf("EM_MIPS", "mips", 32, "little", "REL" if rel else "DYN", None, None, (), soname, ())


def _binary(path: str, **kw: object) -> Binary:
    fields: dict[str, object] = {"path": path, "size": 1, "sha256": "0" * 64, "kind": "elf", "elf": _elf()}
    fields.update(kw)
    return Binary(**fields)  # type: ignore[arg-type]


def _source(
    prefix: str, package: str | None, version: str | None, literals: frozenset[str] = frozenset()
) -> matching.Source:
    return matching.Source(prefix, package, version, "GPL-2.0-only", literals)


def test_c_literals_are_split_at_format_directives_and_short_parts_dropped() -> None:
    text = r'printf("usage: tool [OPTIONS] FILE\n"); err("%s: cannot open %s: %m"); s = "tiny";'
    assert matching.c_literals(text) == {"usage: tool [OPTIONS] FILE", ": cannot open "}


def test_literals_are_cut_where_a_binary_cuts_its_strings_and_never_span_two() -> None:
    # BusyBox's long-option tables (coreutils/env.c): NUL-separated names between macro expansions; a
    # colour escape before a message; a quote character constant
    text = (
        'static const char opts[] = "ignore-environment\\0" No_argument       "i"\n'
        '\t"unset\\0"              Required_argument "u";\n'
        'char q = \'"\'; puts("\\033[1mwarning: disk nearly full");'
    )
    assert literals.code_literals(text) == {"ignore-environment", "[1mwarning: disk nearly full"}


def test_only_literals_of_one_component_are_distinctive() -> None:
    a = _source("a-1.0", "a", "1.0", frozenset({"shared message here", "only in a, long enough"}))
    b = _source("b-2.0", "b", "2.0", frozenset({"shared message here", "only in b, long enough"}))
    assert matching.distinctive([a, b]) == {
        "a-1.0": frozenset({"only in a, long enough"}),
        "b-2.0": frozenset({"only in b, long enough"}),
    }


def test_a_binary_stating_nothing_goes_to_the_component_whose_literals_it_holds() -> None:
    mine = frozenset(f"distinctive literal number {i}" for i in range(16))
    other = frozenset(f"another component's literal {i}" for i in range(16))
    sources = [_source("vendor-shell", None, None, mine), _source("tools-1.0", "tools", "1.0", other)]
    unique = matching.distinctive(sources)
    strings = frozenset([*sorted(mine)[:12], "common text"])
    m = matching.match_binary(_binary("/usr/bin/prog"), strings, sources, unique)
    assert (m.status, m.component, m.by, m.literals) == ("corresponds", "vendor-shell", "literals", 12)
    few = frozenset(sorted(mine)[: matching.MATCH_MIN - 1])
    assert matching.match_binary(_binary("/usr/bin/prog"), few, sources, unique).component is None
    # enough of them, but a small share of a large binary's strings: shared messages, not its source
    big = strings | {f"its own string {i}" for i in range(200)}
    assert matching.match_binary(_binary("/lib/libc.so.6"), big, sources, unique).component is None


def test_a_kernel_tree_claims_a_program_only_by_the_literals_of_its_tools() -> None:
    # a kernel drop alone: each of its literals is distinctive within the drop, and iptables' extensions
    # or zlib share option names and messages with it; only tools/ is built into programs
    net = frozenset(f"conntrack option message {i}" for i in range(16))
    usbip = frozenset(f"usbip: attach failed {i}" for i in range(16))
    files = {"linux-6.1/net/netfilter/xt_conntrack.c": net, "linux-6.1/tools/usb/usbip/usbip.c": usbip}
    linux = dataclasses.replace(_source("linux-6.1", "linux", "6.1.176", net | usbip), files=files)
    found = Inventory(
        [
            _binary("/usr/lib/xtables/libxt_conntrack.so"),
            _binary("/usr/sbin/usbip"),
            _binary("/lib/modules/6.1/xt_foo.ko", kind="module", elf=_elf(rel=True)),
        ],
        None,
        None,
        "mips",
        None,
    )
    strings = {
        "/usr/lib/xtables/libxt_conntrack.so": net,
        "/usr/sbin/usbip": usbip,
        "/lib/modules/6.1/xt_foo.ko": net,
    }
    by_path = {m.path: m for m in matching.match_all(found, strings, [linux])}
    assert by_path["/usr/lib/xtables/libxt_conntrack.so"].component is None
    assert (by_path["/usr/sbin/usbip"].component, by_path["/usr/sbin/usbip"].literals) == ("linux-6.1", 16)
    assert (by_path["/lib/modules/6.1/xt_foo.ko"].component, by_path["/lib/modules/6.1/xt_foo.ko"].by) == (
        "linux-6.1",
        "literals",
    )


def test_a_stated_version_other_than_the_components_is_wrong_version() -> None:
    sources = [_source("busybox-1.30.1", "busybox", "1.30.1")]
    m = matching.match_binary(_binary("/bin/busybox", busybox="1.35.0"), frozenset(), sources, {})
    assert (m.status, m.component, m.version, m.by) == (
        "wrong-version",
        "busybox-1.30.1",
        "1.35.0",
        "identifier",
    )
    right = [_source("busybox-1.35.0", "busybox", "1.35.0")]
    assert matching.match_binary(
        _binary("/bin/busybox", busybox="1.35.0"), frozenset(), right, {}
    ).status == ("corresponds")


def test_a_binary_of_a_component_whose_licence_is_not_known_takes_its_own_or_its_projects() -> None:
    # an unidentified kernel tree (only its Makefile and .config): no licence recorded for it
    tree = [dataclasses.replace(_source("linux-6.1.176/", "linux", "6.1.176"), license=None)]
    module = _binary("/lib/modules/x.ko", kind="module", elf=_elf(rel=True), modinfo={"license": "GPL v2"})
    kernel = _binary(
        "/boot/vmlinux", kind="kernel", elf=None, kernel=Kernel("6.1.0", "6.1.176", "b", "gcc", "#1", None)
    )
    by_module = matching.match_binary(module, frozenset(), tree, {})
    assert (by_module.status, by_module.license) == ("corresponds", "GPL-2.0-only")  # its MODULE_LICENSE
    got = matching.match_binary(kernel, frozenset(), tree, {})
    assert (got.status, got.component, got.license) == ("corresponds", "linux-6.1.176/", "GPL-2.0-only")


def test_binaries_without_source_are_named_and_judged_by_their_licence() -> None:
    def status(binary: Binary) -> tuple[str, str | None, str | None]:
        m = matching.match_binary(binary, frozenset(), [], {})
        return m.status, m.package, m.license

    assert status(_binary("/lib/libc.so.6", elf=_elf("libc.so.6"))) == (
        "source-missing", "glibc", "LGPL-2.1-or-later",
    )  # fmt: skip
    assert status(_binary("/usr/sbin/xtables-legacy-multi"))[:2] == ("source-missing", "iptables")
    assert status(_binary("/usr/sbin/dropbear")) == ("no-obligation", "dropbear", "MIT")
    assert status(_binary("/lib/libgcc_s.so.1", elf=_elf("libgcc_s.so.1")))[0] == "no-obligation"
    module = _binary(
        "/lib/modules/x.ko",
        kind="module",
        elf=_elf(rel=True),
        modinfo={"license": "GPL", "vermagic": "6.1.0 SMP"},
    )
    assert status(module) == ("source-missing", "linux", "GPL-2.0-only")  # MODULE_LICENSE("GPL"), in SPDX
    dual = _binary(
        "/lib/modules/y.ko", kind="module", elf=_elf(rel=True), modinfo={"license": "Dual BSD/GPL"}
    )
    assert status(dual)[2] == "BSD-3-Clause OR GPL-2.0-only"
    assert status(_binary("/usr/bin/mystery")) == ("unknown", None, None)


def test_kernel_checks_version_architecture_and_modules() -> None:
    kernel = Kernel("6.1.0-50-4kc-malta", "6.1.176", "b", "gcc", "#1 SMP Debian 6.1.176-1", None)
    ok = _binary("/m/a.ko", kind="module", modinfo={"vermagic": "6.1.0-50-4kc-malta SMP mod_unload"})
    stray = _binary("/m/b.ko", kind="module", modinfo={"vermagic": "5.10.0-9-4kc-malta SMP"})
    check = matching.check_kernel(
        kernel, "mips", [ok, stray], "6.1.176", {"CONFIG_ARM": "y", "CONFIG_MIPS": "n"}
    )
    assert (check.config_arch, check.config_arch_mismatch, check.version_mismatch) == ("arm", True, False)
    assert check.modules_other_release == ("/m/b.ko",)
    right = matching.check_kernel(kernel, "mips", [ok], "6.1.170", {"CONFIG_MIPS": "y"})
    assert (right.config_arch_mismatch, right.version_mismatch) == (False, True)


def test_the_kernel_configuration_is_compared_option_by_option_when_built_in() -> None:
    config = {"CONFIG_MIPS": "y", "CONFIG_NETFILTER": "y", "CONFIG_USB": "m"}
    kernel = Kernel("6.1.176", "6.1.176", "b", "gcc", "#1", config)
    drop = {"CONFIG_MIPS": "y", "CONFIG_NETFILTER": "n", "CONFIG_USB": "m", "CONFIG_SOUND": "y"}
    check = matching.check_kernel(kernel, "mips", [], "6.1.176", drop)
    assert check.option_differences == {
        "CONFIG_NETFILTER": ("y", "n", "ikconfig"),
        "CONFIG_SOUND": (None, "y", "ikconfig"),
    }
    assert check.config_source == "ikconfig"


def test_applets_the_busybox_config_leaves_out_are_named() -> None:
    config = {"CONFIG_HTTPD": "n", "CONFIG_LS": "y", "CONFIG_TEST1": "y"}
    assert matching.check_applets(["[", "ls", "httpd", "ntpd"], config) == ["httpd"]


def test_the_verdict_of_the_pair() -> None:
    def m(status: str) -> matching.Match:
        return matching.Match("/x", status, None, None, None, None, "none")

    assert matching.verdict([m("corresponds"), m("no-obligation"), m("unknown")], None) == "complete"
    assert matching.verdict([m("corresponds"), m("source-missing")], None) == "incomplete"
    assert matching.verdict([m("wrong-version"), m("source-missing")], None) == "wrong"


def test_makefile_versions_and_folder_names() -> None:
    assert makefile_version("VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 176\nEXTRAVERSION =\n") == "6.1.176"
    assert makefile_version("# nothing\n") is None
    assert _package_of("linux-6.1.176") == "linux"
    assert _package_of("busybox-1.35.0/") == "busybox"
    assert _package_of("vendor") is None


# ------------------------------------------------------------------ issue 35, round 2
def test_literals_in_comments_are_not_code_and_a_release_records_its_longest() -> None:
    text = (
        '//usage:#define ls_trivial_usage "[-1AaCxd] [FILE]..."\n'
        '/* "in a block comment" */\nputs("real message here");\n'
    )
    assert literals.code_literals(text) == {"real message here"}
    chosen = literals.release_literals([f"literal {'x' * n}" for n in range(10)] + ["y" * 300], limit=3)
    assert chosen == ["literal xxxxxxxxx", "literal xxxxxxxx", "literal xxxxxxx"]  # the 300 is a table


def test_an_upstream_release_is_ranked_by_literals_no_other_package_has() -> None:
    holding = {
        **{f"busybox message {i}": ["busybox@1.35.0", "busybox@1.36.1"] for i in range(12)},
        "only in the newer one": ["busybox@1.36.1"],
        "only in the older one": ["busybox@1.35.0"],
        "shared with another package": ["busybox@1.35.0", "toybox@0.8.9"],
    }
    strings = [*holding, "not recorded anywhere"]
    hit = matching.upstream_candidate(strings, holding)
    assert hit == matching.UpstreamHit("busybox", "1.36.1", 13, ("1.35.0",))
    assert matching.upstream_accepts(hit, 200) and not matching.upstream_accepts(hit, 2000)
    few = matching.upstream_candidate(sorted(holding)[:5], holding)
    assert few is not None and not matching.upstream_accepts(few, 5)
    assert matching.upstream_candidate(["shared with another package"], holding) is None


def test_a_match_named_from_upstream_takes_the_releases_licence_and_says_so() -> None:
    m = matching.match_binary(_binary("/usr/bin/tool"), frozenset(), [], {})
    named = matching.named_upstream(m, matching.UpstreamHit("busybox", "1.35.0", 40), "GPL-2.0-only")
    assert (named.status, named.package, named.version, named.license, named.by, named.literals) == (
        "source-missing", "busybox", "1.35.0", "GPL-2.0-only", "upstream-literals", 40,
    )  # fmt: skip
    assert "upstream busybox@1.35.0" in named.identifiers


def test_gconv_modules_are_glibcs_and_take_the_version_libc_states() -> None:
    gconv = _binary(
        "/usr/lib/mipsel-linux-gnu/gconv/ISO8859-1.so",
        elf=Elf("EM_MIPS", "mips", 32, "little", "DYN", None, None, ("libc.so.6",), None, ()),
    )
    m = matching.match_binary(gconv, frozenset(), [], {}, glibc="2.36")
    assert (m.status, m.package, m.version, m.license, m.by) == (
        "source-missing", "glibc", "2.36", "LGPL-2.1-or-later", "gconv",
    )  # fmt: skip
    # the same name outside gconv/, or without libc.so.6, is not told
    assert not matching.is_gconv(dataclasses.replace(gconv, path="/usr/lib/plugins/ISO8859-1.so"))
    assert not matching.is_gconv(dataclasses.replace(gconv, elf=_elf()))
    banner = "GNU C Library (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36."
    assert matching.glibc_version(["x", banner]) == "2.36"


def test_which_source_files_are_in_the_binary() -> None:
    a = matching.Source(
        "busybox-1.35.0", "busybox", "1.35.0", None,
        files={
            "busybox-1.35.0/coreutils/ls.c": frozenset({"ls message one", "shared in two files"}),
            "busybox-1.35.0/networking/httpd.c": frozenset({"httpd message one", "httpd message two"}),
            "busybox-1.35.0/libbb/one.c": frozenset({"shared in two files"}),
            "busybox-1.35.0/libbb/tiny.c": frozenset({"a single literal"}),
        },
    )  # fmt: skip
    unique = matching.file_distinctive([a])["busybox-1.35.0"]
    assert unique["busybox-1.35.0/libbb/one.c"] == frozenset()  # its one literal is in ls.c too
    told = matching.files_in_binary(unique, frozenset({"ls message one", "shared in two files"}))
    assert told == {
        "busybox-1.35.0/coreutils/ls.c": True,
        "busybox-1.35.0/libbb/one.c": None,
        "busybox-1.35.0/libbb/tiny.c": None,  # one absent literal says nothing
        "busybox-1.35.0/networking/httpd.c": False,
    }


def test_flags_in_files_no_binary_contains_are_marked_and_ranked_below() -> None:
    flags = [
        {"severity": "action", "path": "b/unused.c", "kind": "restriction"},
        {"severity": "action", "path": "b/used.c", "kind": "restriction"},
        {"severity": "review", "path": "b/other.c", "kind": "licence"},
    ]
    marked = matching.mark_unshipped(flags, {"b/unused.c": False, "b/used.c": True})
    assert [f["path"] for f in marked] == ["b/used.c", "b/other.c", "b/unused.c"]
    assert marked[-1]["shipped"] is False and "shipped" not in marked[0]


def test_the_kernel_configuration_implied_by_modules_and_built_ins() -> None:
    kbuild = kbuild_objects(
        "drivers/usb/storage",
        "obj-$(CONFIG_USB_UAS)\t\t+= uas.o\nobj-$(CONFIG_USB_STORAGE)\t+= usb-storage.o \\\n\tother.o\n"
        "usb-storage-y := scsiglue.o\nobj-y += sub/\n",
    ) | kbuild_objects("fs", "obj-$(CONFIG_BINFMT_ELF) += binfmt_elf.o # ELF\n")
    assert kbuild == {
        "drivers/usb/storage/uas": "CONFIG_USB_UAS",
        "drivers/usb/storage/usb-storage": "CONFIG_USB_STORAGE",
        "drivers/usb/storage/other": "CONFIG_USB_STORAGE",
        "fs/binfmt_elf": "CONFIG_BINFMT_ELF",
    }
    path = "router.bin@0x0:squashfs!/lib/modules/6.1.0/kernel/drivers/usb/storage/uas.ko"
    assert matching.module_object(path) == "drivers/usb/storage/uas"
    implied = matching.implied_config(
        ["drivers/usb/storage/uas", "drivers/net/unknown"], ["kernel/fs/binfmt_elf.ko"], kbuild
    )
    assert implied == {"CONFIG_USB_UAS": "m", "CONFIG_BINFMT_ELF": "y"}
    drop = {"CONFIG_MIPS": "y", "CONFIG_USB_UAS": "y", "CONFIG_BINFMT_ELF": "y"}
    check = matching.check_kernel(None, "mips", [], None, drop, implied)
    assert check.option_differences == {"CONFIG_USB_UAS": ("m", "y", "modules")}
    assert (check.config_source, check.implied_options) == ("modules", 2)


# ------------------------------------------------------------------ the kernel drop's speed
# the plain definitions, which the possessive patterns must match exactly: every literal consumed in
# turn (the character constants holding a quote blanked first), printable escapes resolved, any other
# escape cutting the literal
_PLAIN_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_PLAIN_ESCAPE = re.compile(r"\\(?:[0-7]{1,3}|x[0-9a-fA-F]+|.)", re.S)
_PLAIN_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _plain_code_literals(text: str) -> set[str]:
    found: set[str] = set()
    code = _PLAIN_COMMENT.sub(" ", text).replace("'\"'", "   ").replace("'\\\"'", "    ")
    for match in _PLAIN_LITERAL.finditer(code):
        literal = _PLAIN_ESCAPE.sub(lambda m: literals.ESCAPES.get(m.group(), "\n"), match.group(1) or "")
        found.update(literals.parts(literal))
    return found


C_PIECES = (
    '"',
    "\\",
    "\n",
    "\t",
    "/*",
    "*/",
    "//",
    "*",
    "/",
    "%d",
    "%-8s",
    "ab",
    "abcdefgh",
    " ",
    '\\"',
    "\\n",
    "'",
    "\\0",
    "\\033",
    "\\x1b",
)
C_LIKE = st.lists(st.sampled_from(C_PIECES), max_size=60).map("".join)


@settings(max_examples=3000, deadline=None)
@given(C_LIKE)
def test_code_literals_are_those_of_the_plain_patterns(text: str) -> None:
    """Quotes, escapes, character constants, unclosed and nested-looking comments, short literals
    beside long ones: the possessive patterns find exactly what the plain ones do."""
    assert literals.code_literals(text) == _plain_code_literals(text)
    assert literals.COMMENT.sub(" ", text) == _PLAIN_COMMENT.sub(" ", text)

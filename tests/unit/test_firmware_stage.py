"""The firmware stage (dropscan.stages.firmware_check) on the router image built from Debian's mipsel
binaries, against drops made of BusyBox 1.35.0's real release (the acceptance data) and the kernel's
Makefile and Debian's own .config for that kernel: a right drop, the wrong BusyBox release, no iptables
source, a .config for another architecture, a renamed BusyBox folder found by its literals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dropscan.audit.flags import term_flags
from dropscan.local.embedded import EmbeddedStack
from dropscan.stages.firmware_check import attach, firmware_section
from dropscan.store.services import current_services

from helpers.builders import busybox_orig
from helpers.firmware_drops import UNUSED, UNUSED_TEXT, mips_kernel_config
from helpers.firmware_drops import firmware_drop as _drop
from helpers.firmware_images import firmware_cache
from helpers.firmware_sources import upstream_sources


def _manifest(busybox_prefix: str, busybox_version: str | None) -> dict[str, Any]:
    return {
        "components": [
            {
                "prefix": busybox_prefix,
                "package": "busybox" if busybox_version else None,
                "version": busybox_version,
                "license": "GPL-2.0-only",
            },
            {"prefix": "linux-6.1.176", "package": "linux", "version": "6.1.176", "license": "GPL-2.0-only"},
        ]
    }


@pytest.fixture(scope="module")
def mips_config() -> str:
    return mips_kernel_config()


def _statuses(section: dict[str, Any]) -> dict[str, str]:
    return {b["path"].rsplit("!", 1)[-1]: b["status"] for b in section["binaries"]}


def test_a_drop_without_iptables_and_glibc_is_incomplete(tmp_path: Path, mips_config: str) -> None:
    drop = _drop(tmp_path / "drop.tar.gz", "busybox-1.35.0", mips_config)
    section = firmware_section(
        firmware_cache() / "images" / "router.bin", _manifest("busybox-1.35.0", "1.35.0"), drop
    )
    statuses = _statuses(section)
    assert statuses["/bin/busybox"] == "corresponds"
    assert statuses["/usr/sbin/xtables-legacy-multi"] == "source-missing"
    assert statuses["/lib/mipsel-linux-gnu/libc.so.6"] == "source-missing"
    assert statuses["/usr/sbin/dropbear"] == "no-obligation"
    modules = [b for b in section["binaries"] if b["kind"] == "module"]
    assert modules and {b["status"] for b in modules} == {"corresponds"}
    assert {b["component"] for b in modules} == {"linux-6.1.176"}
    kernel = section["kernel"]
    assert (kernel["version"], kernel["drop_version"], kernel["arch"], kernel["config_arch"]) == (
        "6.1.176", "6.1.176", "mips", "mips",
    )  # fmt: skip
    assert not kernel["config_arch_mismatch"] and kernel["modules_other_release"] == []
    assert section["busybox"]["not_configured"] == ["httpd"]
    assert section["verdict"] == "incomplete"
    assert section["arch"] == "mips" and section["stopped"] is None


def test_against_a_drop_with_their_sources_every_binary_gets_its_right_status(
    tmp_path: Path, mips_config: str
) -> None:
    """The right drop, but for the four netfilter libraries whose bookworm source the archive here lacks
    (helpers.firmware_sources): glibc's libraries and gconv modules and iptables' binaries go to their
    folders in the drop by SONAME or literals, with their projects' licences."""
    drop = _drop(tmp_path / "drop.tar.gz", "busybox-1.35.0", mips_config, upstreams=upstream_sources())
    components = _manifest("busybox-1.35.0", "1.35.0")["components"] + [
        {"prefix": p, "package": None, "version": None, "license": None}
        for p in ("iptables-1.8.9/", "glibc-2.36/", "libxcrypt-4.4.33/")
    ]
    section = firmware_section(firmware_cache() / "images" / "router.bin", {"components": components}, drop)
    by_status: dict[str, set[str]] = {}
    for b in section["binaries"]:
        by_status.setdefault(b["status"], set()).add(str(b["package"]))
    assert by_status == {
        "corresponds": {"busybox", "linux", "iptables", "glibc", "libxcrypt"},
        "no-obligation": {"dropbear", "libgcc", "zlib", "libtomcrypt", "libtommath"},
        "source-missing": {"libmnl", "libnetfilter-conntrack", "libnfnetlink", "libnftnl"},
    }
    libc = next(b for b in section["binaries"] if b["path"].endswith("/libc.so.6"))
    assert (libc["component"], libc["license"], libc["evidence"]["by"]) == (
        "glibc-2.36/", "LGPL-2.1-or-later", "literals",
    )  # fmt: skip
    gconv = [b for b in section["binaries"] if "/gconv/" in b["path"]]
    assert gconv and {b["component"] for b in gconv} == {"glibc-2.36/"}
    assert {b["evidence"]["by"] for b in gconv} <= {"gconv", "literals"}  # by their folder, or glibc's text
    xtables = next(b for b in section["binaries"] if b["path"].endswith("/xtables-legacy-multi"))
    assert (xtables["component"], xtables["license"]) == ("iptables-1.8.9/", "GPL-2.0-or-later")
    assert section["summary"]["statuses"]["source-missing"] == 4


def test_the_wrong_busybox_release_makes_the_source_wrong(tmp_path: Path, mips_config: str) -> None:
    drop = _drop(tmp_path / "drop.tar.gz", "busybox-1.30.1", mips_config)
    section = firmware_section(
        firmware_cache() / "images" / "router.bin", _manifest("busybox-1.30.1", "1.30.1"), drop
    )
    (busybox,) = [b for b in section["binaries"] if b["path"].endswith("!/bin/busybox")]
    assert (busybox["status"], busybox["version"], busybox["component"]) == (
        "wrong-version",
        "1.35.0",
        "busybox-1.30.1",
    )
    assert section["verdict"] == "wrong"


def test_a_kernel_config_for_another_architecture_is_a_mismatch(tmp_path: Path, mips_config: str) -> None:
    arm = mips_config.replace("CONFIG_MIPS=y", "# CONFIG_MIPS is not set") + "CONFIG_ARM=y\n"
    drop = _drop(tmp_path / "drop.tar.gz", "busybox-1.35.0", arm)
    section = firmware_section(
        firmware_cache() / "images" / "router.bin", _manifest("busybox-1.35.0", "1.35.0"), drop
    )
    assert (section["kernel"]["config_arch"], section["kernel"]["config_arch_mismatch"]) == ("arm", True)
    assert section["verdict"] == "wrong"


def test_a_renamed_busybox_folder_is_found_by_its_distinctive_literals(
    tmp_path: Path, mips_config: str
) -> None:
    drop = _drop(tmp_path / "drop.tar.gz", "vendor", mips_config)
    section = firmware_section(firmware_cache() / "images" / "router.bin", _manifest("vendor", None), drop)
    (busybox,) = [b for b in section["binaries"] if b["path"].endswith("!/bin/busybox")]
    # the binary states BusyBox, the drop names no such package: its strings place it
    assert busybox["component"] == "vendor" and busybox["evidence"]["by"] == "literals"
    assert busybox["evidence"]["literals"] >= 100


ROUTER = "router.bin"


def test_an_unused_flagged_file_is_not_in_the_binary_and_ranked_below(
    tmp_path: Path, mips_config: str
) -> None:
    drop = _drop(tmp_path / "drop.tar.gz", "busybox-1.35.0", mips_config, {UNUSED: UNUSED_TEXT})
    section = firmware_section(
        firmware_cache() / "images" / ROUTER, _manifest("busybox-1.35.0", "1.35.0"), drop
    )
    (busybox,) = [c for c in section["components"] if c["prefix"] == "busybox-1.35.0"]
    files = busybox["files"]
    assert files[UNUSED] is False
    assert files["busybox-1.35.0/coreutils/ls.c"] is True
    assert busybox["counts"]["true"] > 100 and busybox["counts"]["false"] > 10
    # the manifest: its files get in_binary, the flag in the unused file is kept, marked, ranked below
    flagged = term_flags(UNUSED, "busybox-1.35.0", UNUSED_TEXT, [])
    assert flagged and flagged[0].kind == "non-commercial"
    used = {"kind": "licence", "severity": "review", "path": "busybox-1.35.0/coreutils/ls.c"}
    manifest: dict[str, Any] = {
        "files": [{"path": UNUSED}, {"path": "busybox-1.35.0/coreutils/ls.c"}, {"path": "README"}],
        "flags": [f.to_json() for f in flagged] + [used],
    }
    attach(manifest, [section])
    assert [f.get("in_binary") for f in manifest["files"]] == [False, True, None]
    assert "in_binary" not in manifest["files"][2]
    assert [f["path"] for f in manifest["flags"]] == ["busybox-1.35.0/coreutils/ls.c", UNUSED]
    assert manifest["flags"][1]["shipped"] is False


def test_a_busybox_the_drop_lacks_is_named_from_the_upstream_database(
    tmp_path: Path, mips_config: str, stack: EmbeddedStack
) -> None:
    stack.client.ingest(busybox_orig(), "busybox", "1.35.0")
    drop = _drop(tmp_path / "drop.tar.gz", None, mips_config)
    manifest = {"components": _manifest("x", None)["components"][1:]}
    section = firmware_section(
        firmware_cache() / "images" / ROUTER, manifest, drop, upstream=current_services().literals()
    )
    by_path = {b["path"].rsplit("!", 1)[-1]: b for b in section["binaries"]}
    busybox = by_path["/bin/busybox"]
    assert (busybox["package"], busybox["version"], busybox["license"], busybox["status"]) == (
        "busybox", "1.35.0", "GPL-2.0-only", "source-missing",
    )  # fmt: skip
    assert busybox["evidence"]["by"] == "upstream-literals" and busybox["evidence"]["literals"] >= 100
    # glibc shares a message or two with BusyBox: not enough to be named by it
    libc = by_path["/lib/mipsel-linux-gnu/libc.so.6"]
    assert (libc["package"], libc["version"], libc["evidence"]["by"]) == ("glibc", "2.36", "soname")
    gconv = [b for b in section["binaries"] if "/gconv/" in b["path"] and b["path"].endswith(".so")]
    assert len(gconv) > 200 and {(b["package"], b["version"], b["evidence"]["by"]) for b in gconv} == {
        ("glibc", "2.36", "gconv")
    }
    assert section["verdict"] == "incomplete"


KBUILD = {
    "linux-6.1.176/drivers/usb/storage/Makefile": (
        "obj-$(CONFIG_USB_UAS)\t\t+= uas.o\nobj-$(CONFIG_USB_STORAGE)\t+= usb-storage.o\n"
        "obj-$(CONFIG_USB_STORAGE_ALAUDA)\t+= ums-alauda.o\n"
        "usb-storage-y := scsiglue.o protocol.o transport.o usb.o\n"
    ),
    "linux-6.1.176/fs/squashfs/Makefile": (
        "obj-$(CONFIG_SQUASHFS) += squashfs.o\nsquashfs-y += block.o cache.o\n"
    ),
    "linux-6.1.176/fs/Makefile": (
        "obj-$(CONFIG_BINFMT_ELF)\t\t+= binfmt_elf.o\nobj-$(CONFIG_BINFMT_SCRIPT)\t+= binfmt_script.o\n"
    ),
    "linux-6.1.176/lib/Makefile": "obj-$(CONFIG_CRC16)\t+= crc16.o\nobj-$(CONFIG_CRC7)\t+= crc7.o\n",
}


def test_without_ikconfig_the_modules_imply_the_kernel_configuration(
    tmp_path: Path, mips_config: str
) -> None:
    config = (
        mips_config.replace("CONFIG_USB_UAS=m", "CONFIG_USB_UAS=y")
        .replace("CONFIG_SQUASHFS=m", "# CONFIG_SQUASHFS is not set")
        .replace("CONFIG_BINFMT_ELF=y", "CONFIG_BINFMT_ELF=m")
    )
    drop = _drop(tmp_path / "drop.tar.gz", "busybox-1.35.0", config, KBUILD)
    section = firmware_section(
        firmware_cache() / "images" / ROUTER, _manifest("busybox-1.35.0", "1.35.0"), drop
    )
    kernel = section["kernel"]
    assert kernel["config_source"] == "modules" and kernel["implied_options"] == 8
    assert kernel["option_differences"] == {
        "CONFIG_BINFMT_ELF": ["y", "m", "modules"],  # modules.builtin has it
        "CONFIG_SQUASHFS": ["m", "n", "modules"],  # "is not set"
        "CONFIG_USB_UAS": ["m", "y", "modules"],
    }
    # Debian's own .config agrees with every option the modules imply
    right = firmware_section(
        firmware_cache() / "images" / ROUTER,
        _manifest("busybox-1.35.0", "1.35.0"),
        _drop(tmp_path / "right.tar.gz", "busybox-1.35.0", mips_config, KBUILD),
    )
    assert right["kernel"]["option_differences"] == {} and right["kernel"]["implied_options"] == 8

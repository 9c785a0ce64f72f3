"""The firmware stage (dropscan.stages.firmware_check) on the router image built from Debian's mipsel
binaries, against drops made of BusyBox 1.35.0's real release (the acceptance data) and the kernel's
Makefile and Debian's own .config for that kernel: a right drop, the wrong BusyBox release, no iptables
source, a .config for another architecture, a renamed BusyBox folder found by its literals."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from dropscan.stages.firmware_check import firmware_section

from helpers.builders import busybox_orig
from helpers.firmware_images import firmware_cache

KERNEL_MAKEFILE = "VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 176\nEXTRAVERSION =\nNAME = Curry Ramen\n"
BUSYBOX_CONFIG = "CONFIG_LS=y\nCONFIG_ASH=y\n# CONFIG_HTTPD is not set\n"


def _drop(target: Path, busybox_prefix: str, kernel_config: str) -> Path:
    """busybox_1.35.0.orig.tar.bz2 under ``busybox_prefix`` with a .config, and the kernel's Makefile and
    .config under linux-6.1.176/."""
    with tarfile.open(busybox_orig()) as src, tarfile.open(target, "w:gz") as out:
        for member in src:
            data = src.extractfile(member) if member.isfile() else None
            member.name = (
                busybox_prefix + "/" + member.name.split("/", 1)[-1] if "/" in member.name else busybox_prefix
            )
            out.addfile(member, data)
        for name, text in (
            (f"{busybox_prefix}/.config", BUSYBOX_CONFIG),
            ("linux-6.1.176/Makefile", KERNEL_MAKEFILE),
            ("linux-6.1.176/.config", kernel_config),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            out.addfile(info, io.BytesIO(text.encode()))
    return target


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
    (config,) = (firmware_cache() / "work" / "kernel-package" / "boot").glob("config-*")
    return config.read_text()


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

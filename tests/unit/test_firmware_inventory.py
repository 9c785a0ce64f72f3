"""The inventory of a router image (dropscan.firmware.inventory) against what Debian's packages say
they are: BusyBox's version and applets, the kernel's release and upstream version, every module's
vermagic and licence, the libraries' SONAMEs and NEEDED, the architecture, U-Boot's version."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from dropscan.firmware import inventory
from dropscan.firmware.carve import unpack

from helpers.firmware_images import BUSYBOX_LINKS, firmware_cache


@pytest.fixture(scope="module")
def truth() -> dict[str, Any]:
    return dict(json.loads((firmware_cache() / "truth.json").read_text()))


@pytest.fixture(scope="module")
def flash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[inventory.Inventory]:
    result = unpack(firmware_cache() / "images" / "flash.bin", tmp_path_factory.mktemp("flash"))
    assert result.stopped is None
    yield inventory.take(result.contents(), result.stated_arch())


def _by_name(inv: inventory.Inventory, suffix: str) -> inventory.Binary:
    (binary,) = [b for b in inv.binaries if b.path.endswith(suffix)]
    return binary


def _upstream(debian_version: str) -> str:
    """1:1.35.0-4+deb12u1+b1 -> 1.35.0"""
    return debian_version.split(":")[-1].split("-")[0].split("+")[0]


def test_busybox_states_the_packaged_version_and_its_applets(
    flash: inventory.Inventory, truth: dict[str, Any]
) -> None:
    busybox = _by_name(flash, "/bin/busybox")
    assert busybox.busybox == _upstream(truth["packages"]["busybox-static"])
    linked = {name for names in BUSYBOX_LINKS.values() for name in names}
    assert linked <= set(busybox.applets)
    assert list(busybox.applets) == sorted(busybox.applets) and len(busybox.applets) > 200


def test_the_kernel_states_its_release_and_the_packaged_upstream_version(
    flash: inventory.Inventory, truth: dict[str, Any]
) -> None:
    assert flash.kernel is not None
    assert flash.kernel.release == truth["kernel_release"]
    kernel_package = next(v for k, v in truth["packages"].items() if k.startswith("linux-image-"))
    assert flash.kernel.version == _upstream(kernel_package)
    assert flash.kernel.config is None  # Debian's kernels are built without IKCONFIG
    assert flash.kernel_arch == "mips" and flash.stated_arch == ("mips",)


def test_every_module_is_for_the_kernel_release_and_states_its_licence(
    flash: inventory.Inventory, truth: dict[str, Any]
) -> None:
    modules = [b for b in flash.binaries if b.kind == "module"]
    assert len(modules) == sum(1 for path in truth["files"] if path.endswith(".ko"))
    for module in modules:
        assert module.modinfo is not None
        assert module.modinfo["vermagic"].split()[0] == truth["kernel_release"], module.path
        assert module.modinfo.get("license"), module.path
    conntrack = _by_name(flash, "/nf_conntrack.ko")
    assert conntrack.modinfo is not None and conntrack.modinfo["license"] == "GPL"


def test_every_elf_is_32_bit_little_endian_mips(flash: inventory.Inventory, truth: dict[str, Any]) -> None:
    elves = [b for b in flash.binaries if b.elf is not None]
    elf_files = [p for p in truth["files"] if p.endswith(".ko") or "/bin/" in p or ".so" in p]
    assert len(elves) >= len(elf_files)
    assert {(b.elf.arch, b.elf.bits, b.elf.endian) for b in elves if b.elf} == {("mips", 32, "little")}
    assert flash.arch == "mips"


def test_libraries_and_programs_state_their_links(flash: inventory.Inventory) -> None:
    libc = _by_name(flash, "/lib/mipsel-linux-gnu/libc.so.6")
    assert libc.elf is not None and libc.elf.soname == "libc.so.6"
    dropbear = _by_name(flash, "/usr/sbin/dropbear")
    assert dropbear.elf is not None
    assert {"libtomcrypt.so.1", "libz.so.1", "libc.so.6"} <= set(dropbear.elf.needed)
    assert dropbear.elf.interpreter == "/lib/ld.so.1"
    assert dropbear.elf.build_id is not None and len(dropbear.elf.build_id) == 40
    iptables = _by_name(flash, "/usr/sbin/xtables-legacy-multi")
    assert iptables.elf is not None and "libxtables.so.12" in iptables.elf.needed


def test_the_bootloader_states_the_packaged_u_boot_version(
    flash: inventory.Inventory, truth: dict[str, Any]
) -> None:
    (loader,) = [b for b in flash.binaries if b.kind == "bootloader"]
    assert loader.uboot is not None
    assert loader.uboot == truth["packages"]["u-boot-qemu"]  # "2023.01+dfsg-2+deb12u3": Debian's own string


def test_a_text_file_is_no_binary() -> None:
    assert inventory.describe("/etc/banner", b"router\n") is None

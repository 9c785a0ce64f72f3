"""Where formats start in a firmware blob and how long they are (dropscan.firmware.formats), and the
pure rules of the inventory (strings, configs, applet tables, modinfo), on inputs the real tools build."""

from __future__ import annotations

import gzip
import lzma
import struct
from pathlib import Path

from dropscan.firmware import formats, inventory

from helpers.firmware_images import need_tool, run


def _uimage(tmp_path: Path, data: bytes, arch: str = "mips") -> bytes:
    payload = tmp_path / "payload"
    payload.write_bytes(data)
    target = tmp_path / "uImage"
    run(need_tool("mkimage"), "-A", arch, "-O", "linux", "-T", "kernel", "-C", "none", "-a", "0x80000000",
        "-e", "0x80000000", "-n", "Linux-test", "-d", payload, target)  # fmt: skip
    return target.read_bytes()


def _squashfs(tmp_path: Path, comp: str = "xz") -> bytes:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "hello.txt").write_text("hello from a router\n" * 50)
    target = tmp_path / f"fs-{comp}.squashfs"
    run(need_tool("mksquashfs"), tree, target, "-comp", comp, "-noappend", "-quiet", "-no-progress")
    return target.read_bytes()


def test_a_uimage_is_found_with_its_length_architecture_and_name(tmp_path: Path) -> None:
    data = _uimage(tmp_path, b"kernel bytes " * 100)
    (found,) = formats.scan(data)
    assert (found.fmt, found.offset, found.length, found.arch) == ("uimage", 0, len(data), "mips")
    assert "Linux-test" in found.detail and "kernel" in found.detail


def test_a_uimage_header_with_a_wrong_checksum_is_no_uimage(tmp_path: Path) -> None:
    data = bytearray(_uimage(tmp_path, b"kernel bytes " * 100))
    data[40] ^= 0xFF  # a byte of the name: the header CRC no longer matches
    assert [f for f in formats.scan(bytes(data)) if f.fmt == "uimage"] == []


def test_a_squashfs_states_its_length_and_compression(tmp_path: Path) -> None:
    data = _squashfs(tmp_path, "gzip")
    found = formats.sniff(data)
    assert found is not None and found.fmt == "squashfs" and found.detail == "gzip"
    # mksquashfs pads to 4 KiB; bytes_used is the file system without the padding
    assert found.length is not None and len(data) - 4096 < found.length <= len(data)


def test_a_concatenation_is_found_part_by_part_at_its_offsets(tmp_path: Path) -> None:
    kernel = _uimage(tmp_path, b"\x00\x01" * 3000)
    rootfs = _squashfs(tmp_path)
    padded = kernel + b"\xff" * (-len(kernel) % 65536)
    image = b"\xff" * 512 + padded + rootfs
    strong = [(f.fmt, f.offset) for f in formats.scan(image) if f.fmt in ("uimage", "squashfs")]
    assert strong == [("uimage", 512), ("squashfs", 512 + len(padded))]


def test_weak_magics_need_plausible_headers() -> None:
    # 0x5d 00 00 (LZMA's usual properties) with a dictionary of 3 bytes, and gzip's magic before junk
    junk = b"\x5d\x00\x00\x03\x00\x00\x00" + b"\xee" * 20 + b"\x1f\x8b\x08\xff\xff\xff" + b"\x00" * 40
    assert [f.fmt for f in formats.scan(junk)] == []
    real = lzma.compress(b"x" * 1000, format=lzma.FORMAT_ALONE) + gzip.compress(b"y" * 1000)
    assert [f.fmt for f in formats.scan(real) if f.offset in (0,)] == ["lzma"]
    assert "gzip" in [f.fmt for f in formats.scan(real)]


def test_an_ext_superblock_gives_the_file_system_size(tmp_path: Path) -> None:
    target = tmp_path / "fs.ext4"
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a").write_text("a")
    run(need_tool("mke2fs"), "-q", "-t", "ext4", "-d", tmp_path / "t", target, "4096k")
    found = formats.sniff(target.read_bytes()[: 64 * 1024])
    assert found is not None and (found.fmt, found.length) == ("ext", 4096 * 1024)


def test_printable_strings_are_runs_of_at_least_six_characters() -> None:
    assert inventory.printable_strings(b"\x00abc\x00abcdef\x01hello world\x00") == ["abcdef", "hello world"]


def test_a_config_reads_set_and_unset_options() -> None:
    text = 'CONFIG_MIPS=y\n# CONFIG_ARM is not set\nCONFIG_LOCALVERSION="-acme"\n# a comment\n'
    assert inventory.parse_config(text) == {
        "CONFIG_MIPS": "y",
        "CONFIG_ARM": "n",
        "CONFIG_LOCALVERSION": "-acme",
    }


def test_the_ikconfig_blob_of_a_kernel_is_read() -> None:
    config = b"CONFIG_MIPS=y\nCONFIG_IKCONFIG=y\n"
    image = b"\x00" * 100 + b"IKCFG_ST" + gzip.compress(config) + b"IKCFG_ED" + b"\x00" * 100
    assert inventory.ikconfig(image) == {"CONFIG_MIPS": "y", "CONFIG_IKCONFIG": "y"}


def test_the_applet_table_ends_where_the_names_stop_being_sorted() -> None:
    table = b"\x00".join([b"[", b"[[", b"acpid", b"ash", b"ls", b"sh", b"zcat"]) + b"\x00"
    data = b"junk" + table + b"abc\x00other\x00"  # "abc" < "zcat": not the table any more
    assert inventory.busybox_applets(data) == ("[", "[[", "acpid", "ash", "ls", "sh", "zcat")


def test_modinfo_keeps_every_value_of_a_repeated_key() -> None:
    raw = b"license=GPL\x00alias=a\x00alias=b\x00vermagic=6.1.0 SMP mod_unload \x00"
    assert inventory.parse_modinfo(raw) == {
        "license": "GPL",
        "alias": "a\nb",
        "vermagic": "6.1.0 SMP mod_unload ",
    }


def test_licence_statements_are_found_in_a_binary() -> None:
    data = (
        b"\x00\x01GNU General Public License version 2\x00junk\x00license=GPL v2\x00"
        + b"\x00for non-commercial use only\x00"
    )
    found = inventory.licence_statements(data)
    assert "GNU General Public License version 2" in found
    assert "license=GPL v2" in found
    assert any("non-commercial use only" in s for s in found)


def test_a_banner_names_the_release_and_a_distribution_build_its_upstream_version() -> None:
    banner = (
        b"\x00Linux version 6.1.0-50-4kc-malta (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) "
        b"12.2.0, GNU ld 2.40) #1 SMP Debian 6.1.176-1 (2026-07-02)\n\x00"
    )
    kernel = inventory.kernel_info(banner)
    assert kernel is not None
    assert (kernel.release, kernel.version) == ("6.1.0-50-4kc-malta", "6.1.176")
    plain = inventory.kernel_info(b"Linux version 5.10.110 (me@host) (gcc 9) #3 PREEMPT\n")
    assert plain is not None and plain.version == "5.10.110"


def test_an_elf_header_says_machine_class_and_endianness() -> None:
    # a minimal 32-bit big-endian MIPS executable header, no sections: what LIEF reads of it
    header = bytearray(52)
    header[:16] = b"\x7fELF\x01\x02\x01" + b"\x00" * 9
    struct.pack_into(">HHIIIIIHHHHHH", header, 16, 2, 8, 1, 0, 0, 0, 0, 52, 0, 0, 0, 0, 0)
    parsed = inventory.parse_elf(bytes(header))
    assert parsed is not None
    elf, modinfo = parsed
    assert (elf.arch, elf.bits, elf.endian, elf.type, modinfo) == ("mips", 32, "big", "EXEC", None)

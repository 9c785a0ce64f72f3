"""Firmware images unpacked (dropscan.firmware.carve): every image the real tools build from Debian's
mipsel binaries gives back every file and link of its rootfs, carved where it sits; hostile images end
with a reason."""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from dropscan.archive.limits import GiB, KiB, Limits, MiB
from dropscan.firmware.carve import Unpacked, unpack

from helpers.firmware_images import firmware_cache, need_tool, run

ROOTFS_IMAGES = [
    "rootfs-xz.squashfs",
    "rootfs-gzip.squashfs",
    "rootfs-zstd.squashfs",
    "rootfs-lzo.squashfs",
    "rootfs-lz4.squashfs",
    "rootfs.cpio",
    "initramfs.cpio.gz",
    "rootfs.ext4",
    "rootfs.jffs2",
    "rootfs.ubi",
    "rootfs.cramfs",
    "rootfs.tar.gz",
    "router.bin",
    "flash.bin",
]
KERNEL_IMAGES = [
    "uImage",
    "kernel.itb",
    "vmlinux.bin.gz",
    "vmlinux.bin.xz",
    "vmlinux.bin.zst",
    "vmlinux.bin.lz4",
]


@pytest.fixture(scope="module")
def cache() -> Path:
    return firmware_cache()


@pytest.fixture(scope="module")
def truth(cache: Path) -> dict[str, Any]:
    return dict(json.loads((cache / "truth.json").read_text()))


def _rootfs_view(result: Unpacked) -> tuple[dict[str, str], dict[str, str]]:
    """Files (digest) and links (target) of the one container in the result that holds /bin/busybox."""
    (container,) = {e.container for e in result.entries if e.path.endswith("/bin/busybox")}
    prefix = next(e.path for e in result.entries if e.path.endswith("/bin/busybox")).removesuffix(
        "bin/busybox"
    )
    files, links = {}, {}
    for entry in result.entries:
        if entry.container != container or not entry.path.startswith(prefix):
            continue
        inner = entry.path.removeprefix(prefix)
        if entry.kind == "file" and entry.local is not None:
            files[inner] = hashlib.sha256(entry.local.read_bytes()).hexdigest()
        elif entry.kind == "link":
            assert entry.target is not None
            links[inner] = entry.target
    return files, links


@pytest.mark.parametrize("name", ROOTFS_IMAGES)
def test_every_file_and_link_of_the_rootfs_comes_back(
    name: str, cache: Path, truth: dict[str, Any], tmp_path: Path
) -> None:
    result = unpack(cache / "images" / name, tmp_path)
    assert result.stopped is None
    files, links = _rootfs_view(result)
    assert files == truth["files"]
    assert links == truth["links"]
    assert [b for b in result.blobs if b.status != "unpacked" and b.offset == 0] == []


def test_the_router_image_is_carved_kernel_then_rootfs(cache: Path, tmp_path: Path) -> None:
    result = unpack(cache / "images" / "router.bin", tmp_path)
    top = [(b.fmt, b.offset) for b in result.blobs if b.path.count("@") == 1]
    kernel_size = (cache / "images" / "uImage").stat().st_size
    assert top == [("uimage", 0), ("squashfs", kernel_size + (-kernel_size % (128 * KiB)))]
    assert result.stated_arch() == ["mips"]


def test_the_flash_dump_has_the_bootloader_kernel_and_rootfs(cache: Path, tmp_path: Path) -> None:
    result = unpack(cache / "images" / "flash.bin", tmp_path)
    top = [b.fmt for b in result.blobs if b.path.count("@") == 1 and b.fmt in ("uimage", "squashfs")]
    assert top == ["uimage", "squashfs"]
    assert min(b.offset for b in result.blobs if b.fmt == "uimage") == 512 * KiB


@pytest.mark.parametrize("name", KERNEL_IMAGES)
def test_the_kernel_comes_out_of_every_container_and_compressor(
    name: str, cache: Path, tmp_path: Path
) -> None:
    expected = hashlib.sha256(lzma.decompress((cache / "images" / "vmlinux.bin.xz").read_bytes())).hexdigest()
    result = unpack(cache / "images" / name, tmp_path)
    digests = {
        hashlib.sha256(e.local.read_bytes()).hexdigest() for e in result.files() if e.local is not None
    }
    assert expected in digests
    # the kernel's built-in initramfs (an empty one: /dev, /root) is found inside it and unpacked
    assert any(b.fmt == "cpio" and b.status == "unpacked" for b in result.blobs)


# --- hostile images ---------------------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "tree"
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def _squash(root: Path, target: Path) -> Path:
    run(need_tool("mksquashfs"), root, target, "-comp", "gzip", "-noappend", "-quiet", "-no-progress")
    return target


def test_a_truncated_squashfs_is_unreadable_with_the_tools_reason(tmp_path: Path) -> None:
    root = _tree(tmp_path, {f"bin/prog{i}": os.urandom(20_000) for i in range(20)})
    image = _squash(root, tmp_path / "fs.squashfs")
    cut = tmp_path / "cut.squashfs"
    cut.write_bytes(image.read_bytes()[: image.stat().st_size // 2])
    result = unpack(cut, tmp_path / "out")
    (blob,) = result.blobs
    assert (blob.fmt, blob.status) == ("squashfs", "unreadable")
    assert blob.reason is not None and blob.reason.startswith("unsquashfs failed")
    assert result.stopped is None


def test_a_loop_of_links_is_recorded_not_followed(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"etc/banner": b"router\n"})
    os.symlink("b", root / "a")
    os.symlink("a", root / "b")
    os.symlink("..", root / "etc" / "up")  # a folder link pointing back above itself
    os.symlink("/etc/shadow", root / "etc" / "outside")
    result = unpack(_squash(root, tmp_path / "links.squashfs"), tmp_path / "out")
    links = {e.path.split("!", 1)[1]: e.target for e in result.entries if e.kind == "link"}
    assert links == {"/a": "b", "/b": "a", "/etc/up": "..", "/etc/outside": "/etc/shadow"}
    assert [e.path.split("!", 1)[1] for e in result.files()] == ["/etc/banner"]


def test_a_sparse_multi_gigabyte_ext4_ends_at_a_limit(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    with (root / "sparse.bin").open("wb") as handle:  # 3 GiB, all of it a hole
        handle.truncate(3 * GiB)
    image = tmp_path / "big.ext4"
    with image.open("wb") as handle:  # the image itself: 6 GiB apparent, a few MB on disk
        handle.truncate(6 * GiB)
    run(need_tool("mke2fs"), "-q", "-t", "ext4", "-F", "-d", root, image)
    # the image is larger than one member may be
    assert unpack(image, tmp_path / "a").stopped == "the image is larger than 2,147,483,648 bytes"
    # allowed in, the file inside it is the bomb: stopped at the bound, not written out
    result = unpack(image, tmp_path / "b", limits=Limits(total_bytes=512 * MiB, member_bytes=8 * GiB))
    assert result.stopped == "more than 512 MiB unpacked"


def test_nested_bombs_stop_at_the_ratio(tmp_path: Path) -> None:
    bomb = gzip.compress(gzip.compress(b"\0" * (64 * MiB)))
    root = _tree(tmp_path, {"usr/share/bomb.gz": bomb, "etc/banner": b"router\n"})
    image = _squash(root, tmp_path / "bomb.squashfs")
    result = unpack(image, tmp_path / "out", limits=Limits(ratio=100, ratio_after=1 * MiB))
    assert result.stopped == "gzip expands past 100:1"


def test_nesting_past_the_depth_limit_ends_the_unpacking(tmp_path: Path) -> None:
    data = b"innermost"
    for _ in range(6):
        data = gzip.compress(data)
    image = tmp_path / "deep.gz"
    image.write_bytes(data)
    result = unpack(image, tmp_path / "out", limits=Limits(depth=3))
    assert result.stopped is not None and result.stopped.startswith("nested more than 3 levels")


def test_the_deadline_ends_the_unpacking(tmp_path: Path) -> None:
    image = _squash(_tree(tmp_path, {"etc/banner": b"router\n"}), tmp_path / "fs.squashfs")
    assert unpack(image, tmp_path / "out", seconds=0).stopped == "the unpacking deadline passed"


def test_a_blob_of_no_known_format_says_so(tmp_path: Path) -> None:
    image = tmp_path / "noise.bin"
    image.write_bytes(bytes(range(256)) * 64)
    result = unpack(image, tmp_path / "out")
    assert [(b.fmt, b.status, b.reason) for b in result.blobs] == [
        ("unknown", "unreadable", "no firmware format recognised")
    ]


def test_an_unreadable_blob_inside_an_image_is_reported_and_the_rest_unpacked(tmp_path: Path) -> None:
    good = _squash(_tree(tmp_path, {"etc/banner": b"router\n"}), tmp_path / "good.squashfs").read_bytes()
    broken = bytearray(good)
    broken[100:2000] = b"\xaa" * 1900  # the same superblock, its tables overwritten
    image = tmp_path / "two.bin"
    image.write_bytes(bytes(broken) + b"\xff" * (-len(broken) % 4096) + good)
    result = unpack(image, tmp_path / "out")
    assert [b.status for b in result.blobs if b.fmt == "squashfs"] == ["unreadable", "unpacked"]
    assert [e.path.rsplit("!", 1)[1] for e in result.files()] == ["/etc/banner"]


def test_scratch_is_left_to_the_caller(tmp_path: Path) -> None:
    image = _squash(_tree(tmp_path, {"etc/banner": b"router\n"}), tmp_path / "fs.squashfs")
    result = unpack(image, tmp_path / "out")
    (entry,) = result.files()
    assert entry.local is not None and entry.local.read_bytes() == b"router\n"
    shutil.rmtree(tmp_path / "out")

"""Unpack + inventory of a router image against the floor of ``unsquashfs`` of its rootfs alone.

    python bench/firmware_unpack.py --cache .cache/firmware --runs 3 [--out bench-out/firmware]

Both sides run in the same process, alternately, ``--runs`` times each; the figure is the ratio of the
medians (make firmware-cases builds the images from Debian's mipsel binaries).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dropscan.firmware import carve, inventory


def floor(rootfs: Path) -> float:
    """Seconds for unsquashfs to write the rootfs out."""
    out = Path(tempfile.mkdtemp(prefix="floor-"))
    try:
        started = time.perf_counter()
        subprocess.run(
            ["unsquashfs", "-n", "-d", str(out / "root"), str(rootfs)], check=True, stdout=subprocess.DEVNULL
        )
        return time.perf_counter() - started
    finally:
        shutil.rmtree(out)


def floor_all(uimage: Path, rootfs: Path) -> float:
    """Seconds for the tools alone on the whole image: dumpimage and xz for the kernel, unsquashfs."""
    out = Path(tempfile.mkdtemp(prefix="floor-"))
    try:
        started = time.perf_counter()
        subprocess.run(["dumpimage", "-T", "kernel", "-p", "0", "-o", str(out / "k.lzma"), str(uimage)],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        with (out / "k").open("wb") as sink:
            subprocess.run(["xz", "-dc", "--format=lzma", str(out / "k.lzma")], check=True, stdout=sink)
        subprocess.run(
            ["unsquashfs", "-n", "-d", str(out / "root"), str(rootfs)], check=True, stdout=subprocess.DEVNULL
        )
        return time.perf_counter() - started
    finally:
        shutil.rmtree(out)


def ours(image: Path) -> tuple[float, float, int, int]:
    """Seconds to unpack and to inventory the whole image; files and binaries found."""
    out = Path(tempfile.mkdtemp(prefix="ours-"))
    try:
        started = time.perf_counter()
        result = carve.unpack(image, out)
        unpacked = time.perf_counter()
        found = inventory.take(result.contents(), result.stated_arch())
        done = time.perf_counter()
        return unpacked - started, done - unpacked, len(result.files()), len(found.binaries)
    finally:
        shutil.rmtree(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path(".cache/firmware"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    image, rootfs = args.cache / "images" / "router.bin", args.cache / "images" / "rootfs-xz.squashfs"
    floors, floors_all, unpacks, inventories = [], [], [], []
    files = binaries = 0
    for _ in range(args.runs):
        floors.append(floor(rootfs))
        floors_all.append(floor_all(args.cache / "images" / "uImage", rootfs))
        u, i, files, binaries = ours(image)
        unpacks.append(u)
        inventories.append(i)
    totals = [u + i for u, i in zip(unpacks, inventories, strict=True)]
    report = {
        "image": str(image),
        "image_bytes": image.stat().st_size,
        "files": files,
        "binaries": binaries,
        "runs": args.runs,
        "floor_unsquashfs_s": statistics.median(floors),
        "floor_tools_whole_image_s": statistics.median(floors_all),
        "unpack_s": statistics.median(unpacks),
        "inventory_s": statistics.median(inventories),
        "total_s": statistics.median(totals),
        "ratio": statistics.median(totals) / statistics.median(floors),
        "ratio_whole_image": statistics.median(totals) / statistics.median(floors_all),
        "all": {
            "floor": floors,
            "floor_whole_image": floors_all,
            "unpack": unpacks,
            "inventory": inventories,
        },
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "firmware_unpack.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

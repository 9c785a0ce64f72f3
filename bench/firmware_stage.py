"""The firmware stage on the 64 MB router against the floor of the extraction tools alone (issue 35).

    python bench/firmware_stage.py --cache .cache/firmware --cases .cache/cases --runs 3 \\
        [--out bench-out/firmware]

The image is ``router64/images/router64.bin`` of ``make firmware-router64`` (a uImage kernel, then a
squashfs xz of about 1,000 Debian mipsel ELF files); the drop is BusyBox 1.35.0's release with a
``.config``, and the kernel's Makefile and Debian's own ``.config`` for it, the manifest naming both
components (as tests/unit/test_firmware_stage.py builds them). Alternately, ``--runs`` times each, each
in a process of its own (so that its peak RSS is its own):

- floor: ``unsquashfs -o OFFSET`` of the rootfs inside the image, and the tools on the whole image:
  ``dumpimage -p 0`` of the uImage, ``xz -d --format=lzma`` of its kernel, then that unsquashfs;
- stage: ``firmware_section(image, manifest, drop)``: unpack, inventory, match, in_binary, checks.

The figures are the medians and their ratio (stage / floor); peak RSS is the largest of the process and
of the tools it ran (``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

IMAGE = Path("router64") / "images" / "router64.bin"
BUSYBOX = "busybox-1.35.0"
LINUX = "linux-6.1.176"
KERNEL_MAKEFILE = "VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 176\nEXTRAVERSION =\nNAME = Curry Ramen\n"
BUSYBOX_CONFIG = "CONFIG_LS=y\nCONFIG_ASH=y\n# CONFIG_HTTPD is not set\n"
MANIFEST = {
    "components": [
        {"prefix": BUSYBOX, "package": "busybox", "version": "1.35.0", "license": "GPL-2.0-only"},
        {"prefix": LINUX, "package": "linux", "version": "6.1.176", "license": "GPL-2.0-only"},
    ]
}


def build_drop(orig: Path, kernel_config: Path, target: Path) -> Path:
    """BusyBox 1.35.0's release under busybox-1.35.0/ with a .config; the kernel's Makefile and .config."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    with tarfile.open(orig) as src, tarfile.open(partial, "w:gz") as out:
        for member in src:
            data = src.extractfile(member) if member.isfile() else None
            member.name = BUSYBOX + "/" + member.name.split("/", 1)[-1] if "/" in member.name else BUSYBOX
            out.addfile(member, data)
        files = {
            f"{BUSYBOX}/.config": BUSYBOX_CONFIG,
            f"{LINUX}/Makefile": KERNEL_MAKEFILE,
            f"{LINUX}/.config": kernel_config.read_text(),
        }
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            out.addfile(info, io.BytesIO(text.encode()))
    partial.rename(target)
    return target


def _peak_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tools = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, tools) / 1024


def _cpu_s() -> float:
    """CPU seconds of this process and of the tools and workers it waited for (the load on a shared
    machine moves the wall clock more than this)."""
    own, done = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + done.ru_utime + done.ru_stime


def one_floor(image: Path, whole: bool) -> dict[str, Any]:
    """The tools alone (in this process): unsquashfs of the rootfs at its offset, and with ``whole``
    dumpimage and xz for the kernel first."""
    from dropscan.firmware import formats

    finds = {f.fmt: f for f in formats.carve(image.read_bytes())}
    rootfs, kernel = finds["squashfs"], finds["uimage"]
    out = Path(tempfile.mkdtemp(prefix="floor-"))
    try:
        cpu = _cpu_s()
        started = time.perf_counter()
        if whole:
            uimage = out / "uImage"
            with image.open("rb") as src:
                src.seek(kernel.offset)
                uimage.write_bytes(src.read(kernel.length))
            subprocess.run(["dumpimage", "-T", "kernel", "-p", "0", "-o", str(out / "k.lzma"), str(uimage)],
                           check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            with (out / "k").open("wb") as sink:
                subprocess.run(["xz", "-dc", "--format=lzma", str(out / "k.lzma")], check=True, stdout=sink)
        subprocess.run(
            ["unsquashfs", "-n", "-no-xattrs", "-o", str(rootfs.offset), "-d", str(out / "root"), str(image)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - started
        cpu = _cpu_s() - cpu
    finally:
        started = time.perf_counter()
        shutil.rmtree(out)
        cleanup = time.perf_counter() - started
    return {"seconds": seconds, "cpu_s": cpu, "cleanup_s": cleanup, "peak_rss_mb": _peak_mb()}


def one_stage(image: Path, drop: Path, profile: Path | None) -> dict[str, Any]:
    """``firmware_section`` once (in this process), with its own clock and what it found."""
    from dropscan.stages.firmware_check import firmware_section

    profiler = None
    if profile is not None:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu = _cpu_s()
    started = time.perf_counter()
    section = firmware_section(image, MANIFEST, drop)
    seconds = time.perf_counter() - started
    cpu = _cpu_s() - cpu
    if profiler is not None and profile is not None:
        profiler.disable()
        profiler.dump_stats(str(profile))
    elf = sum(1 for b in section["binaries"] if b["elf"] is not None)
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "peak_rss_mb": _peak_mb(),
        "steps": section["seconds"],
        "files": section["summary"]["files"],
        "binaries": section["summary"]["binaries"],
        "elf_binaries": elf,
        "statuses": section["summary"]["statuses"],
        "verdict": section["verdict"],
        "stopped": section["stopped"],
    }


def _child(*args: str) -> dict[str, Any]:
    """One measurement in a fresh interpreter: its JSON line."""
    env = dict(os.environ)
    shared = str(Path(__file__).resolve().parents[1] / "shared")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [shared, env.get("PYTHONPATH")]))
    argv = [sys.executable, __file__, *args]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path(".cache/firmware"))
    parser.add_argument("--cases", type=Path, default=Path(".cache/cases"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", type=Path, help="cProfile of one more stage run, to this file")
    parser.add_argument("--one", choices=("floor", "floor-whole", "stage"), help=argparse.SUPPRESS)
    parser.add_argument("--drop", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    image = (args.cache / IMAGE).resolve()
    if args.one:
        if args.one == "stage":
            result = one_stage(image, args.drop, args.profile)
        else:
            result = one_floor(image, whole=args.one == "floor-whole")
        print(json.dumps(result))
        return 0
    if not image.is_file():
        print(f"no {image}: make firmware-router64", file=sys.stderr)
        return 2
    (config,) = (args.cache / "router64" / "work" / "kernel-package" / "boot").glob("config-*")
    drop = build_drop(
        args.cases / "busybox_1.35.0.orig.tar.bz2", config, args.cache / "router64" / "bench-drop.tar.gz"
    )
    stage = ("--cache", str(args.cache), "--one", "stage", "--drop", str(drop))
    floors: list[dict[str, Any]] = []
    wholes: list[dict[str, Any]] = []
    stages: list[dict[str, Any]] = []
    for _ in range(args.runs):
        floors.append(_child("--cache", str(args.cache), "--one", "floor"))
        wholes.append(_child("--cache", str(args.cache), "--one", "floor-whole"))
        stages.append(_child(*stage))
    if args.profile:
        _child(*stage, "--profile", str(args.profile))
    stage_s, floor_s, whole_s = (_median(x, "seconds") for x in (stages, floors, wholes))
    steps = {k: statistics.median(s["steps"].get(k, 0.0) for s in stages) for k in stages[0]["steps"]}
    without = float(statistics.median(s["seconds"] - s["steps"].get("cleanup", 0.0) for s in stages))
    last = stages[-1]
    report = {
        "image": str(image),
        "image_bytes": image.stat().st_size,
        "drop": str(drop),
        "runs": args.runs,
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "files": last["files"],
        "binaries": last["binaries"],
        "elf_binaries": last["elf_binaries"],
        "statuses": last["statuses"],
        "verdict": last["verdict"],
        "stopped": last["stopped"],
        "floor_unsquashfs_s": floor_s,
        "floor_tools_whole_image_s": whole_s,
        "stage_s": stage_s,
        "stage_steps_s": steps,
        "ratio_whole_image": stage_s / whole_s,
        "ratio_unsquashfs": stage_s / floor_s,
        # the stage removes what it unpacked (its "cleanup" step), the floors' removal is not timed: like
        # for like, both without it
        "stage_without_cleanup_s": without,
        "floor_cleanup_s": _median(wholes, "cleanup_s"),
        "ratio_whole_image_without_cleanup": without / whole_s,
        "cpu_s": {
            "stage": _median(stages, "cpu_s"),
            "floor_whole_image": _median(wholes, "cpu_s"),
            "floor_unsquashfs": _median(floors, "cpu_s"),
        },
        "peak_rss_mb": {
            "stage": max(s["peak_rss_mb"] for s in stages),
            "floor_whole_image": max(w["peak_rss_mb"] for w in wholes),
        },
        "all": {
            "floor_unsquashfs": [f["seconds"] for f in floors],
            "floor_whole_image": [w["seconds"] for w in wholes],
            "stage": [s["seconds"] for s in stages],
            "stage_steps": [s["steps"] for s in stages],
        },
    }
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "firmware_stage.json").write_text(text)
    print(
        f"firmware stage, {image.name} ({report['image_bytes'] / 1e6:.1f} MB, {report['elf_binaries']} ELF): "
        f"stage {stage_s:.2f} s, tools on the whole image {whole_s:.2f} s ({stage_s / whole_s:.2f}x), "
        f"unsquashfs alone {floor_s:.2f} s ({stage_s / floor_s:.2f}x); without its cleanup "
        f"{without:.2f} s ({without / whole_s:.2f}x); peak RSS "
        f"{report['peak_rss_mb']['stage']:.0f} MB (medians of {args.runs})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Router images built with the real tools from Debian's real binaries of another architecture.

``make firmware-cases`` runs this module: it downloads (once, into ``.cache/firmware/debs``) Debian
bookworm's mipsel packages of BusyBox (static), a Linux kernel with its modules, iptables, dropbear,
glibc and their libraries, builds a router's root file system from them and packs it as real images
are packed: squashfs (xz and gzip), cpio and an initramfs, ext4 (``mke2fs -d``), JFFS2, UBI (UBIFS in
``ubinize``), a legacy uImage of the kernel (``mkimage``, LZMA) and an OpenWrt-style concatenation of
the two (kernel, padded to an erase block, then the squashfs). ``truth.json`` says what went in: every
regular file of the rootfs with its SHA-256, the links, the kernel release and the packages' versions.

``--router64`` (``make firmware-router64``) builds the 64 MB router of the speed clause instead, in
``.cache/firmware/router64`` (``build_large``): more packages and drivers, about 1,000 ELF files, the
same layout; ``bench/firmware_stage.py`` runs the firmware stage on it.

Tests find the cache through :func:`firmware_cache` and skip only when it is absent and
``DROPSCAN_REQUIRE_FIRMWARE`` is unset.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ARCH = "mipsel"
KERNEL_FLAVOUR = "4kc-malta"
# The binaries a router ships, with what they need to run (iptables' libraries, dropbear's crypto).
PACKAGES = (
    "busybox-static",
    "iptables",
    "libip4tc2",
    "libip6tc2",
    "libxtables12",
    "libmnl0",
    "libnftnl11",
    "libnetfilter-conntrack3",
    "libnfnetlink0",
    "dropbear-bin",
    "libtomcrypt1",
    "libtommath1",
    "zlib1g",
    "libcrypt1",
    "libgcc-s1",
    "libc6",
)
# Modules a router loads (netfilter, bridging, PPP, USB storage); the whole set is 3,000 files, 180 MB.
MODULE_DIRS = (
    "kernel/net/netfilter",
    "kernel/net/ipv4",
    "kernel/net/ipv6",
    "kernel/net/bridge",
    "kernel/net/sched",
    "kernel/drivers/net/ppp",
    "kernel/drivers/usb/storage",
    "kernel/fs/squashfs",
    "kernel/lib",
)
BUSYBOX_LINKS = {
    "bin": ("sh", "ash", "ls", "cat", "cp", "mv", "rm", "mkdir", "mount", "umount", "ps", "dmesg", "ping"),
    "sbin": ("init", "ifconfig", "route", "insmod", "rmmod", "modprobe", "reboot", "udhcpc", "syslogd"),
    "usr/bin": ("wget", "vi", "tail", "top", "awk", "sed", "grep"),
    "usr/sbin": ("telnetd", "httpd", "crond", "brctl"),
}
IPTABLES_LINKS = ("iptables", "iptables-save", "iptables-restore", "ip6tables")
# U-Boot for the Malta board (little-endian) from Debian's u-boot-qemu (architecture all)
BOOTLOADER_PACKAGE = "u-boot-qemu"
BOOTLOADER = "usr/lib/u-boot/maltael/u-boot.bin"
BOOTLOADER_SPAN = 512 * 1024
ERASE_BLOCK = 128 * 1024
LOAD_ADDRESS = "0x80100000"

# The 64 MB router of the speed clause (issue 35, bench/firmware_unpack.py): the router above with what a
# larger one ships (Wi-Fi supplicant and access point, DNS and DHCP, a web server, VPN, TLS, curl,
# tcpdump, Python, libxml2 with ICU, a DLNA server with FFmpeg's libraries and codecs) and the libraries
# they need, Debian's infrastructure (dpkg, perl, debconf, PAM) and glibc's gconv modules left out, and
# the kernel's Wi-Fi, Ethernet and USB network drivers: about 1,000 ELF files in a 64 MB image of the
# same layout (uImage, then squashfs xz), in .cache/firmware/router64.
LARGE = "router64"
LARGE_IMAGE = "router64.bin"
LARGE_PACKAGES = (
    "wpasupplicant", "hostapd", "libnl-3-200", "libnl-genl-3-200", "libnl-route-3-200", "libpcsclite1",
    "libdbus-1-3", "dnsmasq-base", "iproute2", "libbpf1", "libelf1", "libcap2", "libselinux1",
    "libpcre2-8-0", "libdb5.3", "libbsd0", "libmd0", "libtirpc3", "iw", "tcpdump", "libpcap0.8", "ppp",
    "openvpn", "liblzo2-2", "liblz4-1", "libpkcs11-helper1", "libcap-ng0", "lighttpd", "libxxhash0",
    "openssl", "libssl3", "curl", "libcurl4", "libnghttp2-14", "libpsl5", "librtmp1", "libssh2-1",
    "libbrotli1", "libidn2-0", "libunistring2", "libzstd1", "liblzma5", "libgnutls30", "libp11-kit0",
    "libtasn1-6", "libnettle8", "libhogweed6", "libgmp10", "libffi8", "libldap-2.5-0", "libsasl2-2",
    "libsasl2-modules-db", "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3", "libkrb5support0",
    "libkeyutils1", "libcom-err2", "libjansson4", "libnftables1", "libgcrypt20", "libgpg-error0",
    "libatomic1", "libstdc++6", "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib",
    "libexpat1", "libreadline8", "libncursesw6", "libtinfo6", "libsqlite3-0", "libbz2-1.0", "libnsl2",
    "libuuid1", "libxml2", "libicu72", "minidlna", "libavformat59", "libavcodec59", "libavutil57",
    "libswresample4", "libexif12", "libid3tag0", "libjpeg62-turbo", "libflac12", "libogg0", "libvorbis0a",
    "libx264-164", "libx265-199", "libvpx7", "libdav1d6", "libopus0", "libmp3lame0",
)  # fmt: skip
LARGE_MODULE_DIRS = (
    *MODULE_DIRS,
    "kernel/net/wireless",
    "kernel/net/mac80211",
    "kernel/drivers/net/wireless",
    "kernel/drivers/net/ethernet",
    "kernel/drivers/net/usb",
)

REQUIRE_ENV = "DROPSCAN_REQUIRE_FIRMWARE"
CACHE_ENV = "DROPSCAN_FIRMWARE_DIR"


def default_cache() -> Path:
    """``.cache/firmware`` of the checkout this file is in (or ``DROPSCAN_FIRMWARE_DIR``)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".cache" / "firmware"


def firmware_cache() -> Path:
    """The built cache; a test skips without it, unless ``DROPSCAN_REQUIRE_FIRMWARE`` is set (then fails)."""
    cache = default_cache()
    if (cache / "truth.json").is_file():
        return cache
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{cache}/truth.json missing and {REQUIRE_ENV} is set: run `make firmware-cases`")
    pytest.skip(f"no firmware cases in {cache} (make firmware-cases)")


def need_tool(name: str) -> str:
    """A Debian tool the firmware tests build with (make firmware-tools); skip without, unless required."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{name} missing and {REQUIRE_ENV} is set: run `make firmware-tools`")
        pytest.skip(f"{name} is not installed (make firmware-tools)")
    return found


def run(*cmd: str | Path, cwd: Path | None = None) -> None:
    """Run a tool; its own message on failure."""
    subprocess.run([str(c) for c in cmd], check=True, cwd=cwd, stdout=subprocess.DEVNULL)


def apt_download(debs: Path) -> list[Path]:
    """The packages' .deb files for ``ARCH``, downloaded by apt once (the architecture must be added)."""
    debs.mkdir(parents=True, exist_ok=True)
    kernel = _kernel_package()
    wanted = [f"{p}:{ARCH}" for p in (*PACKAGES, kernel)] + [BOOTLOADER_PACKAGE]
    have = {p.name.split("_")[0] for p in debs.glob("*.deb")}
    missing = [w for w in wanted if w.split(":")[0] not in have]
    if missing:
        run("apt-get", "download", "-qq", *missing, cwd=debs)
    return sorted(debs.glob("*.deb"))


def _kernel_package() -> str:
    """The newest ``linux-image-6.1.0-N-4kc-malta`` apt knows of (its name carries the ABI number)."""
    out = subprocess.run(
        ["apt-cache", "search", "--names-only", f"^linux-image-6\\.1\\.0-[0-9]+-{KERNEL_FLAVOUR}$"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    names = sorted((line.split()[0] for line in out.splitlines()), key=lambda n: int(n.split("-")[3]))
    if not names:
        raise SystemExit(f"apt knows no linux-image-*-{KERNEL_FLAVOUR}: dpkg --add-architecture {ARCH}?")
    return names[-1]


def build_rootfs(debs: list[Path], root: Path, module_dirs: tuple[str, ...] = MODULE_DIRS) -> dict[str, str]:
    """The router's file system from the packages, with the kernel's modules of ``module_dirs``; returns
    the package versions by name."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    versions = {}
    staging = root.parent / "kernel-package"
    shutil.rmtree(staging, ignore_errors=True)
    for deb in debs:
        name, version = deb.name.split("_")[:2]
        versions[name] = version.replace("%3a", ":")
        if name == BOOTLOADER_PACKAGE:
            run("dpkg-deb", "-x", deb, root.parent / "bootloader")
        else:
            run("dpkg-deb", "-x", deb, staging if name.startswith("linux-image-") else root)
    shutil.rmtree(root / "usr" / "share", ignore_errors=True)
    _add_kernel_modules(staging, root, module_dirs)
    for folder, names in BUSYBOX_LINKS.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name in names:
            link = root / folder / name
            if not link.exists() and not link.is_symlink():
                link.symlink_to(os.path.relpath(root / "bin" / "busybox", link.parent))
    for name in IPTABLES_LINKS:
        (root / "usr" / "sbin" / name).symlink_to("xtables-legacy-multi")
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "banner").write_text("dropscan test router, built from Debian bookworm mipsel\n")
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    return versions


def _add_kernel_modules(staging: Path, root: Path, module_dirs: tuple[str, ...]) -> None:
    """The router's subset of the kernel package's modules, its config beside them, the kernel aside."""
    (release_dir,) = (staging / "lib" / "modules").iterdir()
    target = root / "lib" / "modules" / release_dir.name
    target.mkdir(parents=True)
    for item in release_dir.iterdir():
        if item.is_file():
            shutil.copy2(item, target / item.name)
    for sub in module_dirs:
        if (release_dir / sub).is_dir():
            shutil.copytree(release_dir / sub, target / sub, dirs_exist_ok=True)


def kernel_payload(staging: Path) -> tuple[str, bytes]:
    """The kernel release and its uncompressed image, from the package's self-decompressing vmlinuz.

    Debian's MIPS ``vmlinuz`` is an ELF whose data is the XZ-compressed kernel; the first XZ magic in
    it is the decompressor's own string, so each is tried until one decodes.
    """
    (vmlinuz,) = (staging / "boot").glob("vmlinuz-*")
    release = vmlinuz.name.removeprefix("vmlinuz-")
    data = vmlinuz.read_bytes()
    start = data.find(b"\xfd7zXZ\x00")
    while start >= 0:
        try:
            return release, lzma.LZMADecompressor().decompress(data[start:])
        except lzma.LZMAError:
            start = data.find(b"\xfd7zXZ\x00", start + 1)
    raise SystemExit(f"no XZ payload in {vmlinuz}")


def build_images(root: Path, staging: Path, out: Path) -> dict[str, str]:
    """Every image of ``root`` and of the kernel into ``out``; returns image name -> what it is."""
    out.mkdir(parents=True, exist_ok=True)
    images: dict[str, str] = {}
    for comp in ("xz", "gzip", "zstd", "lzo", "lz4"):
        target = out / f"rootfs-{comp}.squashfs"
        target.unlink(missing_ok=True)
        run("mksquashfs", root, target, "-comp", comp, "-all-root", "-noappend", "-quiet", "-no-progress")
        images[target.name] = f"squashfs 4.0, {comp}"
    run("mkfs.cramfs", root, out / "rootfs.cramfs")
    images["rootfs.cramfs"] = "CramFS"
    run("tar", "-czf", out / "rootfs.tar.gz", "--owner=0", "--group=0", "-C", root, ".")
    images["rootfs.tar.gz"] = "tar.gz of the rootfs"
    cpio = out / "rootfs.cpio"
    names = subprocess.run(["find", "."], cwd=root, check=True, capture_output=True).stdout
    with cpio.open("wb") as sink:
        subprocess.run(
            ["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, input=names, stdout=sink, check=True
        )
    images[cpio.name] = "cpio newc"
    (out / "initramfs.cpio.gz").write_bytes(_gzip(cpio.read_bytes()))
    images["initramfs.cpio.gz"] = "gzip of cpio newc (an initramfs)"
    size_kib = _tree_bytes(root) // 1024 * 2 + 8192
    ext4 = out / "rootfs.ext4"
    ext4.unlink(missing_ok=True)
    run("mke2fs", "-q", "-t", "ext4", "-d", root, "-E", "root_owner=0:0", ext4, f"{size_kib}k")
    images[ext4.name] = "ext4 (mke2fs -d)"
    run("mkfs.jffs2", "-l", "-q", "-e", str(ERASE_BLOCK), "-r", root, "-o", out / "rootfs.jffs2")
    images["rootfs.jffs2"] = "JFFS2, little-endian, 128 KiB erase blocks"
    ubifs = out / "rootfs.ubifs"
    run("mkfs.ubifs", "-q", "-r", root, "-m", "2048", "-e", "126976", "-c", "2048", "-o", ubifs)
    ini = out / "ubinize.ini"
    ini.write_text(
        f"[rootfs]\nmode=ubi\nimage={ubifs}\nvol_id=0\nvol_type=dynamic\nvol_name=rootfs\nvol_flags=autoresize\n"
    )
    run("ubinize", "-o", out / "rootfs.ubi", "-m", "2048", "-p", str(ERASE_BLOCK), "-s", "2048", ini)
    ubifs.unlink()
    ini.unlink()
    images["rootfs.ubi"] = "UBI holding a UBIFS volume"
    release, payload = kernel_payload(staging)
    uimage = make_uimage(release, payload, out / "uImage")
    images[uimage.name] = "legacy uImage, LZMA kernel"
    raw = out / "vmlinux.bin"
    raw.write_bytes(payload)
    fit = out / "kernel.itb"
    run("mkimage", "-f", "auto", "-A", "mips", "-O", "linux", "-T", "kernel", "-C", "none",
        "-a", LOAD_ADDRESS, "-e", LOAD_ADDRESS, "-n", f"Linux-{release}", "-d", raw, fit)  # fmt: skip
    images[fit.name] = "FIT image of the kernel"
    (out / "vmlinux.bin.gz").write_bytes(_gzip(payload))
    run("xz", "-kf", "--check=crc32", raw)
    run("zstd", "-qf", raw, "-o", out / "vmlinux.bin.zst")
    run("lz4", "-qf", "-l", raw, out / "vmlinux.bin.lz4")  # -l: the legacy frame the kernel uses
    raw.unlink()
    for suffix in ("gz", "xz", "zst", "lz4"):
        images[f"vmlinux.bin.{suffix}"] = f"the raw kernel, compressed ({suffix})"
    openwrt(uimage, out / "rootfs-xz.squashfs", out / "router.bin")
    images["router.bin"] = "OpenWrt-style: uImage padded to an erase block, then squashfs xz"
    loader = (root.parent / "bootloader" / BOOTLOADER).read_bytes()
    loader += b"\xff" * (BOOTLOADER_SPAN - len(loader))
    (out / "flash.bin").write_bytes(loader + (out / "router.bin").read_bytes())
    images["flash.bin"] = "a whole flash: U-Boot (512 KiB), then router.bin"
    return images


def make_uimage(release: str, payload: bytes, target: Path) -> Path:
    """A legacy uImage of the kernel, LZMA-compressed, as OpenWrt's MIPS targets pack it."""
    lzma_kernel = target.with_name("vmlinux.bin.lzma")
    lzma_kernel.write_bytes(lzma.compress(payload, format=lzma.FORMAT_ALONE))
    run(
        "mkimage", "-A", "mips", "-O", "linux", "-T", "kernel", "-C", "lzma", "-a", LOAD_ADDRESS,
        "-e", LOAD_ADDRESS, "-n", f"Linux-{release}", "-d", lzma_kernel, target,
    )  # fmt: skip
    lzma_kernel.unlink()
    return target


def openwrt(uimage: Path, rootfs: Path, target: Path) -> None:
    """OpenWrt's layout: the uImage padded to an erase block, then the squashfs."""
    kernel = uimage.read_bytes()
    kernel += b"\xff" * (-len(kernel) % ERASE_BLOCK)
    target.write_bytes(kernel + rootfs.read_bytes())


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data, mtime=0)


def _tree_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*"))


def truth(root: Path, release: str, versions: dict[str, str], images: dict[str, str]) -> dict[str, object]:
    """What went into the images: files with digests, links with targets, kernel release, packages."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            links[rel] = os.readlink(path)
        elif path.is_file():
            files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {
        "arch": ARCH,
        "kernel_release": release,
        "packages": versions,
        "images": images,
        "files": files,
        "links": links,
    }


def recipe() -> str:
    """The SHA-256 of this file: the images are rebuilt when the recipe that built them changed."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def build(cache: Path) -> Path:
    """Download what is missing and build every image into ``cache`` (once per recipe); returns
    truth.json's path."""
    target = cache / "truth.json"
    if target.is_file():
        built = json.loads(target.read_text())
        if built.get("recipe") == recipe() and all((cache / "images" / n).is_file() for n in built["images"]):
            return target
    debs = apt_download(cache / "debs")
    work = cache / "work"
    root = work / "rootfs"
    versions = build_rootfs(debs, root)
    release, _ = kernel_payload(work / "kernel-package")
    images = build_images(root, work / "kernel-package", cache / "images")
    facts = truth(root, release, versions, images) | {"recipe": recipe()}
    target.write_text(json.dumps(facts, indent=1, sort_keys=True))
    return target


def build_large(cache: Path) -> Path:
    """The 64 MB router into ``cache/router64`` (once per recipe; the small images are left as they are):
    ``images/router64.bin`` with its ``uImage`` and ``rootfs-xz.squashfs``; returns its truth.json."""
    base = cache / LARGE
    target = base / "truth.json"
    names = ("uImage", "rootfs-xz.squashfs", LARGE_IMAGE)
    if target.is_file():
        built = json.loads(target.read_text())
        if built.get("recipe") == recipe() and all((base / "images" / n).is_file() for n in names):
            return target
    debs = apt_download(cache / "debs")
    extra = cache / "debs-router64"
    extra.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("_")[0] for p in extra.glob("*.deb")}
    missing = [f"{p}:{ARCH}" for p in LARGE_PACKAGES if p not in have]
    if missing:
        run("apt-get", "download", "-qq", *missing, cwd=extra)
    root = base / "work" / "rootfs"
    versions = build_rootfs([*debs, *sorted(extra.glob("*.deb"))], root, LARGE_MODULE_DIRS)
    shutil.rmtree(root / "usr" / "lib" / f"{ARCH}-linux-gnu" / "gconv")  # iconv's: a router has none
    out = base / "images"
    out.mkdir(parents=True, exist_ok=True)
    rootfs = out / "rootfs-xz.squashfs"
    rootfs.unlink(missing_ok=True)
    run("mksquashfs", root, rootfs, "-comp", "xz", "-all-root", "-noappend", "-quiet", "-no-progress")
    release, payload = kernel_payload(base / "work" / "kernel-package")
    openwrt(make_uimage(release, payload, out / "uImage"), rootfs, out / LARGE_IMAGE)
    images = {
        "uImage": "legacy uImage, LZMA kernel",
        rootfs.name: "squashfs 4.0, xz",
        LARGE_IMAGE: "OpenWrt-style: uImage padded to an erase block, then squashfs xz",
    }
    facts = truth(root, release, versions, images) | {"recipe": recipe(), "elf_files": _elf_files(root)}
    target.write_text(json.dumps(facts, indent=1, sort_keys=True))
    return target


def _elf_files(root: Path) -> int:
    count = 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                count += handle.read(4) == b"\x7fELF"
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--router64", action="store_true", help="the 64 MB router alone (router64/)")
    args = parser.parse_args(argv)
    if args.router64:
        target = build_large(args.cache)
        facts = json.loads(target.read_text())
        image = target.parent / "images" / LARGE_IMAGE
        print(f"64 MB router: {image} ({image.stat().st_size:,} bytes, {facts['elf_files']} ELF files)",
              file=sys.stderr)  # fmt: skip
        return 0
    target = build(args.cache)
    print(f"firmware cases: {target.parent / 'images'} ({target})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

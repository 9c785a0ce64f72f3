"""Drops for the firmware images of tests/helpers/firmware_images.py: BusyBox 1.35.0's real release
(the acceptance data) under a prefix of choice, with a .config, and the kernel's Makefile and a .config
under linux-6.1.176/ (Debian's own for the image's kernel, or another architecture's)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from pathlib import Path

from helpers.builders import busybox_orig
from helpers.firmware_images import firmware_cache

KERNEL_MAKEFILE = "VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 176\nEXTRAVERSION =\nNAME = Curry Ramen\n"
BUSYBOX_CONFIG = "CONFIG_LS=y\nCONFIG_ASH=y\n# CONFIG_HTTPD is not set\n"
# a vendor's file planted in the BusyBox tree, of an applet the image's busybox was not built with
UNUSED = "busybox-1.35.0/miscutils/vendor_ledctl.c"
UNUSED_TEXT = """/* (c) Vendor Inc. Permission granted for non-commercial use only. */
#include "libbb.h"
int ledctl_main(int argc, char **argv)
{
	if (argc < 2) bb_error_msg_and_die("ledctl: no LED pattern given on the command line");
	if (open("/dev/vendor-led", O_RDWR) < 0)
		bb_simple_perror_msg_and_die("ledctl: cannot open the vendor LED device");
	puts("ledctl: blink pattern out of range for this board");
	return 0;
}
"""


def firmware_drop(
    target: Path,
    busybox_prefix: str | None,
    kernel_config: str,
    extra: dict[str, str] | None = None,
    upstreams: Sequence[Path] = (),
) -> Path:
    """busybox_1.35.0.orig.tar.bz2 under ``busybox_prefix`` (None: no BusyBox) with a .config, the
    kernel's Makefile and .config under linux-6.1.176/, ``extra`` files (path -> text), and the whole
    of each tarball of ``upstreams`` as it is (helpers.firmware_sources: iptables, glibc ...)."""
    with tarfile.open(busybox_orig()) as src, tarfile.open(target, "w:gz") as out:
        prefix = busybox_prefix or ""
        for member in src if prefix else ():
            data = src.extractfile(member) if member.isfile() else None
            member.name = prefix + "/" + member.name.split("/", 1)[-1] if "/" in member.name else prefix
            out.addfile(member, data)
        files = {"linux-6.1.176/Makefile": KERNEL_MAKEFILE, "linux-6.1.176/.config": kernel_config}
        if busybox_prefix:
            files[f"{busybox_prefix}/.config"] = BUSYBOX_CONFIG
        for name, text in {**files, **(extra or {})}.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            out.addfile(info, io.BytesIO(text.encode()))
        for tarball in upstreams:
            with tarfile.open(tarball) as upstream:
                for member in upstream:
                    out.addfile(member, upstream.extractfile(member) if member.isfile() else None)
    return target


def mips_kernel_config() -> str:
    """Debian's .config of the image's kernel (mipsel, 4kc-malta)."""
    (config,) = (firmware_cache() / "work" / "kernel-package" / "boot").glob("config-*")
    return config.read_text()

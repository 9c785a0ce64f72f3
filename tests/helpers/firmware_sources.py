"""The upstream sources of the router image's other binaries, for a drop that holds them (``make
firmware-cases``): Debian bookworm's orig tarballs of iptables, glibc and libxcrypt, the releases the
image's iptables, libc6 and libcrypt1 were built from, downloaded once by ``apt-get source`` into
``.cache/firmware/sources``. Debian's archive as these machines see it has no bookworm source of
libmnl, libnetfilter-conntrack, libnfnetlink and libnftnl (404): a drop of these three is the router's
right drop but for those four libraries."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

#: source package -> its orig tarball in bookworm (the image's binaries' own releases)
ORIGS = {
    "iptables": "iptables_1.8.9.orig.tar.xz",
    "glibc": "glibc_2.36.orig.tar.xz",
    "libxcrypt": "libxcrypt_4.4.33.orig.tar.xz",
}


def fetch(folder: Path) -> list[Path]:
    """The orig tarballs in ``folder``, downloaded by apt (bookworm's deb-src) when missing."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [p for p, orig in ORIGS.items() if not (folder / orig).is_file()]
    if missing:
        cmd = ["apt-get", "source", "--download-only", "-qq", "-t", "bookworm", *missing]
        subprocess.run(cmd, check=True, cwd=folder, stdout=subprocess.DEVNULL)
    return [folder / orig for orig in ORIGS.values()]


def upstream_sources() -> list[Path]:
    """The cached orig tarballs (skipped, or failed where required, as ``firmware_cache`` is without
    the images; failed when the images are there and these are not: one target makes both)."""
    import pytest

    from helpers.firmware_images import firmware_cache

    folder = firmware_cache() / "sources"
    found = [folder / orig for orig in ORIGS.values()]
    missing = [p.name for p in found if not p.is_file()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing in {folder}: run `make firmware-cases`")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, required=True, help="the firmware cache (.cache/firmware)")
    args = parser.parse_args(argv)
    got = fetch(args.cache / "sources")
    print(f"firmware sources: {', '.join(p.name for p in got)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

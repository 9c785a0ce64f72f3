"""Component licences in the flow, read by ScanCode: nested archives, a U-Boot-like Licenses/ folder, a
release's licence recorded at ingest, a COPYING edited from upstream's, an unknown licence reported.

Two scans only (ScanCode's approximate matcher reads each licence file for a second or more).
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from dropscan.audit.licenses import scancode_available
from dropscan.audit.manifest import validate
from dropscan.cli import main
from dropscan.local.embedded import EmbeddedStack

from helpers.builders import DROP_FILES, UPSTREAM_FILES, busybox_orig, make_tar, tar_bytes

pytestmark = pytest.mark.skipif(
    not scancode_available() and not os.environ.get("DROPSCAN_REQUIRE_SCANCODE"),
    reason="the licences these drops state are ScanCode's reading of their texts",
)


def licence_text(key: str) -> bytes:
    """A licence's full text out of ScanCode's own licence data (its YAML front matter left out)."""
    import licensedcode

    raw = (Path(licensedcode.__file__).parent / "data" / "licenses" / f"{key}.LICENSE").read_text()
    return raw.split("---\n", 2)[2].lstrip("\n").encode()


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def scan(stack: EmbeddedStack, drop: Path) -> tuple[dict[str, Any], str, str]:
    """The manifest of ``drop``, its e-mail and its HTML report."""
    _, scan_id = stack.client.upload_drop(drop, "acme")
    manifest = stack.client.wait_manifest("acme", scan_id, timeout=600)
    assert manifest is not None
    stack.dispatcher.drain(timeout=60)
    validate(manifest)
    [note] = stack.mailbox.for_scan(scan_id)
    s3 = stack.client.s3
    html = s3.get_object(Bucket=stack.names.results_bucket, Key=manifest["reports"]["html"])["Body"].read()
    return manifest, note.message, html.decode().replace("<wbr>", "")


def test_nested_components_have_their_licences_and_an_edited_copying_is_flagged(
    stack: EmbeddedStack, tmp_path: Path
) -> None:
    lib = {f"lib/l{i}.c": f"int l{i};\n".encode() for i in range(4)}
    upstream = {**UPSTREAM_FILES, **{f"foo-1.0/{p}": d for p, d in lib.items()}}
    stack.client.ingest(make_tar(tmp_path / "foo-1.0.tar.gz", upstream), "foo", "1.0")
    mit = licence_text("mit")
    # the supplier "relicensed" upstream's foo
    foo = {**DROP_FILES, **{f"foo-1.0-acme/{p}": d for p, d in lib.items()}, "foo-1.0-acme/COPYING": mit}
    drop = make_tar(
        tmp_path / "router.tar.gz",
        {
            "README": b"Acme router firmware, GPL sources\n",
            "src/foo-1.0-acme.tar.gz": tar_bytes(foo, "gz"),
            "src/beta-2.0.tar.bz2": tar_bytes(
                {"beta-2.0/LICENSE": mit, "beta-2.0/src/beta.c": b"int beta;\n"}, "bz2"
            ),
            "src/gamma-3.0.zip": zip_bytes(
                {
                    "gamma-3.0/COPYING": UPSTREAM_FILES["foo-1.0/COPYING"],
                    "gamma-3.0/gamma.c": b"// SPDX-License-Identifier: BSD-3-Clause\nint gamma;\n",
                }
            ),
            "src/delta-0.1.tar.gz": tar_bytes({"delta-0.1/delta.c": b"int delta;\n"}, "gz"),
        },
    )
    manifest, mail, html = scan(stack, drop)

    comps = {c["prefix"]: c for c in manifest["components"]}
    foo_c = comps["src/foo-1.0-acme.tar.gz!/"]
    assert (foo_c["package"], foo_c["license"], foo_c["license_source"]) == ("foo", "GPL-2.0-only",
                                                                             "upstream-release")  # fmt: skip
    assert foo_c["license_reason"] == "stated by COPYING of foo 1.0, recorded when the release was ingested"
    beta = comps["src/beta-2.0.tar.bz2!/"]
    assert (beta["license"], beta["license_file"]) == ("MIT", "src/beta-2.0.tar.bz2!/beta-2.0/LICENSE")
    gamma = comps["src/gamma-3.0.zip!/"]
    assert gamma["license"] == "GPL-2.0-only"
    assert gamma["license_file"] == "src/gamma-3.0.zip!/gamma-3.0/COPYING"
    delta = comps["src/delta-0.1.tar.gz!/"]
    assert delta["license"] is None
    assert delta["license_reason"].startswith("no COPYING, LICENSE, Licenses/README")

    flags = {(f["path"], f["kind"]): f for f in manifest["flags"]}
    edited = flags["src/foo-1.0-acme.tar.gz!/foo-1.0-acme/COPYING", "license-file-changed"]
    assert (edited["severity"], edited["evidence"]) == ("action-required", "the drop's file states MIT")
    assert "foo 1.0's, which states GPL-2.0-only" in edited["detail"]
    assert flags["src/gamma-3.0.zip!/gamma-3.0/gamma.c", "license-different"]["severity"] == "review"
    unknown = flags["src/delta-0.1.tar.gz!/", "license-unknown"]
    assert unknown["evidence"] == delta["license_reason"]
    assert {k for _, k in flags} >= {"license-file-changed", "license-different", "license-unknown"}
    assert not any(p == "README" or p.startswith("src/beta") for p, _ in flags)

    # an unknown licence is a review item in every report, never silence
    for text in (mail, html):
        assert "licence unknown" in text
        assert "delta-0.1.tar.gz" in text
    assert "licence unknown: the licences of this component's files cannot be checked" in mail
    assert re.search(r"<b>licence unknown</b> <span class=\"muted\">\(no COPYING", html)


U_BOOT_README = b"""SPDX-License-Identifier: GPL-2.0

  U-Boot is Free Software.  It is copyrighted by Wolfgang Denk and
many others who contributed code (see the actual source code and the
git commit messages for details).  You can redistribute U-Boot and/or
modify it under the terms of version 2 of the GNU General Public
License as published by the Free Software Foundation.  Most of it can
also be distributed, at your option, under any later version of the
GNU General Public License -- see individual files for exceptions.

  NOTE! This license does *not* cover the so-called "standalone"
applications that use U-Boot services by means of the jump table
provided by U-Boot exactly for this purpose - this is merely
considered normal use of U-Boot, and does *not* fall under the
heading of "derived work" -- see file  Licenses/Exceptions  for
details.

License headers in the source files are single line references to Unique
License Identifiers as defined by the Linux Foundation's SPDX project.

Full name\t\t\t\t\tSPDX Identifier\tOSI Approved\tFile name\t\tURI
=======================================================================================
GNU General Public License v2.0 only\t\tGPL-2.0\t\tY\t\tgpl-2.0.txt\t\thttp://www.gnu.org/licenses/gpl-2.0.txt
GNU General Public License v2.0 or later\tGPL-2.0+\tY\t\tgpl-2.0.txt\t\thttp://www.gnu.org/licenses/gpl-2.0.txt
BSD 3-clause "New" or "Revised" License\t\tBSD-3-Clause\tY\t\tbsd-3-clause.txt\thttp://spdx.org/licenses/BSD-3-Clause
MIT License\t\t\t\t\tMIT\t\tY\t\tmit.txt\t\t\thttps://spdx.org/licenses/MIT.html
"""
U_BOOT_EXCEPTIONS = b"""The U-Boot License Exception:

Even though U-Boot in general is covered by the GNU General Public License
(GPL), some parts of it are not: the standalone applications that use
U-Boot services by means of the jump table are not derived works.
"""


def u_boot_files(top: str) -> dict[str, bytes]:
    """A small U-Boot-like release: licences under Licenses/, SPDX tags in the sources."""
    files = {
        f"{top}/Licenses/README": U_BOOT_README,
        f"{top}/Licenses/gpl-2.0.txt": licence_text("gpl-2.0"),
        f"{top}/Licenses/Exceptions": U_BOOT_EXCEPTIONS,
        f"{top}/Makefile": b"# SPDX-License-Identifier: GPL-2.0+\nVERSION = 2023\nPATCHLEVEL = 01\n",
        f"{top}/README": b"Das U-Boot -- the Universal Boot Loader\n",
    }
    for i in range(12):
        files[f"{top}/common/cmd_{i:02}.c"] = (
            f"// SPDX-License-Identifier: GPL-2.0+\n/* command {i} */\nint do_cmd_{i}(void) {{ return 0; }}\n"
        ).encode()
    return files


def router_drop(tmp_path: Path) -> tuple[Path, Path]:
    """The router drop of the acceptance case: the real BusyBox release tarball and a U-Boot with three
    BSD vendor files, nested in an SDK tarball; and the U-Boot release it was made from."""
    busybox = busybox_orig()
    u_boot_release = make_tar(tmp_path / "u-boot-2023.01.tar.gz", u_boot_files("u-boot-2023.01"))
    vendor = {
        f"u-boot-2023.01-acme/drivers/acme/acme_00{i}.c": (
            f"// SPDX-License-Identifier: BSD-3-Clause\n/* Copyright (c) 2023 Acme */\nint acme_{i};\n"
        ).encode()
        for i in (1, 2, 3)
    }
    u_boot = {**u_boot_files("u-boot-2023.01-acme"), **vendor}
    drop = make_tar(
        tmp_path / "router-sdk.tar.gz",
        {
            "README": b"Acme AR-100 router: GPL sources\n",
            "src/busybox-1.35.0.tar.bz2": busybox.read_bytes(),
            "src/u-boot-2023.01-acme.tar.gz": tar_bytes(u_boot, "gz"),
        },
    )
    return drop, u_boot_release


@pytest.mark.acceptance
def test_a_router_drop_of_nested_busybox_and_u_boot(stack: EmbeddedStack, tmp_path: Path) -> None:
    drop, u_boot_release = router_drop(tmp_path)
    stack.client.ingest(busybox_orig(), "busybox", "1.35.0")
    stack.client.ingest(u_boot_release, "u-boot", "2023.01")
    manifest, _, _ = scan(stack, drop)

    comps = {c["prefix"]: c for c in manifest["components"]}
    bb = comps["src/busybox-1.35.0.tar.bz2!/"]
    assert (bb["package"], bb["version"], bb["license"]) == ("busybox", "1.35.0", "GPL-2.0-only")
    assert bb["license_file"] == "src/busybox-1.35.0.tar.bz2!/busybox-1.35.0/LICENSE"
    ub = comps["src/u-boot-2023.01-acme.tar.gz!/"]
    assert (ub["package"], ub["version"], ub["license_source"]) == ("u-boot", "2023.01", "upstream-release")
    assert "GPL-2.0" in ub["license"]  # ScanCode's reading of Licenses/README
    assert ub["license_file"] == "src/u-boot-2023.01-acme.tar.gz!/u-boot-2023.01-acme/Licenses/README"

    flags = sorted((f["path"].rsplit("/", 1)[1], f["kind"], f["severity"]) for f in manifest["flags"])
    assert flags == [(f"acme_00{i}.c", "license-different", "review") for i in (1, 2, 3)]


@pytest.mark.acceptance
def test_a_quiet_scan_of_the_router_drop_prints_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Given the router drop and its two upstream releases
    drop, u_boot_release = router_drop(tmp_path)
    argv = ["scan", str(drop), "--supplier", "acme", "--quiet", "--manifest-out", str(tmp_path / "m.json"),
            "--data-dir", str(tmp_path / "data"), "--upstream", f"busybox@1.35.0={busybox_orig()}",
            "--upstream", f"u-boot@2023.01={u_boot_release}"]  # fmt: skip
    capfd.readouterr()
    # When `dropscan scan --quiet` scans it (ScanCode reads its licence texts, bzip2 its nested tarball)
    assert main(argv) == 0
    # Then nothing reached the terminal, captured at the file descriptors: no warning of any library,
    # no decompressor's chatter, no progress
    assert capfd.readouterr() == ("", "")
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert {c["package"] for c in manifest["components"] if c["identified"]} == {"busybox", "u-boot"}

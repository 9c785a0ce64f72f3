#!/usr/bin/env python3
"""Regenerate tests/data/busybox-acme.manifest.json.gz from a real scan of the BusyBox acceptance drop.

The manifest of `dropscan scan` (every file, class and digest is real) gets what issue 5's triage adds:
each review file's licence statements (found in its real bytes by the rules below, standing in for the
detector), the red flags, the components' upstream licence and trust, the reports' keys, and SHA-1 digests
(from the drop's bytes). Two things are added that the acceptance drop lacks: a `.config` that builds for
another architecture than the prebuilt object, and an unidentified vendor folder `acme-sdk/` with a static
library, an encrypted (unreadable) zip, an MIT tool and an empty file.

    python build_case.py busybox.json --cache CASES --out OUT
    dropscan scan OUT/acme-busybox-1.35.0-gpl.tar.gz \
        --upstream busybox@1.35.0=CASES/busybox_1.35.0.orig.tar.bz2 --supplier acme-router \
        --manifest-out OUT/manifest.json
    python tests/data/make_sample_manifest.py OUT/manifest.json OUT/acme-busybox-1.35.0-gpl.tar.gz
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import tarfile
from pathlib import Path
from typing import Any

from dropscan.audit.manifest import summarize, verdict

OUT = Path(__file__).with_name("busybox-acme.manifest.json.gz")
BUSYBOX = "busybox-1.35.0-acme/"
SDK = "acme-sdk/"

CONFIG = (
    b"#\n# Automatically generated make config: don't edit\n# Busybox version: 1.35.0\n#\n"
    b"CONFIG_HAVE_DOT_CONFIG=y\nCONFIG_STATIC=y\n"
    b'CONFIG_CROSS_COMPILER_PREFIX="arm-linux-gnueabihf-"\n'
    b'CONFIG_EXTRA_CFLAGS="-march=armv7-a -mfpu=neon"\nCONFIG_FEATURE_ACME_CRC=y\n'
)
SDK_FILES: dict[str, tuple[bytes, str]] = {
    "README.txt": (
        b"ACME SDK tools for the AR-7 router board.\nCopyright (c) 2014 Acme Router Inc.\n",
        "text",
    ),
    "tools/mkimage.py": (
        b"#!/usr/bin/env python3\n# SPDX-License-Identifier: MIT\n# Copyright (c) 2014 Acme Router Inc.\n"
        b"import sys\nprint(sys.argv)\n",
        "text",
    ),
    "lib/libacme_hal.a": (
        b"!<arch>\nacme_hal.o/     0           0     0     644     64        `\n" + bytes(64),
        "static-library",
    ),
    "firmware/update.zip": (b"PK\x03\x04\x14\x00\x01\x00" + bytes(56), "archive"),
    ".keep": (b"", "text"),
}

# (pattern, expression, source): the first matching line of a review file is its finding for that rule
LICENCE_RULES: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"SPDX-License-Identifier:\s*([A-Za-z0-9.+\- ]+?)\s*(\*/)?$"), "", "spdx-tag"),
    (re.compile(r"Licensed under GPLv2 or later"), "GPL-2.0-or-later", "scancode"),
    (re.compile(r"Licensed under GPLv2, see file LICENSE"), "GPL-2.0-only", "scancode"),
    (re.compile(r"CONFIDENTIAL AND PROPRIETARY"), "LicenseRef-scancode-proprietary-license", "scancode"),
    (re.compile(r"non-commercial use only"), "LicenseRef-scancode-proprietary-license", "scancode"),
]


def findings(text: str) -> list[dict[str, Any]]:
    out = []
    lines = text.splitlines()
    for pattern, expression, source in LICENCE_RULES:
        for n, line in enumerate(lines[:60], 1):
            m = pattern.search(line)
            if m:
                expr = expression or m.group(1).strip()
                out.append(
                    {
                        "expression": expr,
                        "source": source,
                        "line": n,
                        "end_line": n,
                        "text": line.strip(" */#"),
                        "confidence": 100.0 if source == "spdx-tag" else 95.0,
                    }
                )
                break
    return out


def flag(kind: str, severity: str, path: str, line: int | None, evidence: str, detail: str) -> dict[str, Any]:
    component = SDK if path.startswith(SDK) else BUSYBOX
    return {
        "kind": kind,
        "severity": severity,
        "path": path,
        "line": line,
        "evidence": evidence,
        "component": component,
        "detail": detail,
    }


def flags_of(f: dict[str, Any], text: str) -> list[dict[str, Any]]:
    path, out = f["path"], []
    lines = text.splitlines()
    for n, line in enumerate(lines[:60], 1):
        s = line.strip(" */#")
        if "non-commercial use only" in line:
            out.append(
                flag(
                    "non-commercial",
                    "action-required",
                    path,
                    n,
                    s,
                    "The file may be used for non-commercial purposes only: it cannot ship in a product.",
                )
            )
        elif "CONFIDENTIAL AND PROPRIETARY" in line:
            out.append(
                flag(
                    "proprietary",
                    "action-required",
                    path,
                    n,
                    s,
                    "A proprietary notice in a file distributed under the GPL: the supplier must "
                    "clarify its licence or remove it.",
                )
            )
        elif "SPDX-License-Identifier: BSD-3-Clause" in line and path.startswith(BUSYBOX):
            out.append(
                flag(
                    "license-different",
                    "review",
                    path,
                    n,
                    s,
                    "BSD-3-Clause in a GPL-2.0-only component: compatible, but its notice must be kept.",
                )
            )
        elif "All rights reserved" in line and f["class"] == "added" and not f["licenses"]:
            out.append(
                flag(
                    "no-license-grant", "review", path, n, s, "A copyright notice without any licence grant."
                )
            )
    if f["kind"] in ("elf", "static-library"):
        what = "an ELF object" if f["kind"] == "elf" else "a static library"
        out.append(
            flag(
                "prebuilt-binary",
                "action-required",
                path,
                None,
                f"{f['kind']}, {f['size']:,} bytes",
                f"Prebuilt machine code ({what}) without its source: the GPL requires the "
                "corresponding source.",
            )
        )
    if path == BUSYBOX + ".config":
        n = next(i for i, x in enumerate(lines, 1) if "CROSS_COMPILER_PREFIX" in x)
        out.append(
            flag(
                "arch-mismatch",
                "review",
                path,
                n,
                lines[n - 1],
                "The configuration builds for 32-bit ARM, but drivers/acme/blob_0.o is x86-64 "
                "machine code: the binary cannot come from this source.",
            )
        )
    return out


def record(path: str, data: bytes, kind: str, component: str) -> dict[str, Any]:
    return {
        "path": path,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "kind": kind,
        "class": "empty" if not data else "added",
        "component": component,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", type=Path)
    ap.add_argument("drop", type=Path)
    a = ap.parse_args()
    m = json.loads(a.manifest.read_text())
    with tarfile.open(a.drop) as tf:
        data = {t.name: tf.extractfile(t).read() for t in tf if t.isfile()}  # type: ignore[union-attr]
    files: list[dict[str, Any]] = m["files"]
    files.append(record(BUSYBOX + ".config", CONFIG, "text", BUSYBOX))
    data[BUSYBOX + ".config"] = CONFIG
    for rel, (content, kind) in SDK_FILES.items():
        files.append(record(SDK + rel, content, kind, SDK))
        data[SDK + rel] = content
    next(f for f in files if f["path"] == SDK + "firmware/update.zip")["unreadable"] = (
        "encrypted entry firmware.bin: a password is required"
    )
    all_flags: list[dict[str, Any]] = []
    for f in files:
        f["sha1"] = hashlib.sha1(data[f["path"]]).hexdigest()
        if f["class"] in ("modified", "added"):
            text = data[f["path"]].decode("latin-1") if f["kind"] == "text" else ""
            f["licenses"] = findings(text)
            all_flags += flags_of(f, text)
    files.sort(key=lambda f: f["path"])
    busybox = m["components"][0]
    busybox.update({"license": "GPL-2.0-only", "trust": "high"})
    sdk: dict[str, Any] = {
        "prefix": SDK,
        "package": None,
        "version": None,
        "identified": False,
        "match_pct": 0.0,
        "license": None,
        "trust": None,
        "missing": [],
    }
    m["components"] = [busybox, sdk]
    for c in m["components"]:
        mine = [f for f in files if f["component"] == c["prefix"]]
        s = summarize(mine)
        c["files"], c["classes"] = s["files"], s["classes"]
        if c["identified"]:  # the added .config is one more file the release does not explain
            c["match_pct"] = round(
                100.0 * s["classes"]["identical"] / (s["files"] - s["classes"]["empty"]), 2
            )
    summary = summarize(files)
    summary.update(unreadable=sum(1 for f in files if f.get("unreadable")), components=2, mismatches=0)
    summary["flags"] = {
        s: sum(1 for f in all_flags if f["severity"] == s) for s in ("action-required", "review")
    }
    m["files"], m["flags"], m["summary"] = files, all_flags, summary
    m["verdict"] = "action-required" if summary["flags"]["action-required"] else verdict(m["status"], summary)
    m["triage"] = {"detector": "scancode-toolkit 32.5.0", "files": summary["review"], "seconds": 141.2}
    base = f"results/{m['supplier']}/{m['scan_id']}/"
    m["reports"] = {
        "spdx": base + "sbom.spdx.json",
        "cyclonedx": base + "sbom.cdx.json",
        "html": base + "report.html",
    }
    OUT.write_bytes(gzip.compress(json.dumps(m, indent=1).encode(), mtime=0))
    print(f"{OUT}: {len(files)} files, {len(all_flags)} flags {summary['flags']}")


if __name__ == "__main__":
    main()

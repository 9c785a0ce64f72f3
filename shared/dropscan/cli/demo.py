"""``dropscan demo``: a supplier drop made from real PyPI sdists, scanned through the whole flow."""

from __future__ import annotations

import io
import random
import re
import sys
import tarfile
from pathlib import Path

from dropscan.cli.scan import ScanRequest, parse_upstream, scan_drop

DEMO_UPSTREAMS = ("docutils-0.19", "docutils-0.20.1", "docutils-0.21.2", "requests-2.31.0")
_KW = re.compile(rb"\$Id: [^$\n]*\$")


def _members(archive: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(archive) as tf:
        for m in tf:
            f = tf.extractfile(m) if m.isfile() else None
            if f is not None:
                out[m.name] = f.read()
    return out


def _pack(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mtime, info.mode = len(files[path]), 1_700_000_000, 0o644
            tf.addfile(info, io.BytesIO(files[path]))
    return buf.getvalue()


def _retop(files: dict[str, bytes], top: str) -> dict[str, bytes]:
    return {f"{top}/{p.split('/', 1)[1]}": b for p, b in files.items() if "/" in p}


def build_demo_drop(cache: Path, out: Path) -> tuple[Path, list[str]]:
    """Write the drop into ``out``; returns it and its --upstream arguments."""
    rng = random.Random(3)
    missing = [n for n in DEMO_UPSTREAMS if not (cache / f"{n}.tar.gz").is_file()]
    if missing:
        raise FileNotFoundError(f"demo sdists missing from {cache}: {', '.join(missing)} (run `make demo`)")
    docutils = _retop(_members(cache / "docutils-0.21.2.tar.gz"), "docutils-0.21.2-acme")
    text = sorted(p for p, b in docutils.items() if b and b"\0" not in b[:8192])
    keyworded = [p for p in text if _KW.search(docutils[p])]
    for p in rng.sample(keyworded, 3):  # the vendor's Perforce re-expanded the keywords
        docutils[p] = _KW.sub(
            b"$Id: //depot/acme/sdk/docutils/" + p.rsplit("/", 1)[-1].encode() + b"#7 $", docutils[p]
        )
    plain = [p for p in text if p not in keyworded and p.endswith(".py")]
    for p in rng.sample(plain, 2):
        docutils[p] = docutils[p].replace(b"\n", b"\r\n")
    for p in rng.sample([p for p in plain if b"\r" not in docutils[p]], 2):
        docutils[p] += b"\n# acme: tuned for the AC-1200 router\n"
    for p in rng.sample([p for p in plain if p.endswith("__init__.py") is False], 2):
        del docutils[p]
    docutils["docutils-0.21.2-acme/acme/board.py"] = (
        b"# Copyright (c) 2024 Acme Router Inc.\nBOARD = 'AC-1200'\n"
    )
    docutils["docutils-0.21.2-acme/acme/fastcrc.c"] = (
        b"/* Fast CRC. Permission granted for non-commercial use only. */\nunsigned crc(void) { return 0; }\n"
    )
    requests = _members(cache / "requests-2.31.0.tar.gz")
    api = "requests-2.31.0/requests/api.py"
    requests[api] = requests[api].replace(b"timeout", b"timeout_s", 1)
    members = dict(docutils)
    members["docutils-0.21.2-acme/vendor/requests-2.31.0.tar.gz"] = _pack(requests)
    out.mkdir(parents=True, exist_ok=True)
    drop = out / "acme-router-docutils-gpl.tar.gz"
    drop.write_bytes(_pack(members))
    upstreams = []
    for name in DEMO_UPSTREAMS:
        pkg, ver = name.rsplit("-", 1)
        upstreams.append(f"{pkg}@{ver}={cache / (name + '.tar.gz')}")
    return drop, upstreams


def run_demo(cache: Path, out: Path, *, quiet: bool = False) -> int:
    drop, upstreams = build_demo_drop(cache, out)
    print(f"demo drop: {drop} (docutils 0.21.2 as a vendor ships it, requests 2.31.0 nested inside)")
    print(f"upstream database: {', '.join(DEMO_UPSTREAMS)}\n")
    sys.stdout.flush()
    rc = scan_drop(
        ScanRequest(
            drop=drop,
            supplier="acme-router",
            upstreams=[parse_upstream(u) for u in upstreams],
            manifest_out=out / "manifest.json",
            eml_dir=out / "notifications",
            data_dir=out / "data",
            quiet=quiet,
        )
    )
    print(f"\nmanifest: {out / 'manifest.json'}; reports: {out / 'report.html'}, {out / 'sbom.spdx.json'}, ")
    print(f"{out / 'sbom.cdx.json'}; e-mail: {out / 'notifications'}/")
    print(
        "\nTo review in a browser (docs/web.md): run `dropscan up`, then `dropscan users add alice --group"
        " acme-router` (it prints a temporary password: at her first sign-in she chooses her own; add"
        " `--password P` for a permanent one, as a script would), scan the drop against it with"
        " `--endpoint-url` and sign in at the review desk address `dropscan up` printed."
    )
    return rc

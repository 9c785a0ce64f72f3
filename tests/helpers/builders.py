"""Test data builders: archives made in the test, the small upstream/drop pair, event samples."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from dropscan.local.dispatcher import LambdaContext


def make_tar(path: Path, files: dict[str, bytes], compression: str = "gz") -> Path:
    """A tar archive of ``files`` (``compression`` '' for plain tar, 'gz', 'bz2', 'xz')."""
    mode = f"w:{compression}" if compression else "w"
    with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tf:  # type: ignore[call-overload]
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_600_000_000, 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


def tar_bytes(files: dict[str, bytes], compression: str = "gz") -> bytes:
    buf = io.BytesIO()
    mode = f"w:{compression}" if compression else "w"
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.PAX_FORMAT) as tf:  # type: ignore[call-overload]
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_of(
    *members: tarfile.TarInfo | tuple[str, bytes],
    fmt: int = tarfile.PAX_FORMAT,
    global_headers: dict[str, str] | None = None,
) -> bytes:
    """A plain tar of ``members``: (name, bytes) pairs, or TarInfo headers for links and special files.

    Names that are not UTF-8 are kept as bytes (surrogateescape); ``global_headers`` opens the tar with
    a pax global header, as git archive writes one.
    """
    out = io.BytesIO()
    with tarfile.open(
        fileobj=out,
        mode="w",
        format=fmt,
        encoding="utf-8",
        errors="surrogateescape",
        pax_headers=global_headers,
    ) as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    return out.getvalue()


def make_zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


#: a small upstream release with the situations the classes distinguish
UPSTREAM_FILES: dict[str, bytes] = {
    "foo-1.0/Makefile": b"all:\n\tcc -o foo main.c util.c\n",
    "foo-1.0/main.c": b"/* $Id: main.c,v 1.4 2009/01/01 12:00:00 dev Exp $ */\nint main(void) { return 0; }\n",  # noqa: E501
    "foo-1.0/util.c": b"int util(void) {\n\treturn 1;\n}\n",
    "foo-1.0/util.h": b"int util(void);\n",
    "foo-1.0/README": b"foo: a tiny program\n",
    "foo-1.0/doc/notes.txt": b"notes\n",
    "foo-1.0/COPYING": b"GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991\n",
    "foo-1.0/empty.txt": b"",
}

#: the supplier's version of it: one file per class, one upstream file left out
DROP_FILES: dict[str, bytes] = {
    "foo-1.0-acme/Makefile": UPSTREAM_FILES["foo-1.0/Makefile"],  # identical
    "foo-1.0-acme/main.c": UPSTREAM_FILES["foo-1.0/main.c"].replace(
        b"main.c,v 1.4 2009/01/01 12:00:00 dev Exp", b"//depot/acme/foo/main.c#12"
    ),  # vcs-keywords
    "foo-1.0-acme/util.c": UPSTREAM_FILES["foo-1.0/util.c"].replace(b"\n", b"  \r\n"),  # whitespace
    "foo-1.0-acme/util.h": b"int util(void); /* acme */\n",  # modified
    "foo-1.0-acme/README": UPSTREAM_FILES["foo-1.0/README"],
    "foo-1.0-acme/COPYING": UPSTREAM_FILES["foo-1.0/COPYING"],
    "foo-1.0-acme/acme/board.c": b"int board = 1200;\n",  # added
    "foo-1.0-acme/empty.txt": b"",  # empty
}
EXPECTED_CLASSES = {
    "foo-1.0-acme/Makefile": "identical",
    "foo-1.0-acme/main.c": "vcs-keywords",
    "foo-1.0-acme/util.c": "whitespace",
    "foo-1.0-acme/util.h": "modified",
    "foo-1.0-acme/README": "identical",
    "foo-1.0-acme/COPYING": "identical",
    "foo-1.0-acme/acme/board.c": "added",
    "foo-1.0-acme/empty.txt": "empty",
}


EVENTS = Path(__file__).parent.parent / "events"


def load_event(name: str, **replace: str) -> dict[str, Any]:
    """An event sample from tests/events with its placeholders (BUCKET, KEY, SCAN_ID, ...) filled in."""
    text = (EVENTS / name).read_text()
    for k, v in replace.items():
        text = text.replace(k, v)
    data: dict[str, Any] = json.loads(text)
    return data


def context(name: str = "test") -> LambdaContext:
    return LambdaContext(name, 1024, 60, "req-1", f"arn:aws:lambda:us-east-1:123456789012:function:{name}")


def cases_dir() -> Path | None:
    """The acceptance data downloaded by ``make cases`` (None when absent)."""
    d = os.environ.get("DROPSCAN_CASES_DIR")
    return Path(d) if d and Path(d).is_dir() else None


def busybox_orig() -> Path:
    """The BusyBox 1.35.0 release tarball of the acceptance data; the test is skipped without it, or fails
    where the data is required (``DROPSCAN_REQUIRE_CASES``, as in CI)."""
    cache = cases_dir()
    if cache is None or not (cache / "busybox_1.35.0.orig.tar.bz2").is_file():
        if os.environ.get("DROPSCAN_REQUIRE_CASES"):
            pytest.fail("acceptance data missing: run `make cases`")
        pytest.skip("acceptance data not downloaded (make cases)")
    return cache / "busybox_1.35.0.orig.tar.bz2"


def busybox_case(out: Path) -> Path:
    """The BusyBox acceptance drop, its expected.json and upstreams.txt, built into ``out`` by
    ../shared/cases' build_case.py from the recipe busybox.json."""
    cache, src = busybox_orig().parent, os.environ.get("DROPSCAN_CASES_SRC")
    if not src:
        if os.environ.get("DROPSCAN_REQUIRE_CASES"):
            pytest.fail("acceptance data required but DROPSCAN_CASES_SRC not set (make test sets it)")
        pytest.skip("DROPSCAN_CASES_SRC not set (make test sets it)")
    recipe = [str(Path(src) / "build_case.py"), str(Path(src) / "busybox.json"), "--cache", str(cache)]
    subprocess.run([sys.executable, *recipe, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


def next_drop(first: Path, out: Path, edit: list[str], add: str) -> Path:
    """The supplier's next drop after the BusyBox acceptance drop ``first``: the files ``edit`` (paths
    under the top folder) changed and ``add`` added, its top folder renamed for 1.35.1, as a supplier
    would ship it (tests/e2e/test_decisions_busybox.py, test_web_busybox.py)."""
    with tarfile.open(first) as src, tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as dst:
        for member in src:
            top, _, rest = member.name.partition("/")
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            member.name = f"{top.replace('1.35.0', '1.35.1')}/{rest}" if rest else member.name
            if data is not None and rest in edit:
                data += b"\n/* acme 1.35.1: reworked */\n"
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
            if rest == "Makefile":
                top_name = member.name.split("/", 1)[0]
        info = tarfile.TarInfo(f"{top_name}/{add}")
        body = b"/* acme 1.35.1: new board support */\nint acme_board_v2;\n"
        info.size, info.mtime = len(body), 1_700_000_000
        dst.addfile(info, io.BytesIO(body))
    return out

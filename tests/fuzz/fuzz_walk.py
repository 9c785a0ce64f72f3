"""atheris fuzz target for dropscan.archive.walk: any bytes end in records or a clean error, quickly.

Run with ``make fuzz`` (FUZZ_SECONDS, default 120) or ``python tests/fuzz/fuzz_walk.py [corpus dir]
-max_total_time=N``. The seeds are small archives of every kind the walker opens, nested ones included;
the fuzzer mutates them. A crash is anything but FileRecords or ArchiveReadError (LimitExceeded is one),
an invariant broken on a record, or an input that takes more than a few seconds.
"""

from __future__ import annotations

import io
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from dropscan.archive import ArchiveReadError, Limits, walk
    from dropscan.models import Kind

# small bounds, so that a mutated size field cannot make one input take minutes
LIMITS = Limits(total_bytes=64 << 20, files=10_000, depth=4, ratio_after=8 << 20, member_bytes=32 << 20,
                spool_bytes=64 << 20)  # fmt: skip
_HEX = frozenset("0123456789abcdef")


def seeds() -> list[bytes]:
    def tar(members: dict[str, bytes], mode: str = "w") -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode=mode) as archive:  # type: ignore[call-overload]
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            link = tarfile.TarInfo("link")
            link.type, link.linkname = tarfile.SYMTYPE, "../x"
            archive.addfile(link)
        return out.getvalue()

    def zip_(members: dict[str, bytes]) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        return out.getvalue()

    files = {"a.c": b"/* $Id: a.c,v 1 $ */\r\nint a;  \n", "bin": b"\x7fELF\0\0", "d/e": b"e" * 300}
    inner = tar(files, "w:gz")
    return [tar(files), tar(files, "w:gz"), tar(files, "w:bz2"), tar(files, "w:xz"), zip_(files),
            tar({"in.tar.gz": inner, "z": b"z"}), zip_({"in.tar.gz": inner})]  # fmt: skip


def check(data: bytes) -> None:
    stream = io.BytesIO(data)
    try:
        with tempfile.TemporaryDirectory() as spool:
            for record in walk(stream, "upload", limits=LIMITS, spool_dir=spool):
                assert record.path and record.path.isprintable(), record.path
                assert len(record.sha256) == 64 and set(record.sha256) <= _HEX
                assert record.size >= 0
                Kind(record.kind)
                if record.kind in (Kind.SYMLINK, Kind.SPECIAL):
                    assert record.size == 0
    except ArchiveReadError:
        pass


def main() -> None:
    argv = list(sys.argv)
    corpus = next((a for a in argv[1:] if not a.startswith("-")), None)
    if corpus is None:  # seeds in a fresh corpus dir, so libFuzzer mutates real archives
        corpus = tempfile.mkdtemp(prefix="dropscan-fuzz-")
        argv.insert(1, corpus)
    for i, seed in enumerate(seeds()):
        path = Path(corpus) / f"seed-{i}"
        if not path.exists():
            path.write_bytes(seed)
    atheris.Setup(argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

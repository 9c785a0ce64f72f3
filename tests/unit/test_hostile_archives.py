"""Hostile and broken uploads: every one ends in bounded time and memory with a precise reason.

Each input is built here, small on disk: bombs are zero runs deflated once and repeated (about 1 KB per
MiB), zips with tricks are written byte by byte. docs/hostile-input.md lists the cases and these tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import tarfile
import tempfile
import unicodedata
import zipfile
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, cast

import libarchive
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dropscan.archive import ArchiveReadError, LimitExceeded, Limits, walk
from dropscan.archive import walker as archive_module
from dropscan.archive.paths import MAX_PATH, escape, unescape
from dropscan.models import FileRecord, Kind

from helpers import bombs
from helpers.bombs import GiB, MiB
from helpers.builders import tar_of


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Counting:
    """A non-seekable stream (like an S3 body) that counts what was read of it."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        block = self._data.read(size)
        self.read_bytes += len(block)
        return block


def source(data: bytes, seekable: bool) -> Any:
    return io.BytesIO(data) if seekable else Counting(data)


def walked(data: bytes, seekable: bool = False, **options: Any) -> dict[str, FileRecord]:
    return {r.path: r for r in walk(source(data, seekable), "upload", **options)}


def special(name: str, kind: bytes, **fields: Any) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def gz(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data, mtime=0)


BOMB = "decompression bomb: "
seekable_or_stream = pytest.mark.parametrize("seekable", [True, False], ids=["seekable", "stream"])


# --- decompression bombs ----------------------------------------------------------------------------


@seekable_or_stream
def test_a_member_of_gigabytes_of_zeros_is_stopped_while_it_streams(seekable: bool) -> None:
    # Given a 4 MB .tar.gz whose one member is 4 GiB of zeros
    data = bombs.tar_gz_of_zeros([("disk.img", 4 * GiB)])
    assert len(data) < 5 * MiB
    stream = source(data, seekable)
    # When walked, Then it is rejected for that member's ratio, long before the end of the input
    with pytest.raises(LimitExceeded) as caught:
        list(walk(stream, "drop.tar.gz"))
    assert caught.value.reason == BOMB + "member disk.img expands beyond 1000x its compressed size"
    if not seekable:
        assert stream.read_bytes < len(data) / 2


def test_many_members_below_the_ratio_floor_add_up_to_a_bomb() -> None:
    # Given 40 members of 48 MiB zeros each: none alone reaches the 64 MiB where the member ratio counts
    data = bombs.tar_gz_of_zeros([(f"pad{i}.bin", 48 * MiB) for i in range(40)])
    # Then the upload as a whole expands beyond the ratio, and that is the reason
    with pytest.raises(LimitExceeded) as caught:
        list(walk(Counting(data), "drop.tar.gz"))
    assert caught.value.reason == BOMB + "the upload expands beyond 1000x its size"


@seekable_or_stream
def test_a_high_ratio_zip_member_is_rejected(seekable: bool) -> None:
    data = bombs.zip_of_zeros([("readme.txt", 10), ("zeros.bin", 2 * GiB)])
    seen: list[str] = []
    with pytest.raises(LimitExceeded) as caught:
        seen.extend(r.path for r in walk(source(data, seekable), "drop.zip"))
    assert caught.value.reason == BOMB + "member zeros.bin expands beyond 1000x its compressed size"
    assert seen == ["readme.txt"]


def test_a_tar_header_claiming_a_huge_size_is_rejected_before_reading() -> None:
    data = bombs.tar_header("huge.bin", 1 << 40) + bytes(512)
    with pytest.raises(LimitExceeded) as caught:
        list(walk(Counting(data), "drop.tar"))
    assert caught.value.reason == "member huge.bin claims 1,099,511,627,776 bytes, over the 16 GiB limit"


def test_a_member_over_the_member_limit_is_stopped_at_the_limit() -> None:
    # Given a zip written as a stream: its local headers declare no sizes (they follow the data)
    class Unseekable(io.BytesIO):
        def tell(self) -> int:
            raise OSError("not seekable")

    out = Unseekable()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("small", b"s")
        with archive.open("a.img", "w") as member:
            for _ in range(3):
                member.write(os.urandom(MiB))
    # When read as a stream with a 2 MiB member limit, Then it stops at the limit, not at the end
    with pytest.raises(LimitExceeded, match=r"^member a.img is larger than 2 MiB$"):
        list(walk(Counting(out.getvalue()), "d.zip", limits=Limits(member_bytes=2 * MiB)))


def test_a_nested_zip_bomb_upload_is_rejected() -> None:
    # Given 42.zip in small: 4 levels of 16 zips, 256 MiB of zeros at the bottom (1 TiB in all), 15 KB
    data = bombs.nested_zip_bomb(levels=4, fan_out=16, zeros=256 * MiB)
    assert len(data) < 32 * 1024
    # Then the upload is rejected as a whole after a bounded amount of work
    with pytest.raises(LimitExceeded) as caught:
        list(walk(io.BytesIO(data), "42.zip"))
    assert caught.value.reason == BOMB + "the upload expands beyond 1000x its size"


def test_a_nested_bomb_in_a_drop_is_one_unreadable_file_and_the_rest_is_scanned() -> None:
    bomb = bombs.nested_zip_bomb(levels=4, fan_out=16, zeros=256 * MiB)
    source_file = os.urandom(300_000)
    data = tar_of(("src/a.bin", source_file), ("test/data/bomb.zip", bomb), ("src/z.c", b"int z;\n"))
    records = walked(gz(data))
    assert sorted(records) == ["src/a.bin", "src/z.c", "test/data/bomb.zip"]
    unreadable = records["test/data/bomb.zip"]
    assert (unreadable.kind, unreadable.sha256) == (Kind.ARCHIVE, sha(bomb))
    assert unreadable.unreadable == BOMB + "nested archive test/data/bomb.zip expands beyond 1000x its size"
    assert records["src/a.bin"].sha256 == sha(source_file)


def test_a_member_bomb_in_a_nested_archive_names_the_member() -> None:
    inner = bombs.zip_of_zeros([("big/zeros.bin", 1 * GiB)])
    filler = os.urandom(2 * MiB)  # keeps the expansion under 1000x the upload itself
    records = walked(tar_of(("fill", filler), ("inner.zip", inner)))
    assert records["inner.zip"].unreadable == (
        BOMB + "member inner.zip!/big/zeros.bin expands beyond 1000x its compressed size"
    )


def test_overlapping_zip_entries_are_caught_by_the_ratio_of_the_whole_upload() -> None:
    # Given Fifield's overlapping zip: 300 entries (35 KB) that all decompress the same 8 MiB kernel
    data = bombs.overlapping_zip(300, 8 * MiB)
    assert len(data) < 64 * 1024
    # When read through its central directory, Then the upload's expansion stops it
    with pytest.raises(LimitExceeded) as caught:
        list(walk(io.BytesIO(data), "overlap.zip"))
    assert caught.value.reason == BOMB + "the upload expands beyond 1000x its size"
    # and read as a stream (as the pipeline reads S3) only the first local header is a member at all
    assert len(walked(data, seekable=False)) == 1


def test_the_total_unpacked_limit_ends_the_walk() -> None:
    data = tar_of(*((f"f{i}", os.urandom(300_000)) for i in range(10)))
    seen: list[str] = []
    with pytest.raises(LimitExceeded, match=r"^more than 1 MiB unpacked$"):
        seen.extend(r.path for r in walk(Counting(data), "d.tar", limits=Limits(total_bytes=MiB)))
    assert seen == ["f0", "f1", "f2"]


def test_the_file_limit_counts_members_at_every_level() -> None:
    inner = tar_of(*((f"in{i}", b"x") for i in range(6)))
    data = tar_of(("a", b"a"), ("inner.tar", inner), ("b", b"b"))
    assert len(walked(data, limits=Limits(files=9))) == 8
    with pytest.raises(LimitExceeded, match=r"^more than 8 archive members$"):
        walked(data, limits=Limits(files=8))


def test_a_nested_archive_beyond_the_spool_space_is_hashed_but_not_opened() -> None:
    inner = tar_of(("big", os.urandom(3 * MiB)))
    records = walked(tar_of(("inner.tar", inner), ("after", b"z")), limits=Limits(spool_bytes=2 * MiB))
    assert sorted(records) == ["after", "inner.tar"]
    record = records["inner.tar"]
    assert (record.kind, record.sha256) == (Kind.ARCHIVE, sha(inner))
    assert record.unreadable == "nested archive beyond the 2 MiB unpack space: not opened"
    # the budget came back: a small nested archive later on is opened
    small = tar_of(("s", b"s"))
    records = walked(tar_of(("inner.tar", inner), ("small.tar", small)), limits=Limits(spool_bytes=2 * MiB))
    assert "small.tar!/s" in records


def test_limits_inside_a_nested_archive_make_only_it_unreadable() -> None:
    # Given a small nested tar.gz whose member declares 3 MiB, and a member limit of 1 MiB
    inner = gz(tar_of(("ok", b"fine"), ("large", b"a" * 3 * MiB)))
    outer = tar_of(("before", b"1"), ("inner.tar.gz", inner), ("after", b"2"))
    records = walked(outer, limits=Limits(member_bytes=MiB))
    # Then the nested archive is one unreadable file, refused at that header, and the rest is scanned
    assert sorted(records) == ["after", "before", "inner.tar.gz"]
    assert records["inner.tar.gz"].unreadable == (
        f"member inner.tar.gz!/large claims {3 * MiB:,} bytes, over the 1 MiB limit"
    )


def test_bombs_leave_memory_bounded() -> None:
    import tracemalloc

    data = bombs.tar_gz_of_zeros([("disk.img", 4 * GiB)])
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded):
            list(walk(Counting(data), "d.tar.gz"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 48 * MiB


# --- names and paths --------------------------------------------------------------------------------


def test_dot_dot_and_absolute_names_are_recorded_with_a_note() -> None:
    records = walked(tar_of(("../../etc/cron.d/x", b"1"), ("/etc/passwd", b"2"), ("a/../../b", b"3")))
    assert records["../../etc/cron.d/x"].note == "name climbs out of the archive with .."
    assert records["etc/passwd"].note == "absolute name /etc/passwd: leading / removed"
    assert records["a/../../b"].note == "name climbs out of the archive with .."


def test_names_that_collide_once_normalised_are_all_kept_and_told_apart() -> None:
    nfc, nfd = unicodedata.normalize("NFC", "café.c"), unicodedata.normalize("NFD", "café.c")
    data = tar_of(
        ("a/b", b"1"), ("a//b", b"2"), ("./a/./b", b"3"), ("x/../a/b", b"4"), (nfc, b"5"), (nfd, b"6")
    )
    records = list(walk(io.BytesIO(data), "d.tar"))
    paths = [r.path for r in records]
    assert len(set(paths)) == len(paths) == 6
    assert [r.sha256 for r in records] == [sha(str(i).encode()) for i in range(1, 7)]
    assert paths[0] == "a/b" and paths[4] == nfc
    for record in records[1:4] + records[5:]:
        assert record.note == "duplicate: an earlier member has the same path once normalised; renamed"
    assert paths[1:4] == ["a//b (duplicate 2)", "a/./b (duplicate 3)", "x/../a/b (duplicate 4)"]


def test_duplicate_members_are_both_kept() -> None:
    records = list(walk(io.BytesIO(tar_of(("src/x.c", b"first"), ("src/x.c", b"second"))), "d.tar"))
    assert [(r.path, r.sha256) for r in records] == [
        ("src/x.c", sha(b"first")),
        ("src/x.c (duplicate 2)", sha(b"second")),
    ]
    # a member really named like the renamed one is told apart too
    data = tar_of(("x", b"1"), ("x", b"2"), ("x (duplicate 2)", b"3"))
    assert [r.path for r in walk(io.BytesIO(data), "d")] == [
        "x",
        "x (duplicate 2)",
        "x (duplicate 2) (duplicate 2)",
    ]


def test_links_are_recorded_with_their_targets_and_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"host data\n")
    data = tar_of(
        special("abs", tarfile.SYMTYPE, linkname=str(secret)),
        special("sub/up", tarfile.SYMTYPE, linkname="../../x"),
        special("sub/in", tarfile.SYMTYPE, linkname="../README"),
        ("README", b"hello\n"),
        special("hard", tarfile.LNKTYPE, linkname="README"),
        special("dangling", tarfile.LNKTYPE, linkname="nowhere"),
    )
    records = walked(data)
    for name in ("abs", "sub/up", "sub/in", "hard", "dangling"):
        link = records[name]
        assert (link.size, link.sha256, link.kw, link.ws) == (0, sha(b""), sha(b""), sha(b""))
    assert (records["abs"].kind, records["abs"].link, records["abs"].note) == (
        Kind.SYMLINK,
        str(secret),
        "absolute link target",
    )
    assert records["sub/up"].note == "link target leaves the archive"
    assert (records["sub/in"].link, records["sub/in"].note) == ("../README", None)
    assert (records["hard"].kind, records["hard"].link) == (Kind.HARDLINK, "README")
    assert records["dangling"].link == "nowhere"


def test_a_cpio_hard_link_carrying_data_is_digested(tmp_path: Path) -> None:
    target = tmp_path / "links.cpio"
    with libarchive.file_writer(str(target), "cpio_newc") as writer:
        writer.add_file_from_memory("a", 5, b"data\n")
    records = walked(target.read_bytes())
    assert records["a"].sha256 == sha(b"data\n")


def test_devices_and_fifos_are_recorded_and_never_read() -> None:
    data = tar_of(
        special("dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3),
        special("dev/sda", tarfile.BLKTYPE, devmajor=8, devminor=0),
        special("run/pipe", tarfile.FIFOTYPE),
    )
    records = walked(data)
    notes = {path: (r.kind, r.size, r.note) for path, r in records.items()}
    assert notes == {
        "dev/null": (Kind.SPECIAL, 0, "character device 1,3: not read"),
        "dev/sda": (Kind.SPECIAL, 0, "block device 8,0: not read"),
        "run/pipe": (Kind.SPECIAL, 0, "FIFO: not read"),
    }


def test_backslashes_in_zip_names_are_folders_and_collisions_are_told_apart() -> None:
    data = bombs.zip_bytes({"src\\win.c": b"dos", "src/win.c": b"unix"})
    records = list(walk(io.BytesIO(data), "d.zip"))
    assert [(r.path, r.sha256) for r in records] == [
        ("src/win.c", sha(b"dos")),
        ("src/win.c (duplicate 2)", sha(b"unix")),
    ]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["gnu", "pax"])
def test_names_that_are_not_utf8_are_kept_losslessly_and_shown_escaped(fmt: int) -> None:
    raw = b"caf\xe9 100%.txt"
    name = raw.decode("utf-8", "surrogateescape")
    [record] = walk(io.BytesIO(tar_of((name, b"x"), fmt=fmt)), "d.tar")
    assert record.path == "caf%E9 100%25.txt"
    assert record.note == "name is not printable UTF-8: bytes shown as %XX"
    assert unescape(record.path) == raw


def test_zip_names_that_are_not_utf8_are_escaped() -> None:
    data = bombs.zip_bytes({"plain.txt": b"x"}).replace(b"plain.txt", b"pl\xe4in.tx\xff")
    [record] = walk(io.BytesIO(data), "d.zip")
    assert unescape(record.path) == b"pl\xe4in.tx\xff"


def test_control_characters_and_bidi_overrides_in_names_are_escaped() -> None:
    records = walked(tar_of(("evil\x1b[31m\n.c", b"1"), ("doc\u202etxt.exe", b"2")))
    assert sorted(records) == ["doc%E2%80%AEtxt.exe", "evil%1B[31m%0A.c"]


def test_very_long_names_are_shortened_and_stay_distinct() -> None:
    a, b = "d/" * 40_000 + "a.c", "d/" * 40_000 + "b.c"
    records = list(walk(io.BytesIO(tar_of((a, b"1"), (b, b"2"))), "d.tar"))
    assert len({r.path for r in records}) == 2
    for record in records:
        assert len(record.path) == MAX_PATH
        assert record.note == "name of 80,003 bytes shortened"


def test_nothing_is_written_outside_the_spool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a drop whose members try every path trick, and whose nested archive must be spooled to disk
    spool, work = tmp_path / "spool", tmp_path / "work"
    spool.mkdir()
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(archive_module, "SPOOL_MEMORY", 0)
    monkeypatch.setattr(archive_module, "RECORDS_IN_MEMORY", 1)
    escape_target = tmp_path / "escaped"
    nested = tar_of(
        *((f"n{i}", b"n") for i in range(4)), ("big", os.urandom(2 * MiB)), ("../../escaped", b"!")
    )
    data = tar_of(
        ("../escaped", b"!"),
        (str(tmp_path / "absolute"), b"!"),
        special("link", tarfile.SYMTYPE, linkname=str(tmp_path)),
        ("link/through", b"!"),
        ("nested.tar", nested),
    )
    # When walked with every open for writing watched
    writes: list[str] = []
    with audit_opens(writes):
        records = list(walk(Counting(data), "d.tar", spool_dir=str(spool)))
    # Then the walk spooled to spool_dir only, and created nothing anywhere else
    assert len(records) == 10
    assert writes, "the nested archive and the records were meant to spill to disk"
    assert all(path == str(spool) or path.startswith(str(spool) + os.sep) for path in writes), writes
    assert not escape_target.exists() and not (tmp_path / "absolute").exists()
    assert list(work.iterdir()) == [] and list(spool.iterdir()) == []


_WATCH: list[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _WATCH or event not in ("open", "os.mkdir", "os.rename", "os.symlink", "os.link"):
        return
    path, *rest = args
    if event == "open":
        mode, flags = rest
        writing = (mode is not None and any(c in str(mode) for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        )
        if not writing:
            return
    _WATCH[-1].append(os.fspath(path) if not isinstance(path, int) else f"fd {path}")


@contextlib.contextmanager
def audit_opens(into: list[str]) -> Iterator[None]:
    if not getattr(sys, "_dropscan_audit", False):
        sys.addaudithook(_audit)
        sys._dropscan_audit = True  # type: ignore[attr-defined]
    _WATCH.append(into)
    try:
        yield
    finally:
        _WATCH.pop()


# --- corruption ---------------------------------------------------------------------------------------


def corpus_tar() -> bytes:
    # 2.4 MB: several bzip2 blocks, so a cut leaves whole members before it
    return tar_of(*((f"f{i:02}", os.urandom(1000) * 40) for i in range(60)))


def compressed(kind: str, data: bytes, tmp_path: Path) -> bytes:
    import bz2
    import lzma

    if kind == "zstd":
        target = tmp_path / "t.tar.zst"
        with libarchive.file_writer(str(target), "ustar", "zstd") as writer:
            for i in range(60):
                block = os.urandom(1000) * 40
                writer.add_file_from_memory(f"f{i:02}", len(block), block)
        return target.read_bytes()
    compress: dict[str, Callable[[bytes], bytes]] = {"gz": gz, "bz2": bz2.compress, "xz": lzma.compress}
    return compress[kind](data)


COMPRESSORS = ["gz", "bz2", "xz", "zstd"]
#: libarchive 3.8 (the bundled one, dropscan.archive.native) reports the tar's truncation for every codec
LIBARCHIVE_38 = (
    "Truncated tar archive detected while reading data",
    "Truncated tar archive detected while reading next header",
)
REASONS = {  # libarchive's words, and those of dropscan.archive.inflate (thread or process)
    "gz": ("truncated gzip input", *LIBARCHIVE_38),
    "bz2": ("truncated bzip2 input", *LIBARCHIVE_38),
    "xz": ("Lzma library error:  No progress is possible", "truncated xz input", *LIBARCHIVE_38),
    "zstd": ("Truncated zstd input", *LIBARCHIVE_38),
}


@pytest.mark.parametrize("mode", ["off", "thread", "process"], ids=["in-libarchive", "thread", "process"])
@pytest.mark.parametrize("kind", COMPRESSORS)
def test_a_truncated_compressed_tar_fails_with_the_reason_after_what_was_read(
    kind: str, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DROPSCAN_INFLATE", mode)
    data = compressed(kind, corpus_tar(), tmp_path)
    seen: list[str] = []
    with pytest.raises(ArchiveReadError) as caught:
        seen.extend(r.path for r in walk(Counting(data[: len(data) * 2 // 3]), f"d.tar.{kind}"))
    assert not isinstance(caught.value, LimitExceeded)
    assert str(caught.value) in REASONS[kind]
    assert seen and all(p.startswith("f") for p in seen)


@pytest.mark.parametrize("mode", ["off", "thread", "process"], ids=["in-libarchive", "thread", "process"])
@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
def test_both_decompression_paths_give_the_same_records(
    kind: str, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DROPSCAN_INFLATE", mode)
    plain = corpus_tar()
    expected = [(r.path, r.sha256) for r in walk(io.BytesIO(plain), "d.tar")]
    two_streams = compressed(kind, plain, tmp_path) + compressed(kind, tar_of(("tail", b"t")), tmp_path)
    got = [(r.path, r.sha256) for r in walk(Counting(compressed(kind, plain, tmp_path)), "d")]
    assert got == expected
    # concatenated streams (pigz, pbzip2, pixz) are one archive: tar stops at the first end blocks
    assert [r.path for r in walk(Counting(two_streams), "d")] == [p for p, _ in expected]


class FailingAfter(Counting):
    """A source whose connection breaks after ``limit`` bytes, as an S3 body's can."""

    def __init__(self, data: bytes, limit: int) -> None:
        super().__init__(data)
        self.limit = limit

    def read(self, size: int = -1) -> bytes:
        if self.read_bytes >= self.limit:
            raise ConnectionResetError("connection reset by peer")
        return super().read(size)


def _children() -> list[int]:
    """Live child processes of this one (a forked decompressor left behind would be one)."""
    me, found = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == me and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_source_that_fails_midway_raises_its_own_error(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DROPSCAN_INFLATE", mode)
    data = compressed("xz", tar_of(("noise", os.urandom(4 << 20)), ("after", b"x")), tmp_path)
    with pytest.raises(ConnectionResetError):
        list(walk(FailingAfter(data, len(data) // 2), "d.tar.xz"))
    assert _children() == []


@pytest.mark.parametrize("kind", ["gz", "xz"])
def test_an_abandoned_walk_leaves_no_decompressor_behind(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DROPSCAN_INFLATE", "process")
    before = _children()
    tar = tar_of(("first", b"1"), ("noise", os.urandom(4 << 20)), ("after", b"x"))
    records = cast(
        Generator[FileRecord, None, None], walk(Counting(compressed(kind, tar, tmp_path)), f"d.tar.{kind}")
    )
    first = next(records)
    assert _children() != before  # the decompressor runs in a child process
    records.close()
    assert first.path == "first" and _children() == before


@pytest.mark.parametrize("kind", COMPRESSORS)
def test_a_garbled_compressed_tar_fails(kind: str, tmp_path: Path) -> None:
    data = bytearray(compressed(kind, corpus_tar(), tmp_path))
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0x55
    with pytest.raises(ArchiveReadError) as caught:
        list(walk(Counting(bytes(data)), f"d.tar.{kind}"))
    assert not isinstance(caught.value, LimitExceeded)
    assert str(caught.value)


def test_garbage_inside_a_plain_tar_fails_instead_of_skipping_to_the_next_header() -> None:
    data = bytearray(corpus_tar())
    data[512 + 40_448 : 512 + 40_448 + 512] = b"\xa5" * 512  # the second member's header
    seen: list[str] = []
    with pytest.raises(ArchiveReadError, match="Damaged tar archive"):
        seen.extend(r.path for r in walk(io.BytesIO(bytes(data)), "d.tar"))
    assert seen == ["f00"]


MEMBERS = {"a.c": b"int a;\n" * 100, "b.c": b"int b;\n" * 100, "c.c": b"c"}


@seekable_or_stream
def test_a_zip_with_a_garbled_central_directory_is_read_from_its_local_headers(seekable: bool) -> None:
    data = bombs.zip_bytes(MEMBERS)
    start = data.find(b"PK\x01\x02")
    garbled = data[:start] + b"\xff" * (len(data) - start - 22) + data[-22:]
    assert {p: r.sha256 for p, r in walked(garbled, seekable).items()} == {
        n: sha(d) for n, d in MEMBERS.items()
    }


def test_a_zip_whose_end_record_points_nowhere_is_read_from_its_local_headers() -> None:
    data = bytearray(bombs.zip_bytes(MEMBERS))
    data[-6:-2] = (5).to_bytes(4, "little")  # the central directory's offset
    assert sorted(walked(bytes(data), seekable=True)) == ["a.c", "b.c", "c.c"]


def test_a_zip_cut_before_its_central_directory_fails_after_its_files() -> None:
    data = bombs.zip_bytes(MEMBERS)
    seen: list[str] = []
    with pytest.raises(ArchiveReadError, match="damaged or truncated archive"):
        seen.extend(r.path for r in walk(io.BytesIO(data[: data.find(b"PK\x01\x02")]), "d.zip"))
    assert seen == ["a.c", "b.c", "c.c"]


@seekable_or_stream
def test_an_encrypted_zip_member_is_unreadable_and_the_rest_is_scanned(seekable: bool) -> None:
    data = bombs.set_zip_flag(bombs.zip_bytes(MEMBERS), "b.c", 0x01)
    records = walked(data, seekable)
    assert sorted(records) == ["a.c", "b.c", "c.c"]
    assert records["b.c"].unreadable == "encrypted member: not read"
    assert (records["b.c"].kind, records["b.c"].size) == (Kind.BINARY, 0)
    assert records["c.c"].sha256 == sha(b"c")


def test_a_wholly_encrypted_zip_nested_in_a_drop_has_its_members_unreadable(tmp_path: Path) -> None:
    target = tmp_path / "secret.zip"
    with libarchive.file_writer(str(target), "zip", options="encryption=zipcrypt", passphrase="pw") as writer:
        writer.add_file_from_memory("secret.txt", 6, b"hello\n")
    records = walked(tar_of(("secret.zip", target.read_bytes()), ("open.txt", b"o")))
    assert records["secret.zip!/secret.txt"].unreadable == "encrypted member: not read"
    assert records["open.txt"].sha256 == sha(b"o")


def test_a_zip_member_with_a_bad_checksum_is_unreadable_and_the_rest_is_scanned() -> None:
    data = bytearray(bombs.zip_bytes({"a.c": b"A" * 1000, "b.c": b"B" * 1000}, level=0))
    data[data.find(b"A" * 1000) + 10] = ord("X")  # stored data, so only the CRC can tell
    records = walked(bytes(data), seekable=True)
    assert (records["a.c"].unreadable or "").startswith("ZIP bad CRC: ")
    # libarchive withholds the block whose check failed: the record has what came before it
    assert records["a.c"].size < 1000
    assert records["b.c"].unreadable is None


@pytest.mark.parametrize("cut", [0.3, 0.7])
def test_a_truncated_nested_archive_is_unreadable_and_the_rest_is_scanned(cut: float) -> None:
    inner = bombs.zip_bytes({f"m{i}": os.urandom(20_000) for i in range(10)})
    broken = inner[: int(len(inner) * cut)]
    records = walked(tar_of(("inner.zip", broken), ("after", b"a")))
    assert sorted(records) == ["after", "inner.zip"]
    assert records["inner.zip"].unreadable


def test_an_empty_upload_is_one_empty_file() -> None:
    assert [(r.path, r.size) for r in walk(Counting(b""), "empty.tar.gz")] == [("empty.tar.gz", 0)]


def test_a_non_archive_upload_is_one_file() -> None:
    data = os.urandom(3 * MiB)
    assert [(r.path, r.sha256) for r in walk(Counting(data), "blob.tar.gz")] == [("blob.tar.gz", sha(data))]


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("drop.zip", lambda: gz(tar_of(("a", b"1")))),
        ("drop.tar.gz", lambda: bombs.zip_bytes({"a": b"1"})),
        ("drop.tar", lambda: bombs.zip_bytes({"a": b"1"})),
    ],
)
def test_a_wrong_extension_changes_nothing(name: str, build: Callable[[], bytes]) -> None:
    assert [(r.path, r.sha256) for r in walk(Counting(build()), name)] == [("a", sha(b"1"))]


# --- names: properties -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=64))
def test_escaping_is_lossless_and_printable(raw: bytes) -> None:
    text, escaped = escape(raw)
    assert text.isprintable()
    assert (unescape(text) if escaped else text.encode("utf-8", "surrogateescape")) == raw


@settings(max_examples=200, deadline=None)
@given(
    names=st.lists(
        st.lists(st.text(alphabet="ab.é\\ ", min_size=1, max_size=3), min_size=1, max_size=3).map("/".join),
        min_size=1,
        max_size=12,
    )
)
def test_every_member_gets_a_distinct_path_whatever_the_names(names: list[str]) -> None:
    with tempfile.SpooledTemporaryFile() as spool:
        with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for i, name in enumerate(names):
                info = tarfile.TarInfo(name)
                info.size = len(str(i))
                tar.addfile(info, io.BytesIO(str(i).encode()))
        spool.seek(0)
        records = list(walk(spool, "d.tar"))
    regular = [r for r in records if r.kind != Kind.SYMLINK]
    assert len({r.path for r in records}) == len(records)
    assert len(regular) <= len(names)

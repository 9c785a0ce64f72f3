"""Unit tests for dropscan.archive.walk, on archives built here from hand-made members."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import tarfile
import tempfile
import tracemalloc
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import libarchive
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dropscan.archive import ArchiveReadError, walk
from dropscan.archive.binding import READ_BLOCK
from dropscan.archive.digest import digest_bytes
from dropscan.archive.magic import nested_format
from dropscan.models import FileRecord, Kind

ELF = b"\x7fELF\x02\x01\x01" + b"\0" * 57
MEMBERS = {
    "src/main.c": b"/* $Id: main.c,v 1.2 2001/01/01 x Exp $ */\r\nint main(void) { return 0; }  \n",
    "README": b"hello\n",
    "bin/tool": ELF,
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tar(members: dict[str, bytes], mode: str = "w", prefix: str = "") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as archive:  # type: ignore[call-overload]
        for name, data in members.items():
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def zip_(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def libarchive_built(tmp_path: Path, fmt: str, filter_name: str | None, members: dict[str, bytes]) -> bytes:
    target = tmp_path / f"built.{fmt}"
    try:
        with libarchive.file_writer(str(target), fmt, filter_name) as archive:
            for name, data in members.items():
                archive.add_file_from_memory(name, len(data), data)
    except (ValueError, libarchive.ArchiveError) as error:
        pytest.skip(f"libarchive cannot write {fmt}/{filter_name}: {error}")
    return target.read_bytes()


def ar_archive(members: dict[str, bytes], mode: str = "100644") -> bytes:
    out = b"!<arch>\n"
    for name, data in members.items():
        fields = (name, 16), ("0", 12), ("0", 6), ("0", 6), (mode, 8), (str(len(data)), 10)
        out += b"".join(value.encode().ljust(width) for value, width in fields) + b"`\n" + data
        out += b"\n" if len(data) % 2 else b""
    return out


class OnlyRead:
    """A non-seekable stream with nothing but read(n), like a boto3 StreamingBody."""

    def __init__(self, data: bytes, fail_after: int | None = None) -> None:
        self._data = io.BytesIO(data)
        self._fail_after = fail_after

    def read(self, size: int = -1) -> bytes:
        if self._fail_after is not None and self._data.tell() >= self._fail_after:
            raise ConnectionError("connection reset")
        return self._data.read(size)


def written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def walked(data: bytes, name: str = "upload", **options: Any) -> dict[str, FileRecord]:
    return {record.path: record for record in walk(io.BytesIO(data), name, **options)}


def hashes(records: Iterable[FileRecord]) -> dict[str, str]:
    return {record.path: record.sha256 for record in records}


EXPECTED = {name: sha(data) for name, data in MEMBERS.items()}


# --- formats ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: tar(MEMBERS), id="tar"),
        pytest.param(lambda: tar(MEMBERS, "w:gz"), id="tar.gz"),
        pytest.param(lambda: tar(MEMBERS, "w:bz2"), id="tar.bz2"),
        pytest.param(lambda: tar(MEMBERS, "w:xz"), id="tar.xz"),
        pytest.param(lambda: zip_(MEMBERS), id="zip"),
    ],
)
def test_every_regular_file_is_hashed(build: Callable[[], bytes]) -> None:
    assert hashes(walked(build()).values()) == EXPECTED


@pytest.mark.parametrize(("fmt", "filter_name"), [("ustar", "zstd"), ("cpio_newc", None), ("7zip", None)])
def test_libarchive_written_formats(tmp_path: Path, fmt: str, filter_name: str | None) -> None:
    data = libarchive_built(tmp_path, fmt, filter_name, MEMBERS)
    assert hashes(walked(data).values()) == EXPECTED


NESTED_KINDS = [
    ("tar.gz", lambda _: tar(MEMBERS, "w:gz")),
    ("tar.bz2", lambda _: tar(MEMBERS, "w:bz2")),
    ("tar.xz", lambda _: tar(MEMBERS, "w:xz")),
    ("tar.zst", lambda p: libarchive_built(p, "ustar", "zstd", MEMBERS)),
    ("zip", lambda _: zip_(MEMBERS)),
    ("7z", lambda p: libarchive_built(p, "7zip", None, MEMBERS)),
    ("cpio", lambda p: libarchive_built(p, "cpio_newc", None, MEMBERS)),
    ("odc.cpio", lambda p: libarchive_built(p, "cpio", None, MEMBERS)),
    ("ar", lambda _: ar_archive({"a.o": ELF, "b.o": b"x"})),
    ("tar", lambda _: tar(MEMBERS)),
]


@pytest.mark.parametrize(("suffix", "build"), NESTED_KINDS, ids=[k for k, _ in NESTED_KINDS])
def test_an_archive_of_every_kind_inside_a_tar_is_opened(
    tmp_path: Path, suffix: str, build: Callable[[Path], bytes]
) -> None:
    inner = build(tmp_path)
    records = walked(tar({"src/x.c": b"int x;\n", f"vendor/pkg.{suffix}": inner}))
    opened = sorted(p.split("!/", 1)[1] for p in records if p.startswith(f"vendor/pkg.{suffix}!/"))
    assert opened == sorted(r.path for r in walk(io.BytesIO(inner), "inner"))
    assert opened and "src/x.c" in records


def test_records_carry_size_kind_and_normalised_digests() -> None:
    records = walked(tar(MEMBERS, "w:gz"))
    main = records["src/main.c"]
    assert (main.size, main.kind) == (len(MEMBERS["src/main.c"]), Kind.TEXT)
    assert main.kw == sha(b"/* $Id$ */\r\nint main(void) { return 0; }  \n")
    assert main.ws == sha(b"/* $Id$ */\nint main(void) { return 0; }\n")
    assert records["bin/tool"].kind == Kind.ELF
    assert records["bin/tool"].kw == records["bin/tool"].ws == records["bin/tool"].sha256


def test_leading_dot_slash_is_stripped_and_other_names_kept() -> None:
    data = tar({"./a": b"1", "././b": b"2", "c/./d": b"3", ".hidden": b"4"})
    assert sorted(walked(data)) == [".hidden", "a", "b", "c/./d"]


def test_directories_are_skipped_and_links_recorded_unfollowed() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, kind in (("dir", tarfile.DIRTYPE), ("sym", tarfile.SYMTYPE), ("hard", tarfile.LNKTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "dir/file"
            archive.addfile(info)
        info = tarfile.TarInfo("dir/file")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    records = walked(out.getvalue())
    assert list(records) == ["sym", "hard", "dir/file"]
    for name, link_kind in (("sym", Kind.SYMLINK), ("hard", Kind.HARDLINK)):
        link = records[name]
        assert (link.kind, link.link, link.size, link.sha256) == (link_kind, "dir/file", 0, sha(b""))
    assert records["dir/file"].link is None


# --- sources ----------------------------------------------------------------------------------


def test_a_path_source_is_read(tmp_path: Path) -> None:
    path = tmp_path / "drop.zip"
    path.write_bytes(zip_(MEMBERS))
    assert hashes(walk(path, "drop.zip")) == EXPECTED


@pytest.mark.parametrize(
    "build", [lambda: tar(MEMBERS, "w:gz"), lambda: zip_(MEMBERS)], ids=["tar.gz", "zip"]
)
def test_a_non_seekable_stream_is_read(build: Callable[[], bytes]) -> None:
    assert hashes(walk(OnlyRead(build()), "drop")) == EXPECTED


@pytest.mark.parametrize(
    "make_source",
    [
        pytest.param(lambda data, tmp: OnlyRead(data), id="stream"),
        pytest.param(lambda data, tmp: io.BytesIO(data), id="seekable"),
        pytest.param(lambda data, tmp: written(tmp / "f", data), id="path"),
    ],
)
@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"just some text\n" * 1000, id="text"),
        pytest.param(gzip.compress(b"a man page\n" * 100), id="gzip-of-text"),
        pytest.param(gzip.compress(b"hello\nworld\n" * 50), id="gzip-of-word-lines"),  # mtree look-alike
        pytest.param(bytes(range(256)) * 5000, id="binary"),
        pytest.param(b"", id="empty"),
    ],
)
def test_a_non_archive_input_is_one_file(
    tmp_path: Path, make_source: Callable[[bytes, Path], Any], data: bytes
) -> None:
    records = list(walk(make_source(data, tmp_path), "notes.txt"))
    assert [(r.path, r.size, r.sha256, r.unreadable) for r in records] == [
        ("notes.txt", len(data), sha(data), None)
    ]


def test_an_mtree_spec_never_reads_local_files(tmp_path: Path) -> None:
    # Given an upload that is an mtree spec naming a file on this machine
    secret = tmp_path / "secret"
    secret.write_bytes(b"local data\n")
    spec = f"#mtree\n{secret} type=file size=11\n".encode()
    # When walked, Then it is one text file: libarchive's mtree reader (which opens the files it
    # names) is not enabled
    assert [(r.path, r.sha256) for r in walk(io.BytesIO(spec), "spec")] == [("spec", sha(spec))]


def test_a_top_level_archive_broken_midway_raises_after_what_was_read() -> None:
    # Given a tar.gz cut in the middle of its later members
    members = {f"f{i:02}": bytes([i]) * 50_000 for i in range(40)}
    data = tar(members, "w:gz")
    data = data[: len(data) // 2]
    seen: list[str] = []
    # When walked, Then the first members come out, then a clear error
    with pytest.raises(ArchiveReadError, match="truncated"):
        seen.extend(record.path for record in walk(OnlyRead(data), "x.tar.gz"))
    assert seen[:3] == ["f00", "f01", "f02"]
    assert all(record_path in members for record_path in seen)


def test_a_failing_stream_raises_its_own_error() -> None:
    data = tar({f"f{i}": bytes(range(256)) * 40_000 for i in range(4)})
    with pytest.raises(ConnectionError):
        list(walk(OnlyRead(data, fail_after=2 * 1024 * 1024), "x.tar"))


# --- nested archives --------------------------------------------------------------------------


def nested_drop() -> bytes:
    """drop.zip > top/outer.tar > in/inner.tar.gz > a.c"""
    inner = tar({"./a.c": b"int a;\n", "b.h": b"#pragma once\n"}, "w:gz")
    outer = tar({"./in/inner.tar.gz": inner, "README": b"outer\n"})
    return zip_({"top/outer.tar": outer, "top/notes": b"n\n"})


def test_nested_members_get_bang_slash_paths() -> None:
    assert sorted(walked(nested_drop())) == [
        "top/notes",
        "top/outer.tar!/README",
        "top/outer.tar!/in/inner.tar.gz!/a.c",
        "top/outer.tar!/in/inner.tar.gz!/b.h",
    ]


def test_containers_are_emitted_on_request_before_their_members() -> None:
    paths = [(r.path, r.container) for r in walk(io.BytesIO(nested_drop()), "drop.zip", emit_containers=True)]
    containers = [path for path, container in paths if container]
    assert containers == ["top/outer.tar", "top/outer.tar!/in/inner.tar.gz"]
    order = [path for path, _ in paths]
    assert order.index("top/outer.tar") < order.index("top/outer.tar!/README")
    assert order.index("top/outer.tar!/in/inner.tar.gz") < order.index("top/outer.tar!/in/inner.tar.gz!/a.c")


def test_container_record_hashes_the_nested_archive_bytes() -> None:
    inner = tar({"a": b"1"}, "w:gz")
    records = walked(tar({"i.tar.gz": inner}), emit_containers=True)
    assert (records["i.tar.gz"].sha256, records["i.tar.gz"].kind) == (sha(inner), Kind.ARCHIVE)


def test_a_known_nested_archive_is_one_file_and_not_opened() -> None:
    inner = tar({"a.c": b"int a;\n"}, "w:bz2")
    asked: list[str] = []

    def is_known(digest: str) -> bool:
        asked.append(digest)
        return digest == sha(inner)

    records = walked(tar({"up/inner.tar.bz2": inner, "x": b"x"}), is_known=is_known)
    assert sorted(records) == ["up/inner.tar.bz2", "x"]
    known = records["up/inner.tar.bz2"]
    assert (known.kind, known.sha256, known.container, known.unreadable) == (
        Kind.ARCHIVE,
        sha(inner),
        False,
        None,
    )
    assert asked == [sha(inner)]  # plain files are never looked up


def test_a_corrupt_nested_archive_is_unreadable_and_the_walk_goes_on() -> None:
    good = tar({f"m{i}": bytes([i]) * 30_000 for i in range(10)}, "w:gz")
    broken = good[: len(good) // 2]
    records = walked(tar({"a.tar.gz": broken, "z": b"after\n"}))
    assert sorted(records) == ["a.tar.gz", "z"]  # all or nothing: no half tree
    assert records["a.tar.gz"].kind == Kind.ARCHIVE
    assert records["a.tar.gz"].unreadable
    assert records["a.tar.gz"].sha256 == sha(broken)


def test_an_archive_magic_without_an_archive_is_unreadable() -> None:
    records = walked(tar({"fake.zip": b"PK\x03\x04" + b"\0" * 200}))
    assert records["fake.zip"].kind == Kind.ARCHIVE
    assert records["fake.zip"].unreadable


@pytest.mark.parametrize(
    ("name", "compress"),
    [("doc/foo.1.gz", gzip.compress), ("doc/foo.bz2", bz2.compress), ("doc/foo.xz", lzma.compress)],
)
def test_a_compressed_plain_file_is_a_plain_file(name: str, compress: Callable[[bytes], bytes]) -> None:
    packed = compress(b".TH FOO 1\nfoo \\- does things\n")
    record = walked(tar({name: packed}))[name]
    assert (record.sha256, record.kind, record.unreadable, record.container) == (
        sha(packed),
        Kind.BINARY,
        None,
        False,
    )


def test_a_static_library_is_kept_as_a_file() -> None:
    ar = ar_archive({"foo.o/": ELF})
    records = walked(tar({"lib/libfoo.a": ar, "lib/FOO.LIB": ar}))
    assert sorted(records) == ["lib/FOO.LIB", "lib/libfoo.a"]
    assert records["lib/libfoo.a"].kind == Kind.STATIC_LIBRARY


def test_an_ar_archive_not_named_as_a_library_is_opened() -> None:
    ar = ar_archive({"debian-binary": b"2.0\n"})
    assert list(walked(tar({"pkg.deb": ar}))) == ["pkg.deb!/debian-binary"]


def test_a_member_whose_mode_has_no_file_type_is_a_regular_file() -> None:
    ar = ar_archive({"debian-binary": b"2.0\n"}, mode="644")
    assert list(walked(ar, "pkg.deb")) == ["debian-binary"]


def test_an_empty_nested_archive_stays_visible_as_a_file() -> None:
    empty = tar({}, "w:gz")
    record = walked(tar({"empty.tar.gz": empty}))["empty.tar.gz"]
    assert (record.kind, record.sha256, record.unreadable) == (Kind.ARCHIVE, sha(empty), None)


def test_nesting_beyond_max_depth_is_kept_as_one_file() -> None:
    level2 = tar({"deep.c": b"x\n"}, "w:gz")
    level1 = tar({"l2.tar.gz": level2}, "w:gz")
    records = walked(tar({"l1.tar.gz": level1}), max_depth=1)
    assert list(records) == ["l1.tar.gz!/l2.tar.gz"]
    assert records["l1.tar.gz!/l2.tar.gz"].unreadable == "nesting depth limit"
    assert list(walked(tar({"l1.tar.gz": level1}), max_depth=2)) == ["l1.tar.gz!/l2.tar.gz!/deep.c"]


def test_nested_archives_spill_to_spool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a tiny in-memory spool limit, When a nested archive is walked, Then it spools to spool_dir
    dirs: list[str | None] = []
    real = tempfile.SpooledTemporaryFile

    def spy(max_size: int = 0, *args: Any, dir: str | None = None, **kw: Any) -> Any:
        dirs.append(dir)
        return real(max_size, *args, dir=dir, **kw)

    monkeypatch.setattr(tempfile, "SpooledTemporaryFile", spy)
    inner = tar({"a": bytes(range(256)) * 8000}, "w:gz")
    records = walk(io.BytesIO(tar({"i.tar.gz": inner})), "d.tar", spool_dir=str(tmp_path))
    assert hashes(records) == {"i.tar.gz!/a": sha(bytes(range(256)) * 8000)}
    assert dirs == [str(tmp_path)]


def test_a_non_seekable_archive_is_not_recorded_past_its_format(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a stream that is an archive, When walked, Then only the bytes read until libarchive knew
    # the format were kept for the not-an-archive fallback
    kept: list[int] = []
    real = tempfile.SpooledTemporaryFile

    class Counting(real):  # type: ignore[misc, valid-type]
        def write(self, data: bytes) -> int:
            kept.append(len(data))
            return int(super().write(data))

    monkeypatch.setattr(tempfile, "SpooledTemporaryFile", Counting)
    data = tar({f"f{i}": bytes(range(256)) * 20_000 for i in range(8)})  # 40 MB
    assert len(hashes(walk(OnlyRead(data), "x.tar"))) == 8
    assert 0 < sum(kept) <= 2 * READ_BLOCK


# --- memory -----------------------------------------------------------------------------------


def test_big_members_stream_in_bounded_memory() -> None:
    # Given a non-seekable tar.gz of a 96 MiB binary member and a 40 MiB text member
    binary = bytes(range(256)) * (96 * 4096)
    line = b"x" * 4000 + b" $Id: x $ and blanks  \r\n"
    text = line * (40 * 1024 * 1024 // len(line))
    data = tar({"blob.bin": binary, "huge.txt": text}, "w:gz")
    expected = {"blob.bin": sha(binary), "huge.txt": sha(text)}
    count = len(text) // len(line)
    expected_kw = sha((b"x" * 4000 + b" $Id$ and blanks  \r\n") * count)
    expected_ws = sha((b"x" * 4000 + b" $Id$ and blanks\n") * count)
    del binary, text
    # When walked, Then Python allocations stay well below the member sizes (32 MiB text buffer + blocks)
    tracemalloc.start()
    try:
        records = {record.path: record for record in walk(OnlyRead(data), "big.tar.gz")}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert hashes(records.values()) == expected
    assert (records["huge.txt"].kw, records["huge.txt"].ws) == (expected_kw, expected_ws)
    assert peak < 48 * 1024 * 1024


# --- properties -------------------------------------------------------------------------------

_SEGMENT = st.text(alphabet="abcxyz019_-é", min_size=1, max_size=6)
_PATH = st.lists(_SEGMENT, min_size=1, max_size=4).map("/".join)
_CONTENT = st.one_of(
    st.binary(max_size=3000),
    st.lists(
        st.sampled_from([b"int x;", b"  ", b"\t", b"\r\n", b"\n", b"$Id: a $", b"$", b"Rev"]), max_size=40
    ).map(b"".join),
)


def _packed(members: dict[str, bytes], how: str) -> bytes:
    if how == "zip":
        return zip_(members)
    return tar(members, {"tar": "w", "tar.gz": "w:gz", "tar.xz": "w:xz", "tar.bz2": "w:bz2"}[how])


def _disjoint(tree: dict[str, bytes]) -> bool:
    # a path cannot be a file and a folder at once (zip and tar would both store it; extractors could not);
    # and content that looks like an archive is opened (the tests above cover that)
    folders = any(other.startswith(path + "/") for path in tree for other in tree)
    return not folders and not any(nested_format(data[:512], path) for path, data in tree.items())


@settings(max_examples=60, deadline=None)
@given(
    tree=st.dictionaries(_PATH, _CONTENT, min_size=1, max_size=12).filter(_disjoint),
    how=st.sampled_from(["tar", "tar.gz", "tar.xz", "tar.bz2", "zip"]),
    nested=st.sampled_from(["", "tar.gz", "zip"]),
    stream=st.booleans(),
)
def test_any_tree_round_trips_to_exactly_its_files_and_digests(
    tree: dict[str, bytes], how: str, nested: str, stream: bool
) -> None:
    # Given any tree, packed as tar or zip, part of it optionally inside a nested archive
    members = dict(tree)
    expected = {path: digest_bytes(data, path) for path, data in tree.items()}
    if nested:
        inner = {path: data for path, data in tree.items() if path.startswith(("a", "b", "c"))}
        if inner:
            packed = _packed(inner, nested)
            members = {p: d for p, d in tree.items() if p not in inner}
            members[f"inner.{nested}"] = packed
            expected = {p: e for p, e in expected.items() if p not in inner}
            expected.update({f"inner.{nested}!/{p}": digest_bytes(d, p) for p, d in inner.items()})
    data = _packed(members, how)
    # When walked, Then exactly its files come out, with the digests digest_bytes gives them
    source: Any = OnlyRead(data) if stream else io.BytesIO(data)
    got = {r.path: (r.size, r.sha256, r.kw, r.ws, r.kind) for r in walk(source, "drop")}
    assert got == {p: (e.size, e.sha256, e.kw, e.ws, e.kind.value) for p, e in expected.items()}

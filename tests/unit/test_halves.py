"""A plain tar walked in two processes gives exactly the records, names and errors of one walk."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Generator
from pathlib import Path
from typing import cast

import pytest

from dropscan.archive import ArchiveReadError, LimitExceeded, Limits, halves, tar_member_at, walk
from dropscan.models import FileRecord

from helpers.builders import tar_of

CUT = 1 << 20  # the members below put the cut near 1 MiB


@pytest.fixture(autouse=True)
def small_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """Halves for any size here: the tars below are a few MiB, not MIN_BYTES."""
    monkeypatch.setattr(halves, "MIN_BYTES", 0)


def write_tar(
    path: Path,
    members: list[tarfile.TarInfo | tuple[str, bytes]],
    fmt: int = tarfile.PAX_FORMAT,
    global_headers: dict[str, str] | None = None,
) -> Path:
    path.write_bytes(tar_of(*members, fmt=fmt, global_headers=global_headers))
    return path


def source_files(count: int = 40) -> list[tarfile.TarInfo | tuple[str, bytes]]:
    """``count`` members of 50 KiB: text with keywords and trailing blanks, long names, random bytes."""
    out: list[tarfile.TarInfo | tuple[str, bytes]] = []
    for i in range(count):
        deep = "very-long-directory-name/" * (i % 5) + f"file{i:03}.c"
        text = b"/* $Id: f.c,v 1.%d $ */  \r\n" % i + b"int x;\t\n" * (50_000 // 8)
        out.append((deep, text if i % 3 else os.urandom(50_000)))
    return out


def records(path: Path, **options: object) -> list[FileRecord]:
    return list(walk(str(path), path.name, **options))  # type: ignore[arg-type]


def halved(path: Path, **options: object) -> Generator[FileRecord, None, None]:
    walked = halves.walk_file(path, path.name, **options)  # type: ignore[arg-type]
    return cast(Generator[FileRecord, None, None], walked)


def link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


FORMATS = {
    "pax": (tarfile.PAX_FORMAT, None),
    "gnu": (tarfile.GNU_FORMAT, None),
    "ustar": (tarfile.USTAR_FORMAT, None),
    # git archive opens its tars with a global header (the commit id): only the first half has it.
    # Only the comment, as git writes: libarchive 3.8 fails a global header with hdrcharset (3.6 warned)
    "pax-global": (tarfile.PAX_FORMAT, {"comment": "52f0a1c0ffee"}),
}


@pytest.mark.parametrize("kind", FORMATS)
def test_two_halves_give_the_records_of_one_walk(tmp_path: Path, kind: str) -> None:
    fmt, global_headers = FORMATS[kind]
    files = [m for m in source_files() if isinstance(m, tuple)]
    if fmt == tarfile.USTAR_FORMAT:  # ustar keeps names under 256 bytes
        files = [(f"f{i}.c", data) for i, (_, data) in enumerate(files)]
    members: list[tarfile.TarInfo | tuple[str, bytes]] = [*files]
    members[25:25] = [link("hard", files[3][0], tarfile.LNKTYPE), link("soft", "../x", tarfile.SYMTYPE)]
    path = write_tar(tmp_path / "drop.tar", members, fmt, global_headers)
    with open(path, "rb") as stream:
        assert tar_member_at(stream, CUT) not in (None, 0)
    assert list(halved(path)) == records(path)


def test_the_cut_is_where_a_members_headers_start(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "drop.tar", source_files())  # pax: long names have extended headers
    with tarfile.open(path) as tar:
        starts = [m.offset for m in tar.getmembers()]  # tarfile's offset: the first header of a member
    with open(path, "rb") as stream:
        cut = tar_member_at(stream, CUT)
        assert cut == min(s for s in starts if s >= CUT)
        assert tar_member_at(stream, path.stat().st_size) is None  # no member starts at the end


def test_a_compressed_or_non_tar_file_is_walked_once(tmp_path: Path) -> None:
    gz = tmp_path / "drop.tar.gz"
    with tarfile.open(gz, "w:gz") as tar:
        for name, data in source_files(4):  # type: ignore[misc]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    text = tmp_path / "notes.txt"
    text.write_bytes(b"not an archive\n" * 100_000)
    for path in (gz, text):
        with open(path, "rb") as stream:
            assert tar_member_at(stream, 10) is None
        assert list(halved(path)) == records(path)


def test_a_path_of_the_first_half_repeated_in_the_second_is_renamed_as_one_walk_renames_it(
    tmp_path: Path,
) -> None:
    members = source_files()
    members.append(("file000.c", b"the same path again, past the cut\n"))
    path = write_tar(tmp_path / "drop.tar", members)
    got = list(halved(path))
    assert got == records(path)
    assert got[-1].path == "file000.c (duplicate 2)" and got[-1].note


def test_the_limits_hold_for_the_two_halves_together(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "drop.tar", source_files())  # 40 members, 20 in each half
    limits = Limits(files=30)
    with pytest.raises(LimitExceeded) as one:
        records(path, limits=limits)
    with pytest.raises(LimitExceeded) as two:
        list(halved(path, limits=limits))
    assert two.value.reason == one.value.reason == "more than 30 archive members"


def test_a_tar_truncated_in_its_second_half_fails_after_every_record_before(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "drop.tar", source_files())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 300_000])
    seen: list[FileRecord] = []
    with pytest.raises(ArchiveReadError) as one:
        seen.extend(walk(str(path), path.name))
    halved_seen: list[FileRecord] = []
    with pytest.raises(ArchiveReadError) as two:
        halved_seen.extend(halved(path))
    assert str(two.value) == str(one.value)
    assert halved_seen == seen and len(seen) > 30


def test_a_consumer_that_stops_early_leaves_no_child_behind(tmp_path: Path) -> None:
    import multiprocessing

    path = write_tar(tmp_path / "drop.tar", source_files())
    walked = halved(path)
    next(walked)
    assert multiprocessing.active_children()  # the second half runs in a child
    walked.close()
    assert not multiprocessing.active_children()

"""bzip2 with a libarchive built without libbz2 (the bundled one): decompressed in line, never by an
external ``bzip2 -d`` whose complaints land on the user's terminal."""

from __future__ import annotations

import bz2
import io
from typing import Any

import pytest

from dropscan.archive import LimitExceeded, Limits, binding, halves, walk
from dropscan.archive.halves import walk_file

from helpers.builders import tar_bytes

# upstream BusyBox ships inputs like this one (testsuite/bz2_issue_11.bz2): a bzip2 header, then damage
BROKEN_BZ2 = bz2.compress(b"x" * 5000)[:40] + b"\x00" * 400


class Stream:
    """A non-seekable source, as an S3 body is."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)


def source(data: bytes, seekable: bool) -> Any:
    return io.BytesIO(data) if seekable else Stream(data)


def drop() -> bytes:
    inner = tar_bytes({"inner/a.txt": b"inner a\n"}, "bz2")
    return tar_bytes(
        {"top/README": b"readme\n", "top/tests/broken.bz2": BROKEN_BZ2, "top/tests/inner.tar.bz2": inner},
        "bz2",
    )


def test_the_bundled_libarchive_has_no_libbz2_so_bzip2_is_read_in_line() -> None:
    assert binding.BZIP2_IN_LINE


@pytest.mark.parametrize("mode", ["off", "thread", "process"])
@pytest.mark.parametrize("seekable", [True, False], ids=["seekable", "stream"])
def test_a_valid_tar_bz2_with_a_broken_bz2_inside_prints_nothing(
    seekable: bool, mode: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Given a valid .tar.bz2 holding a damaged .bz2 test input and a nested .tar.bz2
    monkeypatch.setenv("DROPSCAN_INFLATE", mode)
    # When walked
    records = {r.path: r for r in walk(source(drop(), seekable), "drop.tar.bz2")}
    # Then every file is there, the damaged one unreadable with bzip2's own reason, and nothing printed
    assert records["top/tests/inner.tar.bz2!/inner/a.txt"].size == 8
    assert records["top/README"].size == 7
    assert str(records["top/tests/broken.bz2"].unreadable).startswith("bzip2 decompression failed")
    assert capfd.readouterr() == ("", "")


def test_the_split_walk_of_a_tar_bz2_file_prints_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # the walk of a file first asks libarchive where a plain tar could be cut: a .tar.bz2 cannot
    monkeypatch.setattr(halves, "MIN_BYTES", 0)
    path = tmp_path / "drop.tar.bz2"
    path.write_bytes(drop())
    assert len(list(walk_file(path, path.name))) == 3
    assert capfd.readouterr() == ("", "")


def test_a_bzip2_bomb_nested_in_line_is_still_measured_by_its_compressed_size() -> None:
    # Given 16 MiB of zeros in a .tar.bz2 inside a plain tar: bzip2 makes them a few hundred bytes
    inner = tar_bytes({"zeros.bin": bytes(16 << 20)}, "bz2")
    outer = tar_bytes({"pkg/nested.tar.bz2": inner}, "")
    # When walked with a ratio that counts from 1 MiB on, Then the nested member is rejected for it
    with pytest.raises(LimitExceeded) as caught:
        list(walk(io.BytesIO(outer), "drop.tar", limits=Limits(ratio=100, ratio_after=1 << 20)))
    assert "expands beyond 100x" in caught.value.reason

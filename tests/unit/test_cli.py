"""``dropscan hash``: one JSON line per file in walk order, a clear error and exit 1 for a broken archive."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from dropscan.archive import halves
from dropscan.cli import main


def big_tar(path: Path, count: int = 30) -> dict[str, bytes]:
    files = {f"src/f{i:02}.c": b"int f%d;  \n" % i * 5_000 for i in range(count)}
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return files


@pytest.fixture(autouse=True)
def halves_for_small_tars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(halves, "MIN_BYTES", 0)  # the second process walks half of these tars too


def test_hash_writes_every_file_once_in_archive_order(tmp_path: Path) -> None:
    files = big_tar(tmp_path / "drop.tar")
    out = tmp_path / "out.jsonl"
    assert main(["hash", str(tmp_path / "drop.tar"), "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["path"] for r in lines] == list(files)
    assert all(r["sha256"] == hashlib.sha256(files[r["path"]]).hexdigest() for r in lines)
    stripped = hashlib.sha256(files["src/f00.c"].replace(b"  \n", b"\n")).hexdigest()
    assert lines[0]["ws"] == stripped != lines[0]["sha256"]


def test_hash_of_a_truncated_tar_lists_what_it_read_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big_tar(tmp_path / "drop.tar")
    data = (tmp_path / "drop.tar").read_bytes()
    (tmp_path / "drop.tar").write_bytes(data[: len(data) - 100_000])
    assert main(["hash", str(tmp_path / "drop.tar")]) == 1
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) >= 25
    assert "archive is corrupt or truncated" in captured.err and "Traceback" not in captured.err

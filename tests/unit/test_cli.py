"""``dropscan hash``: one JSON line per file in walk order, a clear error and exit 1 for a broken archive."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
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


def test_the_script_prints_everything_runs_its_exit_handlers_and_exits_with_mains_code(
    tmp_path: Path,
) -> None:
    # Given the script's way of ending (exit handlers, then no teardown of the heap)
    files = big_tar(tmp_path / "drop.tar", count=200)
    script = (
        "import atexit, sys, tempfile\n"
        "kept = tempfile.TemporaryDirectory(dir=sys.argv[1])\n"  # removed by its exit handler, if run
        "atexit.register(lambda: print('handler ran', file=sys.stderr))\n"
        "from dropscan.cli import run\n"
        "sys.argv = ['dropscan', *sys.argv[2:]]\n"
        "run()\n"
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    ok = subprocess.run([sys.executable, "-c", script, str(scratch), "hash", str(tmp_path / "drop.tar")],
                        capture_output=True, text=True, check=False)  # fmt: skip
    # Then every line was written out, the exit handlers ran, and the code is main's
    assert ok.returncode == 0
    assert [json.loads(line)["path"] for line in ok.stdout.splitlines()] == list(files)
    assert "handler ran" in ok.stderr and list(scratch.iterdir()) == []
    bad = subprocess.run([sys.executable, "-c", script, str(scratch), "hash", str(tmp_path / "missing.tar")],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert bad.returncode != 0 and "dropscan:" in bad.stderr and "Traceback" not in bad.stderr


def test_every_option_of_every_command_says_what_it_does() -> None:
    import argparse

    from dropscan.cli.commands import build_parser

    def parsers(p: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        yield p.prog, p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    silent = [
        f"{prog} {'/'.join(a.option_strings)}"
        for prog, p in parsers(build_parser())
        for a in p._actions
        if a.option_strings and not a.help and a.dest not in ("help",)
    ]
    assert silent == []


def test_the_cli_modules_import_one_way_only() -> None:
    # commands -> scan, memory, demo -> common: nothing imports commands back (issue 34)
    import ast

    folder = Path(__file__).parents[2] / "shared" / "dropscan" / "cli"
    imports = {
        path.stem: {
            node.module
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dropscan.cli")
        }
        for path in folder.glob("*.py")
    }
    assert {m for m, found in imports.items() if "dropscan.cli.commands" in found} == {"__init__", "__main__"}
    assert imports["common"] == set()
    assert all(len(p.read_text().splitlines()) < 550 for p in folder.glob("*.py"))

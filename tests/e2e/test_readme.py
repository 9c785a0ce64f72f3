"""The README's own command lines, as a new user runs them: a fresh HOME, no AWS configuration at all.

Every ``sh`` block of README.md is either run here or named in NOT_RUN with the reason, so a new block
cannot go untested unnoticed. The local-stack block starts ``dropscan up`` (on a free port instead of
4566) and uploads with the AWS CLI exactly as written, with the bucket name the banner printed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from helpers.builders import DROP_FILES, UPSTREAM_FILES, make_tar

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: blocks not run, by their first command, and why
NOT_RUN = {
    "make demo": "the demo and the whole test suite: they run this test",
    "aws --endpoint-url http://127.0.0.1:4566 s3 cp router.bin": (
        "a firmware image beside its drop: test_decisions_up.py's test_a_firmware_image_after_its_drop_"
        "through_up_and_the_aws_cli makes the same upload with the AWS CLI against dropscan up"
    ),
}


def blocks() -> list[list[str]]:
    """The README's ``sh`` blocks, each a list of command lines (continuations joined, comments off)."""
    found = re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    out = []
    for text in found:
        joined = text.replace("\\\n", " ")
        out.append([re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines() if line.strip()])
    return out


def block(first: str) -> list[str]:
    [found] = [b for b in blocks() if b[0].startswith(first)]
    return found


def test_every_sh_block_is_run_here_or_said_why_not() -> None:
    firsts = [b[0] for b in blocks()]
    ran = ("dropscan scan ", "dropscan up &")
    assert [f for f in firsts if not f.startswith(ran)] == [
        next(f for f in firsts if f.startswith(first)) for first in NOT_RUN
    ]


@pytest.fixture
def newcomer(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine where dropscan was just installed: an empty HOME, no AWS settings."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "XDG_", "DROPSCAN_"))}
    bin_dir = str(Path(sys.executable).parent)  # where `dropscan` is installed
    return env | {"HOME": str(home), "PATH": f"{bin_dir}:{env.get('PATH', '')}"}


def run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
    return done


def test_the_scan_block_runs_as_written(tmp_path: Path, newcomer: dict[str, str]) -> None:
    make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES)
    make_tar(tmp_path / "foo-1.0-acme.tar.gz", DROP_FILES)
    scan, stats, report = block("dropscan scan ")
    assert run(scan, tmp_path, newcomer).stdout == ""  # --quiet
    assert '"foo"' in run(stats, tmp_path, newcomer).stdout
    text = run(report, tmp_path, newcomer).stdout
    assert text.startswith("dropscan: acme/foo-1.0-acme.tar.gz — review:")
    assert f"Database:  {tmp_path / 'db'} (embedded; 1 package, 1 release: foo 1.0)" in text
    # the reports are the files scan wrote beside the manifest, not keys of a bucket gone with the run
    assert "  html       out/report.html" in text and (tmp_path / "out" / "report.html").is_file()


def aws_cli() -> str | None:
    for candidate in (os.environ.get("DROPSCAN_AWSCLI"), str(ROOT / ".cache/awscli/bin/aws")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("aws")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def up(tmp_path: Path, newcomer: dict[str, str]) -> Iterator[tuple[int, list[str], IO[str]]]:
    """``dropscan up &`` as the block has it, on a free port: its banner lines, and its stdout after."""
    start = block("dropscan up")[0].removesuffix("&").strip()
    port = free_port()
    argv = [*shlex.split(start), "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=newcomer, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    banner = [proc.stdout.readline()]
    while not banner[-1].startswith("e.g.") and banner[-1]:
        banner.append(proc.stdout.readline())
    try:
        yield port, banner, proc.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_upload_block_runs_as_written_on_a_machine_without_aws_configuration(
    up: tuple[int, list[str], IO[str]], tmp_path: Path, newcomer: dict[str, str]
) -> None:
    aws = aws_cli()
    if aws is None:
        if os.environ.get("DROPSCAN_REQUIRE_AWSCLI") == "1":
            pytest.fail("DROPSCAN_REQUIRE_AWSCLI=1 but the AWS CLI is not installed (make awscli)")
        pytest.skip("the AWS CLI is not installed (make awscli)")
    port, banner, log = up
    _, export, upload = block("dropscan up")
    # the banner prints the very line the README tells the reader to run
    assert banner[1].strip() == export
    [drops] = re.findall(r"s3://(\S+)/drops/<supplier>", "".join(banner))
    make_tar(tmp_path / "drop.tar.gz", DROP_FILES)
    upload = upload.replace("4566", str(port)).replace("<drops bucket dropscan up printed>", drops)
    run(f"{export}\n{shlex.quote(aws)}{upload.removeprefix('aws')}", tmp_path, newcomer)
    notes = tmp_path / "notifications"  # up's default --eml-dir, in the folder it runs in
    deadline = time.monotonic() + 120
    while not list(notes.glob("*.eml")):
        assert time.monotonic() < deadline, "no notification"
        time.sleep(0.2)
    [note] = notes.glob("*.eml")
    assert "drops/acme/drop.tar.gz" in note.read_text()
    # and its log said what the README says it says: the scan's line as it ended, with its e-mail
    lines = [log.readline()]
    while lines[-1] and "e-mail" not in lines[-1]:  # "": up ended before it said
        lines.append(log.readline())
    assert re.search(r"acme/drop\.tar\.gz  complete, review: 8 files: .*; e-mail notifications/", lines[-1])

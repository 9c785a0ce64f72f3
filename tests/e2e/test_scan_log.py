"""``dropscan up``'s log of scans (dropscan.local.scan_log): a scan's counts while it runs, when they
moved, and one line of what it found as it ends; nothing for an idle stack."""

from __future__ import annotations

import io
import itertools
import re
import threading
from pathlib import Path

import pytest

from dropscan.cli.scan import watching
from dropscan.keys import ROOT
from dropscan.local.embedded import EmbeddedStack
from dropscan.local.scan_log import ScanLog
from dropscan.models import Upload
from dropscan.stages import unpack_send

from helpers.builders import make_tar
from helpers.flows import scan_and_wait


def lines(out: io.StringIO) -> list[str]:
    """The log's lines without their time of day."""
    return [re.sub(r"^  \d\d:\d\d:\d\d ", "", line) for line in out.getvalue().splitlines()]


def test_an_open_scan_gets_a_line_each_time_its_counts_move(stack: EmbeddedStack) -> None:
    # Given an idle stack and its log
    out = io.StringIO()
    log = ScanLog(stack.client, out=out)
    assert log.look() == 0 and out.getvalue() == ""
    # When a scan's root part walks a big drop and reports how far it got, twice the same, then further
    scans = stack.client.scans
    scans.begin("s-1", Upload("drops", "drops/acme/linux-6.1.tar.xz", "e", None, "acme", {}))
    scans.report_unpacking("s-1", ROOT, members=12_345, unpacked=512_000_000)
    said = [log.look()]
    said.append(log.look())
    scans.report_unpacking("s-1", ROOT, members=20_000, unpacked=800_000_000)
    said.append(log.look())
    # Then a line for each move, none for a look that found the same counts
    assert said == [1, 0, 1]
    assert lines(out) == [
        "acme/linux-6.1.tar.xz  unpacking: 12,345 files, 512.0 MB",
        "acme/linux-6.1.tar.xz  unpacking: 20,000 files, 800.0 MB",
    ]


def test_a_finished_scan_is_one_line_of_its_counts(
    stack: EmbeddedStack, upstream_archive: Path, drop_archive: Path
) -> None:
    # Given a drop scanned against its upstream release
    stack.client.ingest(upstream_archive, "foo", "1.0")
    done = scan_and_wait(stack, drop_archive)
    out = io.StringIO()
    log = ScanLog(stack.client, out=out)
    # When its notification arrives, and the log looks for open scans again
    log.finished("acme", done.scan_id, note="e-mail eml/s.eml")
    assert log.look() == 0
    # Then one line: the drop, its status and verdict, its classes and missing files, how long it took
    [line] = lines(out)
    assert re.fullmatch(
        r"acme/foo-1\.0-acme\.tar\.gz  complete, review: 8 files: 5 upstream, 1 modified, 1 added,"
        r" 1 missing; (less than a second|\d+ s|\d+ min \d+ s); e-mail eml/s\.eml",
        line,
    ), line


def test_the_cli_status_line_shows_counts_during_one_long_unpack(
    stack: EmbeddedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a drop of 40 files, and a unpack that reports its counts every other file (a clock that
    # moves a second at each reading) and, at its 20th reading, waits until the status line showed them
    # (the embedded stack runs the invocation in the thread that waits for the scan)
    drop = make_tar(tmp_path / "big.tar.gz", {f"src/f{i:02}.c": f"int f{i};\n".encode() for i in range(40)})
    shown = threading.Event()
    texts: list[str] = []

    def update(text: str) -> None:
        texts.append(text)
        if "unpacking: " in text:
            shown.set()

    ticks = itertools.count()

    def clock() -> float:
        n = next(ticks)
        if n == 20:
            shown.wait(timeout=600)  # a guard against a hang, not a timing: the line comes or the test fails
        return float(n)

    monkeypatch.setattr(unpack_send, "CLOCK", clock)
    _, scan_id = stack.client.upload_drop(drop, "acme")
    # When `dropscan scan`'s status line watches the scan while the stack works
    with watching(stack.client, "scanning big.tar.gz", update, scan_id):
        manifest = stack.client.wait_manifest("acme", scan_id, timeout=120)
    # Then, part-way through the one unpack invocation, it showed the files walked so far
    assert manifest is not None and shown.is_set()
    [first] = [t for t in texts if "unpacking: " in t][:1]
    counts = re.search(r"unpacking: (\d+) files", first)
    assert counts is not None and 0 < int(counts[1]) < 40, first

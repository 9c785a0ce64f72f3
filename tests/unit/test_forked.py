"""Work in a forked child: its value comes back, its failure is an error the caller can record."""

from __future__ import annotations

import os
import signal
import time

import pytest

from dropscan.forked import Forked, ForkedError


def _pid_and(value: int) -> tuple[int, int]:
    return os.getpid(), value * 2


def _fail() -> None:
    raise ValueError("no such member")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _sleep(path: str) -> None:
    time.sleep(30)
    open(path, "w").close()


def test_the_value_comes_back_from_another_process() -> None:
    with Forked(_pid_and, 21) as child:
        pid, value = child.result()
    assert value == 42
    assert pid != os.getpid()


def test_an_exception_in_the_child_is_raised_here_with_its_message() -> None:
    with Forked(_fail) as child, pytest.raises(ForkedError, match="ValueError: no such member"):
        child.result()


def test_a_child_that_dies_without_answering_is_an_error_not_a_hang() -> None:
    with Forked(_die) as child, pytest.raises(ForkedError, match="died"):
        child.result()


def test_leaving_before_the_result_stops_the_child(tmp_path: object) -> None:
    marker = os.path.join(str(tmp_path), "finished")
    started = time.monotonic()
    with Forked(_sleep, marker) as child:
        proc = child._proc
    assert proc.exitcode is not None  # stopped and reaped, not left running for 30 s
    assert time.monotonic() - started < 10
    assert not os.path.exists(marker)

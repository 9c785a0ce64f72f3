"""Work in a forked child: its value comes back, its failure is an error the caller can record."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dropscan.archive import ArchiveReadError
from dropscan.forked import Feed, Forked, ForkedError, forked_iter, shared_int, spread


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


# ---------------------------------------------------------------- a list spread over processes
def _pids_and_doubles(items: list[int]) -> list[tuple[int, int]]:
    return [(os.getpid(), i * 2) for i in items]


def _fail_in_a_child(items: list[int]) -> list[int]:
    if 1 in items:  # the second share: a child's
        _fail()
    return items


def _fail_here_wait_there(items: list[int]) -> list[int]:
    if 0 in items:  # the caller's own share (the first) fails at once
        raise ValueError("detector crashed")
    time.sleep(60)  # the children's shares would run on
    return items


def test_a_spread_list_comes_back_in_order_from_that_many_processes() -> None:
    done = spread(_pids_and_doubles, list(range(10)), 3)
    assert [value for _, value in done] == [i * 2 for i in range(10)]
    pids = {pid for pid, _ in done}
    assert len(pids) == 3 and os.getpid() in pids
    assert spread(_pids_and_doubles, [1, 2], 1) == [(os.getpid(), 2), (os.getpid(), 4)]


def test_a_child_share_that_fails_is_an_error_here() -> None:
    with pytest.raises(ForkedError, match="ValueError: no such member"):
        spread(_fail_in_a_child, [0, 1, 2], 2)


def test_a_caller_whose_own_share_fails_stops_the_children() -> None:
    before = set(multiprocessing.active_children())
    with pytest.raises(ValueError, match="detector crashed"):
        spread(_fail_here_wait_there, list(range(6)), 3)
    assert set(multiprocessing.active_children()) == before  # stopped and reaped, none left running


# ---------------------------------------------------------------- items made in a child, taken here
def _count(n: int) -> Iterator[tuple[int, int]]:
    for i in range(n):
        yield os.getpid(), i


def _count_then_break(n: int) -> Iterator[int]:
    yield from range(n)
    raise ArchiveReadError("truncated gzip input")


def _count_then_die(n: int) -> Iterator[int]:
    yield from range(n)
    os.kill(os.getpid(), signal.SIGKILL)


def _endless(path: str) -> Iterator[int]:
    i = 0
    while True:
        yield i
        i += 1
        if i == 200_000:  # far past what the pipe holds
            open(path, "w").close()


def test_items_come_in_order_from_another_process_batch_by_batch() -> None:
    items = list(forked_iter(_count, 1234, batch=100))
    assert [i for _, i in items] == list(range(1234))
    assert {pid for pid, _ in items} != {os.getpid()}


def test_the_childs_error_comes_after_its_items_and_keeps_its_type() -> None:
    got: list[int] = []
    with pytest.raises(ArchiveReadError, match="truncated gzip input"):
        got.extend(forked_iter(_count_then_break, 700, batch=64))
    assert got == list(range(700))


def test_a_child_that_dies_mid_way_is_an_error_not_a_hang() -> None:
    with pytest.raises(ForkedError, match="died"):
        list(forked_iter(_count_then_die, 10))


def test_a_caller_that_stops_early_stops_the_child(tmp_path: object) -> None:
    marker = os.path.join(str(tmp_path), "went-on")
    items = forked_iter(_endless, marker, batch=10)
    assert next(items) == 0
    items.close()  # the child, blocked on the full pipe, is terminated and reaped
    assert not os.path.exists(marker)


# ---------------------------------------------------------------- a feed beside the caller's own loop
def test_a_feed_hands_over_what_has_come_without_waiting_and_the_rest_on_demand() -> None:
    for fork in (True, False):
        with Feed(_count, 1000, batch=64, fork=fork) as feed:
            got = feed.ready()  # never waits: whatever the child has sent, maybe nothing yet
            while not feed.done:
                got.extend(feed.more())
                got.extend(feed.ready())
        assert [i for _, i in got] == list(range(1000))
        pids = {pid for pid, _ in got}
        assert (pids != {os.getpid()}) is fork  # fork=False: made here, when asked


def test_a_feeds_error_comes_after_its_items_and_keeps_its_type() -> None:
    got: list[int] = []
    with Feed(_count_then_break, 300, batch=64) as feed, pytest.raises(ArchiveReadError, match="truncated"):
        while not feed.done:
            got.extend(feed.more())
    assert got == list(range(300))


def test_a_feed_whose_child_dies_is_an_error_not_a_hang() -> None:
    with Feed(_count_then_die, 10) as feed, pytest.raises(ForkedError, match="died"):
        while not feed.done:
            feed.more()


def _endless_kib(path: str) -> Iterator[bytes]:
    for _ in range(100_000):  # 100 MiB: a hundred times what the pipe holds
        yield bytes(1024)
    open(path, "w").close()


def test_closing_a_feed_stops_its_child(tmp_path: object) -> None:
    marker = os.path.join(str(tmp_path), "went-on")
    with Feed(_endless_kib, marker, batch=10) as feed:
        assert feed.more() == [bytes(1024)] * 10
    assert not os.path.exists(marker)  # blocked on the full pipe, then terminated and reaped


def _numbered_kib_then_mark(path: str, n: int) -> Iterator[bytes]:
    for i in range(n):
        yield i.to_bytes(4, "big") + bytes(1020)
    open(path, "w").close()


def test_a_buffered_feeds_child_makes_everything_while_the_caller_takes_nothing(tmp_path: object) -> None:
    # Given a child making 8 MiB (eight times what the pipe holds) for a caller busy elsewhere
    marker = os.path.join(str(tmp_path), "made-all")
    with Feed(_numbered_kib_then_mark, marker, 8192, batch=16, buffered=True) as feed:
        # Then the child is not held back: it makes its last item before the caller takes the first
        while not os.path.exists(marker):
            time.sleep(0.01)  # waiting for the child's mark, not for a time
        got: list[bytes] = []
        while not feed.done:
            got.extend(feed.more())
    # and every item comes, in order
    assert [int.from_bytes(b[:4], "big") for b in got] == list(range(8192))


def _write_then_wait_for(shared: Any, reply: Any) -> int:
    shared.value = 7  # the parent sees it before the child returns
    while reply.value != 8:
        time.sleep(0.001)  # waits on the parent's answer, not on a clock
    return int(reply.value)


def test_a_shared_int_is_seen_by_both_processes_while_they_run() -> None:
    # Given two ints in shared memory, and a child forked after them
    shared, reply = shared_int(0), shared_int(0)
    with Forked(_write_then_wait_for, shared, reply) as child:
        # When the child writes one, the parent reads it while the child runs; and the other way round
        while shared.value != 7:
            time.sleep(0.001)
        reply.value = 8
        # Then the child saw the parent's write too
        assert child.result() == 8

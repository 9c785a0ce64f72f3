"""Work done in a forked child process beside the caller's, its result sent back through a pipe."""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import pickle
from collections.abc import Callable, Generator, Iterable
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class ForkedError(RuntimeError):
    """The child raised, or died before it answered (out of memory?)."""


class Forked(Generic[T]):
    """``fn(*args)`` running in a child forked now; :meth:`result` waits for it and returns its value.

    Pipe and fork, not a Pool: Lambda has no /dev/shm for a Pool's semaphores. The child shares the
    parent's memory copy-on-write (a loaded licence index costs nothing to hand over), so ``fn`` must
    not use what a fork does not carry: threads, or connections the parent goes on using (boto3
    clients). The result must pickle.
    """

    def __init__(self, fn: Callable[..., T], *args: Any) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child_end = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_run, args=(child_end, fn, args), daemon=True)
        self._proc.start()
        child_end.close()

    def __enter__(self) -> Forked[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        """A result never asked for (the caller failed first): the child is stopped, not left behind."""
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._conn.close()

    def result(self) -> T:
        try:
            status, value = self._conn.recv()
        except EOFError:
            status, value = "error", "a forked worker died before it answered (out of memory?)"
        finally:
            self._conn.close()
            self._proc.join()
        if status != "ok":
            raise ForkedError(value)
        result: T = value
        return result


class Done(Generic[T]):
    """A value already at hand, with the interface of :class:`Forked` (for the one-CPU path)."""

    def __init__(self, value: T) -> None:
        self._value = value

    def __enter__(self) -> Done[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def result(self) -> T:
        return self._value


def _run(conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as e:  # the parent raises it as ForkedError
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def usable_cpus() -> int:
    """CPUs this process may run on (a Lambda function gets one per 1,769 MB of memory)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def forked_iter(
    produce: Callable[..., Iterable[T]], *args: Any, batch: int = 512
) -> Generator[T, None, None]:
    """The items of ``produce(*args)``, made in a child forked now while the caller takes them.

    What the caller does with each item (write it to a database, say) runs beside what the child does
    to make them (walk an archive) on another core: each has a GIL of its own. The pipe holds a few
    batches, so a slow caller holds the child back rather than memory filling. The child's exception is
    raised here, after the items it made before it (an ArchiveReadError stays one); a child that dies
    raises ForkedError; a caller that stops early stops the child.
    """
    ctx = multiprocessing.get_context("fork")
    conn, child_end = ctx.Pipe(duplex=False)
    widen_pipe(conn.fileno())
    proc = ctx.Process(target=_produce, args=(child_end, produce, args, batch), daemon=True)
    proc.start()
    child_end.close()
    try:
        while True:
            try:
                kind, value = conn.recv()
            except EOFError:
                raise ForkedError("a forked worker died before it finished (out of memory?)") from None
            if kind == "items":
                yield from value
            elif kind == "done":
                return
            else:
                raise value
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join()
        conn.close()


#: what a pipe holds, asked of Linux. Its default, 64 KiB, is less than one batch of digests (the child
#: would wait for the caller to read again), and a thread writing into it while the process's main
#: thread is busy gets the GIL back only every 5 ms switch interval: 64 KiB a turn is 13 MB/s
PIPE_BYTES = 1 << 20


def widen_pipe(fd: int) -> None:
    """Ask Linux for a pipe of PIPE_BYTES; elsewhere, or past /proc/sys/fs/pipe-max-size, keep it."""
    with contextlib.suppress(AttributeError, OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)  # type: ignore[attr-defined]


def _produce(
    conn: Connection, produce: Callable[..., Iterable[Any]], args: tuple[Any, ...], batch: int
) -> None:
    items: list[Any] = []
    try:
        for item in produce(*args):
            items.append(item)
            if len(items) == batch:
                conn.send(("items", items))
                items = []
        conn.send(("items", items))
        conn.send(("done", None))
    except Exception as e:
        conn.send(("items", items))  # what was made before the error
        conn.send(("error", portable(e)))
    finally:
        conn.close()


def portable(error: Exception, fallback: type[Exception] = ForkedError) -> Exception:
    """``error`` if it crosses a pipe whole (it pickles both ways), else ``fallback`` with its words."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return fallback(f"{type(error).__name__}: {error}")
    return error

"""Work done in a forked child process beside the caller's, its result sent back through a pipe."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import multiprocessing
import os
import pickle
import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
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


def shared_int(value: int) -> Any:
    """An int in memory a child forked later shares with its parent, without a lock: one process writes
    it, the other reads it (``.value``), and a lock would need /dev/shm, which Lambda lacks."""
    return multiprocessing.get_context("fork").Value("q", value, lock=False)


def usable_cpus() -> int:
    """CPUs this process may run on (a Lambda function gets one per 1,769 MB of memory)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


A = TypeVar("A")


def spread(fn: Callable[[list[A]], list[T]], items: Sequence[A], workers: int) -> list[T]:
    """``fn`` over ``items`` on ``workers`` processes, the results in the order of ``items``.

    Each process gets an interleaved share (so big and small items alike); this one works its share
    while ``workers - 1`` children forked now work theirs, each sharing what the caller has loaded (a
    licence index) copy-on-write. A child that raises or dies raises ForkedError here; a caller that
    fails first stops the children. ``fn`` must keep to one result per item, in order.
    """
    if workers <= 1:
        return fn(list(items))
    shares = [list(items[i::workers]) for i in range(workers)]
    with contextlib.ExitStack() as children:
        forked = [children.enter_context(Forked(fn, share)) for share in shares[1:]]
        results = [fn(shares[0])]
        results += [child.result() for child in forked]
    ordered: list[Any] = [None] * len(items)
    for i, done in enumerate(results):
        ordered[i::workers] = done
    return ordered


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


class Urgent:
    """A :class:`Feed` item its caller waits for: sent at once, with the items made before it, not
    when its batch is full (the child may be held back before it fills one)."""


class Feed(Generic[T]):
    """The items of ``produce(*args)``, made in a child forked now, taken when the caller likes.

    For work beside a loop of the caller's own (where :func:`forked_iter` makes the caller's loop the
    consumer): the caller takes what has come with :meth:`ready` between its steps, which never waits,
    so the child is held back only while the pipe is full; :meth:`more` waits for the next batch.
    ``fork`` False makes the items in this process, when :meth:`more` asks (one CPU: a child would only
    take turns with the caller). A child's exception is raised by the call that meets it, after the items
    made before it; :meth:`close` (or leaving the ``with``) stops a child whose items are not all taken.
    ``buffered``: the child never waits for the caller; what the pipe cannot hold waits in the child's
    memory (for a caller busy elsewhere for seconds, as a local stack starting).
    """

    def __init__(
        self,
        produce: Callable[..., Iterable[T]],
        *args: Any,
        batch: int = 64,
        fork: bool = True,
        buffered: bool = False,
    ):
        self.done = False
        self._inline: Iterator[T] | None = None
        self._batch = batch
        self._proc: Any = None
        if not fork:
            self._inline = iter(produce(*args))
            return
        ctx = multiprocessing.get_context("fork")
        self._conn, child_end = ctx.Pipe(duplex=False)
        widen_pipe(self._conn.fileno())
        self._proc = ctx.Process(
            target=_produce, args=(child_end, produce, args, batch, buffered), daemon=True
        )
        self._proc.start()
        child_end.close()

    def __enter__(self) -> Feed[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ready(self) -> list[T]:
        """What the child has sent so far, without waiting."""
        out: list[T] = []
        while self._proc is not None and not self.done and self._conn.poll():
            out.extend(self._receive())
        return out

    def more(self) -> list[T]:
        """The next batch, waiting for it; [] once every item was taken (``done``)."""
        if self.done:
            return []
        if self._inline is not None:
            items = list(itertools.islice(self._inline, self._batch))
            self.done = len(items) < self._batch
            return items
        return self._receive()

    def _receive(self) -> list[T]:
        try:
            kind, value = self._conn.recv()
        except EOFError:
            self.done = True
            raise ForkedError("a forked worker died before it finished (out of memory?)") from None
        if kind == "items":
            return list(value)
        self.done = True
        if kind == "done":
            return []
        raise value

    def close(self) -> None:
        if self._proc is None:
            return
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._conn.close()
        self._proc = None


#: what a pipe holds, asked of Linux. Its default, 64 KiB, is less than one batch of digests (the child
#: would wait for the caller to read again), and a thread writing into it while the process's main
#: thread is busy gets the GIL back only every 5 ms switch interval: 64 KiB a turn is 13 MB/s
PIPE_BYTES = 1 << 20


def widen_pipe(fd: int) -> None:
    """Ask Linux for a pipe of PIPE_BYTES; elsewhere, or past /proc/sys/fs/pipe-max-size, keep it."""
    with contextlib.suppress(AttributeError, OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)  # type: ignore[attr-defined]


def _produce(
    conn: Connection,
    produce: Callable[..., Iterable[Any]],
    args: tuple[Any, ...],
    batch: int,
    buffered: bool = False,
) -> None:
    send: Callable[[Any], None] = conn.send
    sender: threading.Thread | None = None
    if buffered:  # a thread sends, in order, what the pipe takes; the rest waits here
        waiting: queue.SimpleQueue[Any] = queue.SimpleQueue()
        send = waiting.put
        sender = threading.Thread(target=_send_all, args=(conn, waiting), daemon=True)
        sender.start()
    items: list[Any] = []
    try:
        for item in produce(*args):
            items.append(item)
            if len(items) == batch or isinstance(item, Urgent):
                send(("items", items))
                items = []
        send(("items", items))
        send(("done", None))
    except Exception as e:
        send(("items", items))  # what was made before the error
        send(("error", portable(e)))
    finally:
        if sender is not None:
            send(None)
            sender.join()
        conn.close()


def _send_all(conn: Connection, waiting: queue.SimpleQueue[Any]) -> None:
    while (message := waiting.get()) is not None:
        conn.send(message)


def portable(error: Exception, fallback: type[Exception] = ForkedError) -> Exception:
    """``error`` if it crosses a pipe whole (it pickles both ways), else ``fallback`` with its words."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return fallback(f"{type(error).__name__}: {error}")
    return error

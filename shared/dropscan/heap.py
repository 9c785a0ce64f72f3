"""The garbage collector around big, long-lived structures: paused while they are built, then frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def building(*, keep: bool = False) -> Iterator[None]:
    """Collection paused while a structure of millions of objects and no garbage cycles is built.

    Each full collection walks every tracked object of the process, and building millions of objects
    sets off dozens of them: loading ScanCode's licence index took 3.9 s beside a kernel scan's
    manifest, 1.9 s without. ``keep``: the structure lives as long as the process (a cached index),
    so it is frozen out of every later collection too; children forked afterwards (triage workers)
    then share its pages instead of copying them when a collection would touch each object.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if keep:
            gc.freeze()
        if enabled:
            gc.enable()

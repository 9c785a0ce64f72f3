"""The garbage collector around big, long-lived structures: paused while they are built, then frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


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


@contextmanager
def frozen_survivors() -> Iterator[None]:
    """Full collections that walk only what is new: the survivors of each are frozen out of the next.

    For a process that holds millions of long-lived objects it did not build in one go, and that
    keep growing: the embedded stack's moto keeps its tables in the functions' own process (a
    kernel's 80,000 upstream items and their attribute objects), and every full collection walked
    them all. A kernel scan made 33 full collections in 7.3 s; with the survivors frozen, 67 in
    1.0 s, and the scan took 49.5 s against 56.0 s. What a frozen object leaves behind once it dies
    stays until the end (cycles only; reference counting frees the rest): 74 MB more peak RSS on
    that scan. At the end everything is unfrozen, so that a finished stack can be collected.
    """

    def freeze(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            gc.freeze()

    gc.callbacks.append(freeze)
    try:
        yield
    finally:
        gc.callbacks.remove(freeze)
        gc.unfreeze()

"""The path of one function's invocations through the code: which files of dropscan (and functions/)
each invocation enters, in the order first entered, and how often each is entered from another file.

A pytest plugin: every invocation of the function (as the local dispatcher invokes handlers) runs under
``sys.setprofile``; a *call* whose frame lies in another file than its caller's is an entry (returns are
not counted; forked children are not followed). Run it on any end-to-end test::

    PYTHONPATH=shared:.:bench .venv/bin/pytest -q -p pathtrace tests/e2e/test_triage_flow.py
    PATHTRACE_FUNCTION=UnpackFunction PYTHONPATH=shared:.:bench .venv/bin/pytest -q -p pathtrace ...

The summary is printed after the tests and written as JSON to PATHTRACE_OUT (bench-out/pathtrace.json).
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FUNCTION = os.environ.get("PATHTRACE_FUNCTION", "TriageFunction")
OUT = Path(os.environ.get("PATHTRACE_OUT", str(ROOT / "bench-out" / "pathtrace.json")))
ROOMS = ("functions/", "dropscan/stages/", "dropscan/audit/")
runs: list[dict[str, Any]] = []


def _ours(filename: str) -> str | None:
    """``dropscan/...`` or ``functions/...`` for a file of this tree, else None."""
    try:
        rel = Path(filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    if rel.startswith(("shared/dropscan/", "functions/")):
        return rel.removeprefix("shared/")
    return None


def _traced(event: dict[str, Any], invoke: Any) -> Any:
    entries: Counter[str] = Counter()
    order: list[str] = []
    names: dict[str, str | None] = {}  # co_filename -> ours (resolving paths is most of the cost)

    def ours(filename: str) -> str | None:
        if filename not in names:
            names[filename] = _ours(filename)
        return names[filename]

    def profile(frame: FrameType, what: str, arg: Any) -> None:
        if what != "call":
            return
        here = ours(frame.f_code.co_filename)
        caller = ours(frame.f_back.f_code.co_filename) if frame.f_back else None
        if here and here != caller:
            entries[here] += 1
            if here not in order:
                order.append(here)

    sys.setprofile(profile)
    try:
        return invoke()
    finally:
        sys.setprofile(None)
        body = json.dumps(event)
        kind = [k for k in ("triage_part", "assemble") if k in body] or ["message"]
        runs.append({"kind": kind[0], "files": order, "entries": dict(entries)})


def pytest_configure(config: pytest.Config) -> None:
    from dropscan.local import dispatcher

    real = dispatcher.Dispatcher._invoke

    def invoke(self: Any, fn: Any, event: dict[str, Any]) -> Any:
        if fn.logical_id != FUNCTION:
            return real(self, fn, event)
        return _traced(event, lambda: real(self, fn, event))

    dispatcher.Dispatcher._invoke = invoke  # type: ignore[method-assign]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(runs, indent=1))
    seen: set[tuple[str, tuple[str, ...]]] = set()
    terminalreporter.write_line(f"pathtrace: {len(runs)} invocations of {FUNCTION} ({OUT})")
    for run in runs:
        key = (run["kind"], tuple(run["files"]))
        if key in seen:
            continue
        seen.add(key)
        rooms = [f for f in run["files"] if f.startswith(ROOMS)]
        terminalreporter.write_line(f"  {run['kind']}: {len(run['files'])} files")
        terminalreporter.write_line(f"    handler, stages, audit ({len(rooms)}): {', '.join(rooms)}")
        stages = {f: n for f, n in run["entries"].items() if f.startswith("dropscan/stages/")}
        terminalreporter.write_line(f"    stage modules entered: {stages}")

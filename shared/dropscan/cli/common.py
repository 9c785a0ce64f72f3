"""What the commands share: bad usage, the default data folder, progress on stderr, and the stack the
options name (embedded moto, a running ``dropscan up``, or a deployed stack)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """Bad arguments: exit status 2."""


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/dropscan``, by default ``~/.local/share/dropscan``: the embedded stack's database,
    decisions and finished scans, shared by every run of this user that names no ``--data-dir``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dropscan"


Status = Callable[[str], AbstractContextManager[Callable[[str], None]]]


def progress(quiet: bool) -> Status:
    """``with status("scanning…") as update: update("scanning: 3 of 9 chunks")``: a line on stderr.

    On a terminal a spinner whose text ``update`` replaces; elsewhere (a log, a pipe) each distinct text
    once, as a line; nothing at all under ``--quiet``. Machine-readable output stays on stdout.
    """
    from rich.console import Console

    console = Console(stderr=True)

    @contextmanager
    def status(text: str) -> Iterator[Callable[[str], None]]:
        if quiet:
            yield lambda _: None
        elif console.is_terminal:
            with console.status(text) as spinner:
                yield lambda t: spinner.update(t)
        else:
            said = [_counts(text)]
            print(f"dropscan: {text}", file=sys.stderr, flush=True)

            def say(t: str) -> None:
                if _counts(t) != said[-1]:  # a line when the counts change, not each second
                    said.append(_counts(t))
                    print(f"dropscan: {t}", file=sys.stderr, flush=True)

            yield say

    return status


def _counts(text: str) -> str:
    """A status text without its elapsed seconds (``…, 12 s…``)."""
    return re.sub(r",? \d+ s…$", "", text)


def say(quiet: bool) -> Callable[[str], None]:
    """One line of progress on stderr (``dropscan: …``), nothing under ``--quiet``."""

    def line(text: str) -> None:
        if not quiet:
            print(f"dropscan: {text}", file=sys.stderr, flush=True)

    return line


@contextmanager
def open_stack(
    endpoint_url: str | None, stack: str | None, data_dir: Path, *, upstream: bool = True
) -> Iterator[tuple[Any, Any, Callable[[], None]]]:
    """The client for the stack the options name: embedded (default), --endpoint-url or --stack.

    With it, its mailbox (embedded only) and what saves the embedded stack's database beside the caller.
    """
    if endpoint_url or stack:
        from dropscan.store.stack import connect

        yield connect(stack or "dropscan-local", endpoint_url), None, lambda: None
        return
    from dropscan.local.embedded import embedded

    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (
        (logs / "functions.log").open("a") as log,
        embedded(log_stream=log, data_dir=data_dir, upstream=upstream) as es,
    ):
        yield es.client, es.mailbox, es.save_db_beside


def target_of(a: argparse.Namespace, *, upstream: bool = True) -> Any:
    """:func:`open_stack` for the options :func:`add_target` added."""
    return open_stack(a.endpoint_url, a.stack, Path(a.data_dir), upstream=upstream)


def where(endpoint_url: str | None, stack: str | None, data_dir: Path) -> tuple[str, str]:
    """(kind, location) of the database these options use: embedded and its folder, or the stack."""
    if endpoint_url:
        return "endpoint", endpoint_url
    if stack:
        return "stack", stack
    return "embedded", str(data_dir.expanduser().resolve())


def add_target(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--endpoint-url", metavar="URL", help="use a running `dropscan up` at this URL")
    g.add_argument(
        "--stack",
        metavar="NAME",
        help="use the deployed stack of this name (names from its CloudFormation outputs)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        default=str(default_data_dir()),
        help="the embedded stack's database, decisions and finished scans (default: %(default)s,"
        " shared by every run that names none)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress and no summary")

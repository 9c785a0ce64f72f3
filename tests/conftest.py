"""Shared fixtures: the embedded stack (template.yaml in a fresh moto) and the small upstream/drop pair."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dropscan.local.dispatcher import load_handler
from dropscan.local.embedded import EmbeddedStack, embedded

from helpers.builders import DROP_FILES, UPSTREAM_FILES, make_tar


@pytest.fixture
def stack() -> Iterator[EmbeddedStack]:
    """template.yaml deployed into a fresh in-process moto, dispatcher ready."""
    with embedded() as es:
        yield es


#: a failed delivery comes back within a second, so that retries and dead-lettering take seconds
FAST = {"StageVisibilityTimeout": "1", "QueueVisibilityTimeout": "1", "ChunkSize": "10"}


@pytest.fixture
def fast_stack() -> Iterator[EmbeddedStack]:
    """The stack with one-second visibility timeouts and chunks of ten files."""
    with embedded(parameters=FAST) as es:
        yield es


@pytest.fixture
def app(stack: EmbeddedStack) -> Callable[[str], Any]:
    """The handler of a function as the template names it: app("UnpackFunction")(event, context)."""
    return lambda logical_id: load_handler(stack.stack.functions[logical_id])


@pytest.fixture
def upstream_archive(tmp_path: Path) -> Path:
    return make_tar(tmp_path / "foo-1.0.tar.gz", UPSTREAM_FILES)


@pytest.fixture
def drop_archive(tmp_path: Path) -> Path:
    return make_tar(tmp_path / "foo-1.0-acme.tar.gz", DROP_FILES)


# ------------------------------------------------------------------ what was skipped, and how to run it
#: words of a skip reason -> the command that makes the test run
ENABLED_BY = (
    ("make image-test", "make image-test"),
    ("make package", "make package"),
    ("make cases", "make cases"),
    ("make firmware-cases", "make firmware-cases"),
    ("make evidence-cases", "make evidence-cases"),
    ("make firmware-tools", "make firmware-tools"),
    ("make awscli", "make awscli"),
    ("chromium", "make browser"),
    ("ScanCode", "make install (ScanCode Toolkit, the '.[triage]' extra)"),
    ("DROPSCAN_CASES_SRC", "make test (it sets DROPSCAN_CASES_SRC to ../shared/cases)"),
    ("liblzma", "apt-get install liblzma5 (5.4 or later)"),
    ("xz-utils", "apt-get install xz-utils"),
    ("LIBARCHIVE", "unset LIBARCHIVE"),
)


def _enabled_by(reason: str) -> str:
    return next((command for words, command in ENABLED_BY if words in reason), "see the reason")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Every skipped test, grouped by why, with the command that enables it: a skip is never silent.
    Under ``DROPSCAN_REQUIRE_ALL=1`` (``.ci/run``) any skip fails the run (see pytest_sessionfinish)."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    by_reason: dict[str, list[str]] = {}
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        by_reason.setdefault(reason.removeprefix("Skipped: "), []).append(report.nodeid)
    terminalreporter.section("skipped tests, and what runs them")
    for reason, tests in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        terminalreporter.line(f"{len(tests)} skipped: {reason}")
        terminalreporter.line(f"    enable with: {_enabled_by(reason)}")
        for nodeid in tests[:5]:
            terminalreporter.line(f"    {nodeid}")
        if len(tests) > 5:
            terminalreporter.line(f"    … and {len(tests) - 5} more")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if os.environ.get("DROPSCAN_REQUIRE_ALL") == "1" and skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # CI runs everything: a skip is a failure

"""Shared fixtures: the embedded stack (template.yaml in a fresh moto) and the small upstream/drop pair."""

from __future__ import annotations

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

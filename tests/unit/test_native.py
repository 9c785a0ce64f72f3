"""Which native libraries dropscan loads: the bundled copies first, then the system's."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import io
import logging
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import libarchive
import libarchive.ffi
import pytest

from dropscan import native
from dropscan.archive import walk


@pytest.fixture
def fresh_lookups() -> Iterator[None]:
    for cached in (native.bundled_dir, native.libarchive_path, native.liblzma_path):
        cached.cache_clear()
    yield
    for cached in (native.bundled_dir, native.libarchive_path, native.liblzma_path):
        cached.cache_clear()


def test_libarchive_c_runs_on_the_bundled_libarchive() -> None:
    bundled = native.bundled_dir()
    assert bundled is not None  # archi is a dependency: every install has it
    path = native.libarchive_path()
    assert path is not None and Path(path).parent == bundled
    assert libarchive.ffi.libarchive._name == path
    assert libarchive.ffi.version_number() >= 3008010


def test_without_the_bundle_the_systems_copies_are_used(
    monkeypatch: pytest.MonkeyPatch, fresh_lookups: None
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: f"lib{name}.so.system")
    assert native.bundled_dir() is None
    assert native.libarchive_path() == "libarchive.so.system"
    assert native.liblzma_path() == "liblzma.so.system"


def test_the_threaded_xz_decoder_takes_only_a_liblzma_that_has_it(fresh_lookups: None) -> None:
    bundled = native.liblzma_path()
    assert bundled is not None and Path(bundled).parent == native.bundled_dir()
    assert ctypes.CDLL(bundled).lzma_version_number() < 50040002  # 5.2.4: no threaded decoder
    threaded = native.liblzma_path(50040002)
    assert threaded != bundled
    if threaded is not None:  # this machine's own liblzma, where it is 5.4 or later
        assert ctypes.CDLL(threaded).lzma_version_number() >= 50040002


def test_an_operators_libarchive_setting_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIBARCHIVE", "/opt/own/libarchive.so.13")
    native.use_bundled_libarchive()
    assert os.environ["LIBARCHIVE"] == "/opt/own/libarchive.so.13"


def test_the_bundled_builds_notes_are_not_logged_for_every_archive(caplog: pytest.LogCaptureFixture) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("a.c")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    # the walker enables each filter and format by name: bzip2 and xar warn on the bundled build
    with caplog.at_level(logging.INFO, logger="libarchive"):
        assert [r.path for r in walk(io.BytesIO(buf.getvalue()), "d.tar")] == ["a.c"]
    assert not [r for r in caplog.records if r.getMessage() in native.BUILD_NOTES]
    logging.getLogger("libarchive").warning("something else")  # other warnings still get through
    assert caplog.records[-1].getMessage() == "something else"

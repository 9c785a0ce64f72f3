"""Which native libraries dropscan loads: the bundled copies first, then the system's."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dropscan.archive import binding, native, walk


@pytest.fixture
def fresh_lookups() -> Iterator[None]:
    for cached in (native.bundled_dir, native.libarchive_path, native.liblzma_path):
        cached.cache_clear()
    yield
    for cached in (native.bundled_dir, native.libarchive_path, native.liblzma_path):
        cached.cache_clear()


def test_the_binding_runs_on_the_bundled_libarchive() -> None:
    bundled = native.bundled_dir()
    assert bundled is not None  # archi is a dependency: every install has it
    path = native.libarchive_path()
    assert path is not None and Path(path).parent == bundled
    if "LIBARCHIVE" in os.environ:
        pytest.skip("an operator's LIBARCHIVE overrides the bundled copy")
    with open("/proc/self/maps") as maps:  # the copy the binding loaded at import
        mapped = {line.split()[-1] for line in maps if "libarchive" in line.rsplit("/", 1)[-1]}
    assert path in mapped
    assert binding._lib.archive_version_number() >= 3008010


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


def test_an_operators_libarchive_setting_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIBARCHIVE", "/opt/own/libarchive.so.13")
    assert binding._library_path() == "/opt/own/libarchive.so.13"
    monkeypatch.delenv("LIBARCHIVE")
    assert binding._library_path() == native.libarchive_path()


def test_the_bundled_build_reads_what_the_walker_asks_of_it() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("a.c")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    # the walker enables each filter and format by name, bzip2 and xar among them (the bundled build
    # has neither library: enabling them only warns)
    assert [r.path for r in walk(io.BytesIO(buf.getvalue()), "d.tar")] == ["a.c"]

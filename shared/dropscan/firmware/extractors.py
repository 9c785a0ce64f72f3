"""The extractors each format is read with, run within the limits of one firmware image.

File systems go to the tools made for them (squashfs-tools' ``unsquashfs``, u-boot-tools'
``dumpimage``, e2fsprogs' ``debugfs``, ``jefferson``, ubi-reader's ``ubireader_extract_files``,
util-linux's ``fsck.cramfs``), archives to libarchive (``dropscan.archive.binding``), compressed
streams to Python's and the ``zstandard``/``lz4`` bindings' decompressors. Every tool runs under a
deadline and ``RLIMIT_FSIZE``; its output tree is measured while it runs, so a bomb is stopped, not
finished. Links are written as links (by the tools, or here) and never followed afterwards.
"""

from __future__ import annotations

import bz2
import dataclasses
import lzma
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import IO, Protocol, cast

import lz4.frame
import zstandard

from dropscan.archive import binding
from dropscan.archive.limits import LimitExceeded, Limits, size_text

BLOCK = 1 << 20
# a running tool's output tree is measured every POLL_SECONDS, or less often when measuring it costs
# more than POLL_SHARE of the time (a tree of thousands of files: the walk would take a core from the
# tool), but at least every POLL_MAX_SECONDS
POLL_SECONDS = 0.2
POLL_SHARE = 0.05
POLL_MAX_SECONDS = 1.0


class ExtractError(Exception):
    """The extractor could not read the blob; ``reason`` says why, as the tool said it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass
class Budget:
    """What the image's unpacking may still spend: bytes written, entries, time."""

    limits: Limits
    deadline: float  # time.monotonic() past which every extractor stops
    written: int = 0
    entries: int = 0

    def charge(self, written: int = 0, entries: int = 0) -> None:
        """Count output; LimitExceeded once past the image's totals or its deadline."""
        self.written += written
        self.entries += entries
        if self.written > self.limits.total_bytes:
            raise LimitExceeded(f"more than {size_text(self.limits.total_bytes)} unpacked")
        if self.entries > self.limits.files:
            raise LimitExceeded(f"more than {self.limits.files:,} entries")
        self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise LimitExceeded("the unpacking deadline passed")


def tool(name: str) -> str:
    """The path of a command: beside this interpreter first (the venv's jefferson), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        raise ExtractError(f"{name} is not installed")
    return found


def tree_size(root: Path) -> tuple[int, int]:
    """Apparent bytes and entries under ``root``, links not followed."""
    total = count = 0
    stack = [root]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    count += 1
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    else:
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total, count


def run_tool(argv: list[str], out: Path, budget: Budget) -> None:
    """Run an extractor writing into ``out``, stopped past the budget; ExtractError on its failure."""
    Running(argv, out, budget).finish()


class Running:
    """An extractor started now, writing into ``out``: a thread measures its output tree while it runs
    and stops it past the budget; ``finish`` waits for it and charges the budget with what it wrote (so
    the caller can do other work meanwhile, and the budget is charged in the caller's order)."""

    def __init__(self, argv: list[str], out: Path, budget: Budget) -> None:
        self.argv, self.out, self.budget = argv, out, budget
        member = budget.limits.member_bytes
        out.mkdir(parents=True, exist_ok=True)
        # the tool's messages go to a file: a pipe nobody reads while polling would block a chatty tool
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish() or stop()
        # RLIMIT_FSIZE set by util-linux's prlimit, which then execs the tool: a preexec_fn runs Python
        # in the forked child, which may deadlock while other threads (the drop's read) hold locks
        limited = shutil.which("prlimit")
        if limited:
            self._proc = subprocess.Popen(
                [limited, f"--fsize={member}", "--", *argv], stdout=self._log, stderr=self._log, cwd=out
            )
        else:

            def limit_files() -> None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (member, member))

            self._proc = subprocess.Popen(
                argv, stdout=self._log, stderr=self._log, preexec_fn=limit_files, cwd=out
            )
        self._error: BaseException | None = None
        self._stopped = threading.Event()
        self._watch = threading.Thread(target=self._measure, daemon=True)
        self._watch.start()

    def _measure(self) -> None:
        interval = POLL_SECONDS
        while not self._stopped.is_set():
            try:
                self._proc.wait(interval)
                return
            except subprocess.TimeoutExpired:
                pass
            began = time.monotonic()
            try:
                written, entries = tree_size(self.out)
                _check_running(self.budget, written, entries)
            except BaseException as error:  # raised by finish(), in the caller's thread
                self._error = error
                self._proc.kill()
                return
            interval = min(POLL_MAX_SECONDS, max(POLL_SECONDS, (time.monotonic() - began) / POLL_SHARE))

    def stop(self) -> None:
        """The output is not wanted (the caller removes ``out``): the tool is killed."""
        self._stopped.set()
        self._proc.kill()
        self._proc.wait()
        self._watch.join()
        self._log.close()

    def finish(self) -> None:
        """Wait for the tool; LimitExceeded past the budget, ExtractError on its failure."""
        try:
            self._watch.join()
            self._proc.wait()
        except BaseException:
            self.stop()
            raise
        try:
            if self._error is not None:
                raise self._error
            self._log.seek(0)
            stderr = self._log.read(1 << 20).decode("utf-8", "replace")
        finally:
            self._log.close()
        written, entries = tree_size(self.out)
        self.budget.charge(written, entries)
        member = self.budget.limits.member_bytes
        if self._proc.returncode == -25 or "File too large" in stderr:  # SIGXFSZ: RLIMIT_FSIZE was hit
            raise LimitExceeded(f"a member over {size_text(member)}")
        if self._proc.returncode != 0:
            lines = [line.strip() for line in stderr.splitlines() if line.strip()]
            raise ExtractError(
                f"{Path(self.argv[0]).name} failed: "
                f"{lines[-1] if lines else f'exit {self._proc.returncode}'}"[:300]
            )


def _check_running(budget: Budget, written: int, entries: int) -> None:
    if budget.written + written > budget.limits.total_bytes:
        raise LimitExceeded(f"more than {size_text(budget.limits.total_bytes)} unpacked")
    if budget.entries + entries > budget.limits.files:
        raise LimitExceeded(f"more than {budget.limits.files:,} entries")
    budget.check_time()


def segment(source: Path, offset: int, length: int | None, target: Path, budget: Budget) -> Path:
    """``source`` itself when the blob is all of it, else the blob's bytes copied to ``target``."""
    size = source.stat().st_size
    if offset == 0 and (length is None or length >= size):
        return source
    end = size if length is None else min(size, offset + length)
    with source.open("rb") as src, target.open("wb") as dst:
        src.seek(offset)
        left = end - offset
        while left > 0:
            block = src.read(min(BLOCK, left))
            if not block:
                break
            dst.write(block)
            left -= len(block)
    budget.charge(written=end - offset)
    return target


# --- file systems, by their own tools ---------------------------------------------------------------


def squashfs(source: Path, offset: int, dest: Path, budget: Budget) -> None:
    """unsquashfs at ``offset`` of ``source`` (no copy of the blob): it creates ``dest`` itself."""
    start_squashfs(source, offset, dest, budget).finish()


def start_squashfs(source: Path, offset: int, dest: Path, budget: Budget) -> Running:
    """unsquashfs started, to be finished (or stopped) by the caller."""
    argv = [tool("unsquashfs"), "-n", "-no-xattrs", "-o", str(offset), "-d", str(dest), str(source)]
    return Running(argv, dest.parent, budget)


def ext(image: Path, dest: Path, budget: Budget) -> None:
    dest.mkdir()
    run_tool([tool("debugfs"), "-R", f"rdump / {dest}", str(image)], dest.parent, budget)
    if not any(dest.iterdir()):
        raise ExtractError("debugfs found no file system")


def jffs2(image: Path, dest: Path, budget: Budget) -> None:
    run_tool([tool("jefferson"), "-f", "-d", str(dest), str(image)], dest.parent, budget)


def ubi(image: Path, dest: Path, budget: Budget) -> None:
    run_tool([tool("ubireader_extract_files"), "-k", "-o", str(dest), str(image)], dest.parent, budget)


def cramfs(image: Path, dest: Path, budget: Budget) -> None:
    run_tool([tool("fsck.cramfs"), f"--extract={dest}", str(image)], dest.parent, budget)


def uimage(image: Path, out: Path, budget: Budget) -> list[Path]:
    """The data of a legacy uImage as dumpimage writes it (still compressed as its header says)."""
    target = out / "part0"
    run_tool([tool("dumpimage"), "-T", "kernel", "-p", "0", "-o", str(target), str(image)], out, budget)
    return [target]


def fit(image: Path, out: Path, budget: Budget) -> list[Path]:
    """Every image node of a FIT, extracted by position as dumpimage lists them."""
    listing = subprocess.run(
        [tool("dumpimage"), "-l", str(image)], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    count = sum(1 for line in listing.splitlines() if line.lstrip().startswith("Image ") and "(" in line)
    written = []
    for index in range(count):
        target = out / f"part{index}"
        argv = [tool("dumpimage"), "-T", "flat_dt", "-p", str(index), "-o", str(target), str(image)]
        run_tool(argv, out, budget)
        written.append(target)
    if not written:
        raise ExtractError("dumpimage lists no image in the FIT")
    return written


# --- archives, by libarchive ---------------------------------------------------------------------------


class _Window:
    """``read(n)`` over ``length`` bytes of a file from ``offset`` (the rest of it when None)."""

    def __init__(self, handle: IO[bytes], offset: int, length: int | None) -> None:
        handle.seek(offset)
        self._handle = handle
        self._left = length if length is not None else -1

    def read(self, size: int = -1, /) -> bytes:
        if self._left == 0:
            return b""
        want = size if self._left < 0 else min(size if size >= 0 else self._left, self._left)
        data = self._handle.read(want)
        if self._left > 0:
            self._left -= len(data)
        return data


def archive(source: Path, offset: int, length: int | None, out: Path, budget: Budget) -> int:
    """cpio, tar or zip at ``offset`` into ``out`` with libarchive; returns the bytes it consumed.

    Members are written under ``out`` by their cleaned names; links are made as links, never through
    one (a member below a linked folder is refused), devices and fifos are skipped.
    """
    root = out / "root"
    root.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as handle:
        window = _Window(handle, offset, length)
        try:
            reader, entry = binding.open_reader(window, seekable=False)
        except binding.Unrecognised:
            raise ExtractError("libarchive recognises no archive here") from None
        except binding.Broken as error:
            raise ExtractError(error.reason) from None
        with reader:
            while entry is not None:
                budget.charge(entries=1)
                _member(reader, entry, root, budget)
                try:
                    entry = reader.next_entry()
                except binding.Broken as error:
                    raise ExtractError(error.reason) from None
            return reader.consumed()


def _member(reader: binding.Reader, entry: int, root: Path, budget: Budget) -> None:
    parts = [
        p for p in binding.raw_name(entry).decode("utf-8", "replace").split("/") if p not in ("", ".", "..")
    ]
    if not parts:
        return
    kind = binding.entry_filetype(entry) & binding.TYPE_MASK
    parent = _safe_parent(root, parts[:-1])
    if parent is None:
        return
    target = parent / parts[-1]
    if target.is_symlink() or target.exists():
        return  # a second member of one name: the first stays
    if kind == 0o040000:
        target.mkdir()
    elif kind == binding.SYMLINK:
        link = binding.entry_symlink(entry) or b""
        os.symlink(link.decode("utf-8", "replace"), target)
    elif binding.has_data(kind, binding.entry_hardlink(entry)):
        _write(reader, target, budget)


def _safe_parent(root: Path, folders: list[str]) -> Path | None:
    """The folder for a member, created below ``root``; None if any part of it is a link."""
    here = root
    for name in folders:
        here = here / name
        if here.is_symlink():
            return None
        if not here.exists():
            here.mkdir()
    return here


def _write(reader: binding.Reader, target: Path, budget: Budget) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    size = 0
    with os.fdopen(fd, "wb") as sink:
        while True:
            try:
                block = reader.read()
            except binding.Broken as error:
                raise ExtractError(error.reason) from None
            if not block:
                break
            size += len(block)
            if size > budget.limits.member_bytes:
                raise LimitExceeded(f"a member over {size_text(budget.limits.member_bytes)}")
            budget.charge(written=len(block))
            sink.write(block)


# --- compressed streams --------------------------------------------------------------------------------


class _Stream(Protocol):
    def decompress(self, data: bytes, /) -> bytes: ...


def decompress(source: Path, offset: int, fmt: str, target: Path, budget: Budget) -> int:
    """A compressed stream at ``offset`` into ``target``; returns the compressed bytes it spanned.

    The output is capped by the image's budget and by the compression ratio of the limits (past
    ``ratio_after``): a bomb stops with a LimitExceeded. Data after the stream's end is left alone.
    """
    if fmt == "lz4-legacy":
        return _lz4_legacy(source, offset, target, budget)
    decoder = _decoder(fmt)
    used = out = 0
    limits = budget.limits
    with source.open("rb") as src, target.open("wb") as sink:
        src.seek(offset)
        while not _finished(decoder):
            block = src.read(BLOCK)
            if not block:
                if out == 0:
                    raise ExtractError(f"{fmt} stream truncated")
                break
            try:
                data = decoder.decompress(block)
            except (
                OSError,
                EOFError,
                lzma.LZMAError,
                zlib.error,
                zstandard.ZstdError,
                RuntimeError,
            ) as error:
                if out == 0:
                    raise ExtractError(f"{fmt}: {error}") from None
                break  # a damaged tail after good output: what was read stays, as the kernel's decoders do
            used += len(block) - len(_unused(decoder))
            out += len(data)
            if out > limits.ratio_after and out > limits.ratio * max(used, 1):
                raise LimitExceeded(f"{fmt} expands past {limits.ratio}:1")
            if out > limits.member_bytes:
                raise LimitExceeded(f"a member over {size_text(limits.member_bytes)}")
            budget.charge(written=len(data))
            sink.write(data)
    if out == 0:
        raise ExtractError(f"{fmt} stream holds no data")
    return used


def _decoder(fmt: str) -> _Stream:
    if fmt == "gzip":
        return zlib.decompressobj(31)
    if fmt in ("xz", "lzma"):
        return lzma.LZMADecompressor()
    if fmt == "bzip2":
        return bz2.BZ2Decompressor()
    if fmt == "zstd":
        return cast(_Stream, zstandard.ZstdDecompressor().decompressobj())
    if fmt == "lz4":
        return cast(_Stream, lz4.frame.LZ4FrameDecompressor())
    raise ExtractError(f"no decompressor for {fmt}")


def _finished(decoder: object) -> bool:
    return bool(getattr(decoder, "eof", False))


def _unused(decoder: object) -> bytes:
    return bytes(getattr(decoder, "unused_data", b""))


def _lz4_legacy(source: Path, offset: int, target: Path, budget: Budget) -> int:
    """The kernel's LZ4 (the legacy frame), by the ``lz4`` command: Python's binding reads frames only."""
    piece = segment(source, offset, None, target.with_suffix(".lz4"), budget)
    run_tool([tool("lz4"), "-d", "-f", "-q", str(piece), str(target)], target.parent, budget)
    return source.stat().st_size - offset

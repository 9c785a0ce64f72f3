"""A firmware image unpacked recursively, carved at offsets, within the limits of an upload.

``unpack(image, scratch)`` finds where formats start in the image (``formats.scan``), hands each blob
to its extractor (``extractors``), walks what came out without following a link, and does the same for
every extracted file that starts with a format, to ``limits.depth`` levels. What it cannot read is a
``Blob`` with status ``unreadable`` and the reason; a limit that trips ends the whole unpacking with
``stopped`` set, keeping what was found before it. Paths name where a file is inside the image:
``router.bin@0x20000:squashfs!/usr/sbin/dropbear`` is the file of a squashfs carved at 0x20000.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from dropscan.archive.limits import GiB, LimitExceeded, Limits
from dropscan.firmware import extractors, formats
from dropscan.firmware.extractors import Budget, ExtractError

# A router image is tens of MB; what one unpacks to stays well within a Lambda's ephemeral storage.
FIRMWARE_LIMITS = Limits(total_bytes=8 * GiB, files=500_000, depth=8, member_bytes=2 * GiB)
DEFAULT_SECONDS = 600.0
# weak magics (two or three bytes, no checksum) at an offset other than 0 are tried, and dropped
# silently when their extractor cannot read them: compiled code is full of them
STRONG = frozenset({"squashfs", "uimage", "fit", "ubi", "cramfs"})
# unclaimed stretches of an image shorter than this are padding between blobs, not content
GAP_MIN = 4096
# formats made of many blocks with a magic each: one blob from the first to the next other format
BLOCKED = frozenset({"ubi", "ubifs", "jffs2"})
# blobs whose payload is a kernel or loader: their own data is searched for an initramfs or a rootfs
FILESYSTEMS = {
    "ext": extractors.ext,
    "jffs2": extractors.jffs2,
    "ubi": extractors.ubi,
    "ubifs": extractors.ubi,
    "cramfs": extractors.cramfs,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Blob:
    """One format found in the image: where, what, and whether it was read."""

    path: str  # e.g. "router.bin@0x20000:squashfs"
    fmt: str
    offset: int
    size: int | None
    detail: str
    status: str  # "unpacked" | "unreadable"
    reason: str | None = None
    arch: str | None = None  # as its header states it (uImage)


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """A file, link or folder of an unpacked blob; ``local`` is its extracted copy (regular files)."""

    path: str  # in the image: "<blob path>!/<path inside it>", or the blob path for a decompressed stream
    kind: str  # "file" | "link" | "dir" | "other"
    size: int
    container: str
    target: str | None = None
    local: Path | None = None


@dataclasses.dataclass
class Unpacked:
    """Everything found in one image."""

    image: str
    size: int
    blobs: list[Blob] = dataclasses.field(default_factory=list)
    entries: list[Entry] = dataclasses.field(default_factory=list)
    stopped: str | None = None  # the limit that ended the unpacking, if one did

    def files(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "file" and e.local is not None]

    def contents(self) -> Iterator[tuple[str, bytes]]:
        """Each extracted file's path in the image and its bytes, one at a time."""
        for entry in self.files():
            assert entry.local is not None
            yield entry.path, entry.local.read_bytes()

    def stated_arch(self) -> list[str]:
        """The architectures the image's headers state (uImage), outermost first."""
        return [b.arch for b in sorted(self.blobs, key=lambda b: b.path.count("!")) if b.arch]


def unpack(
    image: Path, scratch: Path, limits: Limits = FIRMWARE_LIMITS, seconds: float = DEFAULT_SECONDS
) -> Unpacked:
    """Every blob and file of ``image``, extracted under ``scratch`` (which the caller removes)."""
    image = image.resolve()
    scratch = scratch.resolve()
    size = image.stat().st_size
    result = Unpacked(image=image.name, size=size)
    budget = Budget(limits, time.monotonic() + seconds)
    if size > limits.member_bytes:
        result.stopped = f"the image is larger than {limits.member_bytes:,} bytes"
        return result
    walk = _Walk(result, budget, scratch)
    try:
        if not walk.blob(image, image.name, depth=0, carve=True):
            result.blobs.append(
                Blob(image.name, "unknown", 0, size, "", "unreadable", "no firmware format recognised")
            )
    except LimitExceeded as error:
        result.stopped = error.reason
    return result


class _Walk:
    def __init__(self, result: Unpacked, budget: Budget, scratch: Path) -> None:
        self.result = result
        self.budget = budget
        self.scratch = scratch
        self.count = 0
        # extractions started ahead of their turn: (source, offset) -> (their folder, the tool)
        self.ahead: dict[tuple[Path, int], tuple[Path, extractors.Running]] = {}

    def _dir(self) -> Path:
        self.count += 1
        target = self.scratch / f"b{self.count}"
        target.mkdir(parents=True)
        return target

    def blob(self, source: Path, name: str, depth: int, carve: bool) -> bool:
        """Unpack the formats in ``source``; False if none starts at 0 (and, carving, none at all)."""
        if depth > self.budget.limits.depth:
            raise LimitExceeded(f"nested more than {self.budget.limits.depth} levels at {name}")
        finds = _finds(source, carve)
        position = 0
        read_any = False
        claimed: list[tuple[int, int]] = []
        self._start_ahead(source, finds)
        try:
            for found in finds:
                if found.offset < position:
                    continue
                self.budget.check_time()
                span = self._one(source, name, found, finds, depth)
                if span is None:
                    continue
                read_any = True
                position = found.offset + max(span, 1)
                claimed.append((found.offset, position))
        finally:
            self._stop_ahead(source)
        if depth == 0:
            self._gaps(source, name, claimed)
        return read_any

    def _start_ahead(self, source: Path, finds: list[formats.Found]) -> None:
        """The first squashfs after another blob (OpenWrt's rootfs after its kernel) is extracted from
        now on, beside the blobs before it: unsquashfs leaves a core idle much of the time, and the
        kernel's LZMA and search take one (docs/firmware.md). Its budget is charged in turn."""
        ahead = next((f for f in finds[1:] if f.fmt == "squashfs"), None)
        if ahead is None:
            return
        out = self._dir()
        try:
            running = extractors.start_squashfs(source, ahead.offset, out / "root", self.budget)
        except ExtractError:
            shutil.rmtree(out, ignore_errors=True)
            return  # unsquashfs is missing: the blob's turn says so
        self.ahead[(source, ahead.offset)] = (out, running)

    def _stop_ahead(self, source: Path) -> None:
        """An extraction started ahead whose blob was never reached (inside another, or a limit first)."""
        for key in [k for k in self.ahead if k[0] == source]:
            out, running = self.ahead.pop(key)
            running.stop()
            shutil.rmtree(out, ignore_errors=True)

    def _gaps(self, source: Path, name: str, claimed: list[tuple[int, int]]) -> None:
        """The image's bytes no format claimed (a bootloader before the kernel, a raw blob), as files
        ``<image>@<offset>:data`` for the inventory; erased flash (all 0xff or 0x00) is left out."""
        size = source.stat().st_size
        start = 0
        for begin, end in [*claimed, (size, size)]:
            if begin - start >= GAP_MIN:
                piece = extractors.segment(source, start, begin - start, self._dir() / "data", self.budget)
                if not _erased(piece):
                    self.result.entries.append(
                        Entry(f"{name}@{start:#x}:data", "file", begin - start, name, local=piece)
                    )
                    self.budget.charge(entries=1)
                elif piece != source:
                    piece.unlink()
            start = max(start, end)

    def _one(
        self, source: Path, name: str, found: formats.Found, finds: list[formats.Found], depth: int
    ) -> int | None:
        """Extract one blob; the bytes it spans, or None when a weak magic was not a format after all."""
        path = f"{name}@{found.offset:#x}:{found.fmt}"
        out, running = self.ahead.pop((source, found.offset), None) or (self._dir(), None)
        length = found.length if found.length is not None else _to_next(found, finds, source)
        try:
            span = self._extract(source, found, length, out, path, depth, running)
        except ExtractError as error:
            shutil.rmtree(out, ignore_errors=True)
            if found.offset != 0 and found.fmt not in STRONG:
                return None
            self.result.blobs.append(
                Blob(path, found.fmt, found.offset, length, found.detail, "unreadable", error.reason)
            )
            # what it claims is skipped: the rest of a failed UBI is more UBI, not new formats
            return length if length is not None else source.stat().st_size - found.offset
        self.result.blobs.append(
            Blob(path, found.fmt, found.offset, span, found.detail, "unpacked", arch=found.arch)
        )
        return span

    def _extract(
        self,
        source: Path,
        found: formats.Found,
        length: int | None,
        out: Path,
        path: str,
        depth: int,
        running: extractors.Running | None = None,
    ) -> int:
        fmt, budget = found.fmt, self.budget
        if running is not None:  # a squashfs started ahead
            running.finish()
            self._tree(out / "root", path, depth)
            return length if length is not None else source.stat().st_size - found.offset
        if fmt in formats.STREAMS:
            target = out / "data"
            span = extractors.decompress(source, found.offset, fmt, target, budget)
            self._file(target, path, path, depth, carve=True)
            return span
        if fmt == "squashfs":
            extractors.squashfs(source, found.offset, out / "root", budget)
        elif fmt in ("cpio", "tar", "zip"):
            consumed = extractors.archive(source, found.offset, length, out, budget)
            self._tree(out / "root", path, depth)
            return consumed
        else:
            piece = extractors.segment(source, found.offset, length, out / "blob", budget)
            if fmt in ("uimage", "fit"):
                parts = (extractors.uimage if fmt == "uimage" else extractors.fit)(piece, out, budget)
                for index, part in enumerate(parts):
                    self._file(part, f"{path}!part{index}", path, depth, carve=True)
                return found.length or 0
            FILESYSTEMS[fmt](piece, out / "root", budget)
            if piece != source:
                piece.unlink()
        self._tree(out / "root", path, depth)
        return length if length is not None else source.stat().st_size - found.offset

    def _file(self, local: Path, path: str, container: str, depth: int, carve: bool) -> None:
        """A decompressed or extracted payload: an entry, and unpacked in turn when a format is in it."""
        size = local.stat().st_size
        self.result.entries.append(Entry(path, "file", size, container, local=local))
        self.budget.charge(entries=1)
        self.blob(local, path, depth + 1, carve=carve)

    def _tree(self, root: Path, container: str, depth: int) -> None:
        """Record what an extractor wrote, links as links; files that start with a format unpacked too."""
        if not root.is_dir():
            return
        for folder, dirs, names in os.walk(root, followlinks=False):
            dirs.sort()
            for name in sorted(dirs) + sorted(names):
                local = Path(folder) / name
                inner = "/" + local.relative_to(root).as_posix()
                info = local.lstat()
                path = f"{container}!{inner}"
                if stat.S_ISLNK(info.st_mode):
                    self.result.entries.append(Entry(path, "link", 0, container, target=os.readlink(local)))
                elif stat.S_ISDIR(info.st_mode):
                    self.result.entries.append(Entry(path, "dir", 0, container))
                elif stat.S_ISREG(info.st_mode):
                    self.result.entries.append(Entry(path, "file", info.st_size, container, local=local))
                    if info.st_size and _starts_with_format(local):
                        self.blob(local, path, depth + 1, carve=False)
                else:
                    self.result.entries.append(Entry(path, "other", 0, container))


def _erased(local: Path) -> bool:
    with local.open("rb") as handle:
        while block := handle.read(1 << 20):
            if block.strip(b"\xff") and block.strip(b"\0"):
                return False
    return True


def _finds(source: Path, carve: bool) -> list[formats.Found]:
    with source.open("rb") as handle:
        if not carve:
            found = formats.sniff(handle.read(64 * 1024))
            return [found] if found is not None else []
        if source.stat().st_size == 0:
            return []
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            if view[:4] == b"\x7fELF":
                return []  # a kernel ELF or a program: inventoried, not carved
            return _merge_blocks(formats.carve(view))


def _merge_blocks(finds: list[formats.Found]) -> list[formats.Found]:
    """A UBI, UBIFS or JFFS2 image is found once per erase block or node: keep its first block."""
    kept: list[formats.Found] = []
    for found in finds:
        if kept and found.fmt in BLOCKED and kept[-1].fmt == found.fmt:
            continue
        kept.append(found)
    return kept


def _starts_with_format(local: Path) -> bool:
    with local.open("rb") as handle:
        head = handle.read(64 * 1024)
    return not head.startswith(b"\x7fELF") and formats.sniff(head) is not None


def _to_next(found: formats.Found, finds: list[formats.Found], source: Path) -> int | None:
    """A blob of unstated length runs to the next strong format after it, or to the end."""
    for other in finds:
        if other.offset > found.offset and other.fmt in STRONG and other.fmt != found.fmt:
            return other.offset - found.offset
    return None

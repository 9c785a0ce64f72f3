"""What the unpack stage sends on: hash chunks (as :class:`dropscan.chunks.Chunker` cuts them) to the
lookup queue, nested archives to parts of their own, and how far a long walk has got to the scan item."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dropscan.chunks import Chunk, Chunker
from dropscan.keys import ROOT, child_part, part_key, work_key
from dropscan.models import FileRecord
from dropscan.store.services import Services

if TYPE_CHECKING:
    from dropscan.archive import Nested, Progress

#: seconds of a walk between two reports of its counts to the scan item (a client shows them)
PROGRESS_EVERY_S = 2.0
#: what those seconds are read from (a test steps its own)
CLOCK: Callable[[], float] = time.monotonic


def open_part(svc: Services, message: dict[str, Any]) -> None:
    """Open a part in the scan item, then send its message: the scan waits for every part it opened."""
    svc.scans.open_part(message["scan_id"], message["part"])
    svc.work.send_part(message)


@dataclass
class ChunkSender:
    """Sends the chunks a walk is cut into to the hash-chunk queue (inline or via S3)."""

    svc: Services
    scan_id: str
    chunker: Chunker
    part: str = ROOT  # chunk seqs count from 0 in each part; (part, seq) is unique in the scan
    chunks: int = 0

    @classmethod
    def of(cls, svc: Services, scan_id: str, part: str = ROOT) -> ChunkSender:
        """A sender with the stack's chunk size and keys per chunk."""
        return cls(svc, scan_id, Chunker(svc.settings.chunk_size, svc.settings.chunk_keys), part=part)

    @property
    def files(self) -> int:
        return self.chunker.files

    def add(self, rec: FileRecord) -> None:
        self._send(self.chunker.add(rec))

    def flush(self) -> None:
        """Send what is left (the last chunk: any number of keys)."""
        self._send(self.chunker.flush())

    def _send(self, cut: list[Chunk]) -> None:
        for chunk in cut:
            seq = self.chunks
            where: dict[str, Any] = {"scan_id": self.scan_id, "seq": seq}
            if self.part != ROOT:
                where["part"] = self.part
            overflow = work_key(self.scan_id, "chunks", seq, self.part)
            self.svc.work.send_chunk(where, {"keys": chunk.keys, "records": chunk.records}, overflow)
            self.chunks += 1


@dataclass
class PartSender:
    """Hands nested archives of a part to invocations of their own (the walker's ``FanOut``).

    The archive goes to ``work/<scan>/parts/<part>.bin`` (from the walker's spool: bounded memory, a
    multipart upload when large), and a part message to the unpack queue, after the part is opened in
    the scan item. With ``defer``, the messages wait for :meth:`release`: a nested part hands its own
    nested archives on only once it is known to unpack at all (all or nothing, never half a tree).
    """

    svc: Services
    scan_id: str
    part: str
    threshold: int
    defer: bool = False
    handed: int = 0
    _pending: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, svc: Services, scan_id: str, part: str, *, defer: bool) -> PartSender | None:
        """A sender with the stack's fan-out threshold; None where there is no queue to send parts to."""
        if not svc.work.fans_out:
            return None  # a stack without fan-out: everything in-process
        return cls(svc, scan_id, part, svc.settings.fan_out_mib << 20, defer=defer)

    def hand_over(self, spool: Any, nested: Nested) -> None:
        child = child_part(self.part, nested.member)
        key = part_key(self.scan_id, child)
        self.svc.work.put_file(key, spool)
        message = {
            "scan_id": self.scan_id,
            "part": child,
            "key": key,
            "record": nested.record.to_json(),
            "fmt": nested.fmt,
            "depth": nested.depth,
            "spent": [nested.spent.members, nested.spent.total],
        }
        self.handed += 1
        if self.defer:
            self._pending.append(message)
        else:
            open_part(self.svc, message)

    def release(self) -> None:
        for message in self._pending:
            open_part(self.svc, message)
        self._pending = []


@dataclass
class ProgressSender:
    """How far a part's walk has got (members and bytes since the part began, as its close counts
    them), in the scan item every ``every`` seconds at most: a client watching one long invocation sees
    counts move. One UpdateItem a report; none for a walk shorter than ``every``."""

    svc: Services
    scan_id: str
    part: str
    walked: Progress  # the walk's own, counted on by the walker as each member starts
    spent: Progress  # where the part began
    every: float = PROGRESS_EVERY_S
    clock: Callable[[], float] = time.monotonic
    sent: int = 0
    _next: float = 0.0

    @classmethod
    def of(cls, svc: Services, scan_id: str, part: str, walked: Progress, spent: Progress) -> ProgressSender:
        sender = cls(svc, scan_id, part, walked, spent, every=PROGRESS_EVERY_S, clock=CLOCK)
        sender._next = sender.clock() + sender.every
        return sender

    def tick(self) -> None:
        """After each record: report, if ``every`` seconds passed since the last report."""
        now = self.clock()
        if now < self._next:
            return
        self._next = now + self.every
        members, unpacked = self.walked.members - self.spent.members, self.walked.total - self.spent.total
        if self.svc.scans.report_unpacking(self.scan_id, self.part, members=members, unpacked=unpacked):
            self.sent += 1
        else:
            self._next = math.inf  # closed or finalised meanwhile: nobody reads it any more

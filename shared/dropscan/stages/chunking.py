"""What the unpack stage sends on: hash chunks to the lookup queue, nested archives to parts of their own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dropscan.keys import ROOT, child_part, part_key, work_key
from dropscan.models import FileRecord
from dropscan.store.services import Services

if TYPE_CHECKING:  # the lookup stage uses this module and must not load libarchive
    from dropscan.archive import Nested


def lookup_keys(rec: FileRecord) -> tuple[str, ...]:
    """The digests the upstream table is asked for on behalf of one file (none for an empty one)."""
    if not rec.size:
        return ()
    if rec.kw == rec.sha256 and rec.ws == rec.sha256:
        return (rec.sha256,)
    return tuple(dict.fromkeys((rec.sha256, rec.kw, rec.ws)))


def compact(rec: FileRecord) -> dict[str, Any]:
    """A record as a chunk carries it: most files need no normalisation, so ``kw``/``ws`` equal to
    ``sha256`` are left out to keep chunks small."""
    out = rec.to_json()
    for k in ("kw", "ws"):
        if out[k] == rec.sha256:
            del out[k]
    return out


def open_part(svc: Services, message: dict[str, Any]) -> None:
    """Open a part in the scan item, then send its message: the scan waits for every part it opened."""
    svc.scans.open_part(message["scan_id"], message["part"])
    svc.work.send_part(message)


def finalize_if_complete(svc: Services, scan_id: str, complete: bool) -> None:
    """Hand the scan to finalize when the update that just ran was the one that completed it."""
    if complete:
        svc.work.send_finalize(scan_id)


@dataclass
class ChunkSender:
    """Cuts the walk into chunks and sends each to the hash-chunk queue (inline or via S3).

    Each digest of the scan is asked for in exactly one chunk: the first whose files bring it. A chunk
    asks for at most ``keys`` digests and holds at most ``size`` files; all but the last ask for a
    multiple of ``unit`` (100, one BatchGetItem) digests, leftovers wait for the next chunk. So a scan
    costs ceil(unique digests / 100) calls, however its duplicates fall.
    """

    svc: Services
    scan_id: str
    size: int
    keys: int = 1000
    part: str = ROOT  # chunk seqs count from 0 in each part; (part, seq) is unique in the scan
    chunks: int = 0
    files: int = 0
    _pending: list[FileRecord] = field(default_factory=list)
    _keys: list[str] = field(default_factory=list)
    # 96-bit prefixes of the digests already asked for: a third of the memory of the hex strings
    _seen: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, svc: Services, scan_id: str, part: str = ROOT) -> ChunkSender:
        """A sender with the stack's chunk size and keys per chunk."""
        return cls(svc, scan_id, svc.settings.chunk_size, svc.settings.chunk_keys, part=part)

    @property
    def unit(self) -> int:
        return min(100, self.keys)

    def add(self, rec: FileRecord) -> None:
        self._pending.append(rec)
        self.files += 1
        for key in lookup_keys(rec):
            prefix = int(key[:24], 16)
            if prefix not in self._seen:
                self._seen.add(prefix)
                self._keys.append(key)
        while len(self._keys) >= self.keys:
            self._send(self.keys)
        if len(self._pending) >= self.size:
            self._send(len(self._keys) // self.unit * self.unit)

    def flush(self) -> None:
        """Send what is left (the last chunk: any number of keys)."""
        while self._pending or self._keys:
            self._send(min(len(self._keys), self.keys))

    def _send(self, n_keys: int) -> None:
        seq = self.chunks
        keys, self._keys = self._keys[:n_keys], self._keys[n_keys:]
        records = [compact(r) for r in self._pending]
        self._pending = []
        where: dict[str, Any] = {"scan_id": self.scan_id, "seq": seq}
        if self.part != ROOT:
            where["part"] = self.part
        overflow = work_key(self.scan_id, "chunks", seq, self.part)
        self.svc.work.send_chunk(where, {"keys": keys, "records": records}, overflow)
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

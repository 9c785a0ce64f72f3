"""``dropscan up``'s log of scans: while one runs, its counts every few seconds (when they moved); as it
ends, one line with what it found. Nothing while no scan is open.

The dispatcher delivers in the server's main thread, so a long invocation (the kernel's unpack) holds
that thread for minutes: the counts are read by a thread of their own, from the scans table, where a
walking part reports them (``stages.unpack_send.ProgressSender``).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO

from dropscan.scan_text import drop_name, scan_outcome, scan_progress
from dropscan.store.stack import Client

#: the open-scans index holds creation times; every open scan was created before this
_ALWAYS = "9999"


class ScanLog:
    """Lines about scans on ``out``; :meth:`look` once (tests), or :meth:`start` a thread that looks
    every ``every`` seconds."""

    def __init__(self, client: Client, *, every: float = 5.0, out: IO[str] | None = None) -> None:
        self.client, self.every, self.out = client, every, out or sys.stdout
        self._said: dict[str, str] = {}  # scan id -> its last line of counts
        self._lock = threading.Lock()  # lines of two threads never interleave
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def line(self, text: str) -> None:
        """``  12:00:01 text``: one line of the log, whole."""
        with self._lock:
            print(f"  {time.strftime('%H:%M:%S')} {text}", file=self.out, flush=True)

    def look(self) -> int:
        """A line for each open scan whose counts moved since its last line; returns how many."""
        said = 0
        for scan_id in list(self.client.scans.open_before(_ALWAYS)):
            scan = self.client.scans.get(scan_id)
            if scan is None or scan.pending is None:
                continue  # finished meanwhile: its own line comes with its notification
            text = scan_progress(scan)
            with self._lock:
                moved = self._said.get(scan_id) != text
                self._said[scan_id] = text
            if moved:
                self.line(f"{drop_name(scan.key)}  {text}")
                said += 1
        return said

    def finished(self, supplier: str, scan_id: str, *, note: str = "") -> None:
        """The line of a scan whose manifest is written (its notification arrived)."""
        with self._lock:
            self._said.pop(scan_id, None)
        try:
            manifest = self.client.manifest(supplier, scan_id)
        except Exception as e:  # the server goes on: the line says why it has no counts
            self.line(f"{supplier}/{scan_id}  finished; its manifest could not be read ({e})")
            return
        drop = drop_name(str((manifest.get("source") or {}).get("key") or scan_id))
        self.line(f"{drop}  {scan_outcome(manifest)}" + (f"; {note}" if note else ""))

    # ---------------------------------------------------------------- the thread
    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="scan-log", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.every + 5)

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.look()
            except Exception:  # a table busy or the server stopping: the next look tries again
                continue

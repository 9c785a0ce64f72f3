"""Archives: walk every member of a (nested) upload, hashed, in bounded time, memory and disk.

``limits`` (what an upload may cost), ``binding`` (the one binding to libarchive), ``magic``
(sniffing), ``walker`` (the walk); beside them the decompressors (``inflate``, ``xz``), the digests
(``digest``), member names (``paths``), the triage re-read (``extract``) and the ways a big upload
is cut for several invocations (``zipsplit``, ``halves``).
"""

from dropscan.archive.binding import tar_member_at
from dropscan.archive.limits import (
    ArchiveReadError,
    FanOut,
    LimitExceeded,
    Limits,
    Nested,
    Progress,
    Readable,
    Split,
    check_spent,
)
from dropscan.archive.magic import MAGIC_SPAN, compressor_of
from dropscan.archive.walker import walk, walk_nested

__all__ = [
    "MAGIC_SPAN",
    "ArchiveReadError",
    "FanOut",
    "LimitExceeded",
    "Limits",
    "Nested",
    "Progress",
    "Readable",
    "Split",
    "check_spent",
    "compressor_of",
    "tar_member_at",
    "walk",
    "walk_nested",
]

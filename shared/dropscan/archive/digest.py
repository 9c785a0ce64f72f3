"""Content digests: raw SHA-256 and the VCS-keyword and whitespace normalised forms."""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, NamedTuple

from dropscan.models import Kind

if TYPE_CHECKING:
    from hashlib import _Hash

#: a file is text when none of its first TEXT_SNIFF bytes is NUL
TEXT_SNIFF = 8192
#: text members up to this size are normalised in memory; bigger ones are streamed
BUFFER_LIMIT = 32 * 1024 * 1024

KEYWORD_NAMES: tuple[bytes, ...] = (
    b"Id",
    b"Header",
    b"Revision",
    b"Rev",
    b"Date",
    b"LastChangedDate",
    b"LastChangedRevision",
    b"LastChangedBy",
    b"Author",
    b"Source",
    b"RCSfile",
    b"Log",
    b"Name",
    b"State",
    b"Locker",
    b"HeadURL",
    b"URL",
    b"Change",
    b"DateTime",
    b"File",
    b"FileName",
)
_NAMES = b"|".join(KEYWORD_NAMES)
#: CVS/RCS, Subversion and Perforce keywords, expanded or bare; replaced by ``$Name$``
KEYWORD_RE = re.compile(rb"\$(" + _NAMES + rb")(?::[^$\n]*)?\$")
# streaming only: a "$Name:" whose closing "$" has not been seen yet
_OPEN_KEYWORD_RE = re.compile(rb"\$(" + _NAMES + rb"):")
# streaming only: every proper prefix of "$Name:", i.e. a "$" that may still start a keyword
_KEYWORD_PREFIXES = frozenset(
    (b"$" + name + b":")[:n] for name in KEYWORD_NAMES for n in range(1, len(name) + 2)
)
_KEYWORD_END = re.compile(rb"[$\n]")

# beyond this many lines with trailing blanks, stripping goes line by line
_FEW_HITS = 64

_MACH_O_MAGICS = (b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe")


class Digest(NamedTuple):
    size: int
    sha256: str
    kw: str
    ws: str
    kind: Kind


def is_text(head: bytes) -> bool:
    """True when the first 8,192 bytes of a file hold no NUL byte."""
    return b"\0" not in head[:TEXT_SNIFF]


def sniff_kind(head: bytes, name: str) -> Kind:
    """The kind of a file from its first bytes (and its name, to tell Java classes from fat Mach-O)."""
    if head.startswith(b"\x7fELF"):
        return Kind.ELF
    if head.startswith(b"!<arch>\n"):
        return Kind.STATIC_LIBRARY
    if head.startswith(b"MZ"):
        return Kind.PE
    if head.startswith(_MACH_O_MAGICS):
        return Kind.MACH_O
    if head.startswith(b"\xca\xfe\xba\xbe"):
        # the same magic opens Java classes and universal (fat) Mach-O binaries
        return Kind.JAVA_CLASS if name.lower().endswith(".class") else Kind.MACH_O
    return Kind.TEXT if is_text(head) else Kind.BINARY


def kw_normalise(data: bytes) -> bytes:
    """Collapse every VCS keyword to its bare form (``$Id: x,v 1.2 $`` -> ``$Id$``); binary data is kept."""
    if not is_text(data) or b"$" not in data:
        return data
    return _bare_keywords(data)


def _bare_keywords(data: bytes) -> bytes:
    # Same as KEYWORD_RE.sub(rb"$\1$", data), but Python 3.11 expands a template in Python for every
    # match; split keeps the one captured name between the texts, and "$".join brackets each name.
    return b"$".join(KEYWORD_RE.split(data))


def ws_normalise(data: bytes) -> bytes:
    """Keyword-normalise, turn CRLF and lone CR into LF, drop trailing blanks of every line."""
    if not is_text(data):
        return data
    return _strip_trailing_blanks(_to_lf(kw_normalise(data)))


def digest_bytes(data: bytes, name: str = "") -> Digest:
    """One-shot :class:`Digester` (the same digests, without its bookkeeping)."""
    sha = hashlib.sha256(data).hexdigest()
    head = data[:TEXT_SNIFF]
    kind = sniff_kind(head, name)
    if b"\0" in head:
        return Digest(len(data), sha, sha, sha, kind)
    kw, ws = _text_digests(data, sha)
    return Digest(len(data), sha, kw, ws, kind)


def _to_lf(data: bytes) -> bytes:
    if b"\r" not in data:
        return data
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _strip_trailing_blanks(data: bytes) -> bytes:
    """Remove spaces and tabs before every LF and at the end of LF-only ``data``.

    bytes.find is several times faster than a regex over a buffer full of spaces, and the loop
    only turns for lines that do end in blanks; if there are many, split/rstrip/join takes over.
    """
    pieces: list[bytes] = []
    pos = 0
    space = data.find(b" \n")
    tab = data.find(b"\t\n")
    while space >= 0 or tab >= 0:
        if len(pieces) == _FEW_HITS:  # blanks on many lines: per line is cheaper than per hit
            pieces.append(b"\n".join([line.rstrip(b" \t") for line in data[pos:].split(b"\n")]))
            return b"".join(pieces)
        # each LF is preceded by at most one of the two, so the finders never meet
        if tab < 0 or 0 <= space < tab:
            end, space = space, data.find(b" \n", space + 2)
        else:
            end, tab = tab, data.find(b"\t\n", tab + 2)
        # rstrip stops at the previous LF, so this drops exactly this line's trailing run
        pieces.append(data[pos : end + 1].rstrip(b" \t"))
        pos = end + 1
    if not pieces:
        return data.rstrip(b" \t")
    pieces.append(data[pos:].rstrip(b" \t"))
    return b"".join(pieces)


def _needs_ws(data: bytes) -> bool:
    # rfind of a two-byte needle runs about twice as fast as find (or "in") on source text
    return (
        b"\r" in data or data.endswith((b" ", b"\t")) or data.rfind(b"\t\n") >= 0 or data.rfind(b" \n") >= 0
    )


def _text_digests(data: bytes, sha: str) -> tuple[str, str]:
    """(kw, ws) of a whole text, hashing again only what normalisation actually changes."""
    kw = sha
    if b"$" in data:
        normal = _bare_keywords(data)
        # a substitution never lengthens, and only a bare keyword keeps the length
        if len(normal) != len(data):
            kw = hashlib.sha256(normal).hexdigest()
            data = normal
    if not _needs_ws(data):
        return kw, kw
    return kw, hashlib.sha256(_strip_trailing_blanks(_to_lf(data))).hexdigest()


class _WsSink:
    """Hashes the whitespace-normalised form of kw-normalised text arriving in pieces.

    Two facts cross a piece boundary: a CR at the very end (half of a CRLF?), and a run of blanks
    at the end (trailing or not?). The CR is held back. The blank run is hashed as if it stays,
    with a copy of the hash from before it to fall back on if a LF or the end follows: memory
    stays constant however long the run is.
    """

    __slots__ = ("_cr", "_sha", "_undo")

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._cr = False
        self._undo: _Hash | None = None

    def copy(self) -> _WsSink:
        twin = _WsSink.__new__(_WsSink)
        twin._sha = self._sha.copy()
        twin._cr = self._cr
        twin._undo = None if self._undo is None else self._undo.copy()
        return twin

    def feed(self, data: bytes) -> None:
        if self._cr:
            data = b"\r" + data
            self._cr = False
        if data.endswith(b"\r"):
            data = data[:-1]
            self._cr = True
        data = _to_lf(data)
        if not data:
            return
        if self._undo is not None:
            rest = data.lstrip(b" \t")
            if not rest:
                self._sha.update(data)
                return
            if rest[0] == 0x0A:  # the pending run was trailing after all
                self._sha = self._undo
            else:
                self._sha.update(data[: len(data) - len(rest)])
            self._undo = None
            data = rest
        body = data.rstrip(b" \t")
        self._sha.update(_strip_trailing_blanks(body))
        if len(body) < len(data):
            self._undo = self._sha.copy()
            self._sha.update(data[len(body) :])

    def hexdigest(self) -> str:
        if self._cr:  # a lone CR at the very end is a line break
            self._cr = False
            self.feed(b"\n")
        if self._undo is not None:  # blanks at the end of the text are trailing
            self._sha = self._undo
            self._undo = None
        return self._sha.hexdigest()


class _KwSink:
    """Receives the kw-normalised text: hashes it and passes it on to the whitespace stage."""

    __slots__ = ("_sha", "_ws")

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._ws = _WsSink()

    def copy(self) -> _KwSink:
        twin = _KwSink.__new__(_KwSink)
        twin._sha = self._sha.copy()
        twin._ws = self._ws.copy()
        return twin

    def feed(self, data: bytes) -> None:
        self._sha.update(data)
        self._ws.feed(data)

    def hexdigests(self) -> tuple[str, str]:
        return self._sha.hexdigest(), self._ws.hexdigest()


class _StreamingNormaliser:
    """kw and ws digests of a text of any size in constant memory.

    A keyword match starts at a "$" and can reach no further than the next "$" or LF, so only the
    last "$" of a piece can be undecided. If it is a mere prefix of "$Name:" (at most 21 bytes) it is
    carried over. If it opens a keyword ("$Name:" and no "$" or LF yet) the bytes are passed on as
    if no keyword closes, and a copy of the downstream state from before the "$" is kept: if the
    closing "$" comes, that copy receives "$Name$" and replaces the live state.
    """

    __slots__ = ("_carry", "_name", "_out", "_undo")

    def __init__(self) -> None:
        self._out = _KwSink()
        self._carry = b""
        self._undo: _KwSink | None = None
        self._name = b""

    def feed(self, data: bytes) -> None:
        if self._undo is not None:
            end = _KEYWORD_END.search(data)
            if end is None:
                self._out.feed(data)
                return
            stop = end.start()
            if data[stop] == 0x24:  # "$": the open keyword closes
                self._out = self._undo
                self._out.feed(b"$" + self._name + b"$")
                data = data[stop + 1 :]
            else:  # LF: no keyword; the live state already has the right bytes
                self._out.feed(data[:stop])
                data = data[stop:]
            self._undo = None
        if self._carry:
            data = self._carry + data
            self._carry = b""
        self._process(data)

    def _process(self, data: bytes) -> None:
        line = data.rfind(b"\n") + 1
        if line:
            # no keyword spans a LF: everything up to the last one is decided
            self._out.feed(_bare_keywords(data[:line]))
            data = data[line:]
        last = data.rfind(b"$")
        if last < 0:
            self._out.feed(data)
            return
        # the last line piece is short (unless the text has very long lines): scan it in Python
        pieces: list[bytes] = []
        pos = 0
        for match in KEYWORD_RE.finditer(data):
            pieces += (data[pos : match.start()], b"$" + match[1] + b"$")
            pos = match.end()
        if pos > last:  # the last "$" closed a keyword
            pieces.append(data[pos:])
            self._out.feed(b"".join(pieces))
            return
        pieces.append(data[pos:last])
        self._out.feed(b"".join(pieces))
        tail = data[last:]
        opened = _OPEN_KEYWORD_RE.match(tail)
        if opened:
            self._undo = self._out.copy()
            self._name = opened[1]
            self._out.feed(tail)
        elif tail in _KEYWORD_PREFIXES:
            self._carry = tail
        else:
            self._out.feed(tail)

    def hexdigests(self) -> tuple[str, str]:
        if self._carry:  # never completed, so never a keyword
            self._out.feed(self._carry)
            self._carry = b""
        self._undo = None  # an open keyword that never closed stays as it is
        return self._out.hexdigests()


class Digester:
    """Size, SHA-256, kw and ws digests and kind of a file fed in blocks of any size.

    Text is buffered up to ``buffer_limit`` bytes and normalised with whole-buffer operations,
    only when it holds something to normalise; beyond the limit it is normalised as it streams.
    """

    __slots__ = ("_kind", "_limit", "_name", "_pending", "_pending_size", "_sha", "_size", "_stream", "_text")

    def __init__(self, name: str = "", *, buffer_limit: int = BUFFER_LIMIT) -> None:
        self._name = name
        self._limit = buffer_limit
        self._sha = hashlib.sha256()
        self._size = 0
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._text: bool | None = None  # undecided until TEXT_SNIFF bytes are in
        self._kind = Kind.TEXT
        self._stream: _StreamingNormaliser | None = None

    def update(self, block: bytes) -> None:
        if not block:
            return
        self._size += len(block)
        self._sha.update(block)
        if self._text is False:
            return
        if self._stream is not None:
            self._stream.feed(block)
            return
        self._pending.append(block)
        self._pending_size += len(block)
        if self._text is None and self._pending_size >= TEXT_SNIFF:
            self._decide()
        if self._text and self._pending_size > self._limit:
            self._stream = _StreamingNormaliser()
            for pending in self._pending:
                self._stream.feed(pending)
            self._pending = []

    def _decide(self) -> None:
        head = b"".join(self._pending)[:TEXT_SNIFF]
        self._kind = sniff_kind(head, self._name)
        self._text = is_text(head)
        if not self._text:
            self._pending = []

    def finish(self) -> Digest:
        if self._text is None:
            self._decide()
        sha = self._sha.hexdigest()
        if not self._text:
            kw = ws = sha
        elif self._stream is not None:
            kw, ws = self._stream.hexdigests()
        else:
            kw, ws = _text_digests(b"".join(self._pending), sha)
        self._pending = []
        return Digest(self._size, sha, kw, ws, self._kind)

"""String literals of C sources, as the firmware matching compares them with a binary's strings (pure).

Used twice: for the drop's components at scan time (``firmware.sources``), and for an upstream
release at ingest (``stages.ingest``), which records a bounded choice of them (``release_literals``)
so that a binary whose source the drop lacks can still be named (``store.upstream_literals``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# a literal is distinctive enough to count when it has this many characters (shorter parts of a
# format string, "%s: %s", say nothing of where they come from)
LITERAL_MIN = 8
# every quoted literal, short ones too (so that a scan never resumes at a short literal's closing quote,
# as in BusyBox's option tables ``"unset\0" Required_argument "u"``), only the long ones' bodies kept;
# bodies are matched possessively (a run ends only at its quote, a newline or a lone backslash), and
# every alternative starts with the quote, which keeps the search as fast as one pattern's
C_LITERAL = re.compile(
    r'"(?:(?=(?:[^"\\\n]|\\.){' + str(LITERAL_MIN) + r'})((?:[^"\\\n]++|\\.)*+)|(?:[^"\\\n]++|\\.)*+)"'
)
# the character constants that hold a quote, blanked before the search (the only ones that could start
# a literal where none is)
QUOTE_CHARS = ("'\"'", "'\\\"'")
# an escape a binary holds as one byte: the printable ones are resolved; any other (``\0``, ``\033``,
# ``\x1b``, ``\r``) cuts the literal there, as it cuts the binary's printable strings
ESCAPE = re.compile(r"\\(?:[0-7]{1,3}|x[0-9a-fA-F]+|.)", re.S)
ESCAPES = {"\\n": "\n", "\\t": "\t", '\\"': '"', "\\\\": "\\", "\\'": "'", "\\?": "?"}
PARTS = re.compile(r"[\n\t]|%[-#0-9.]*[a-z]")
# C comments; BusyBox keeps its usage texts in //usage: comments, which its build compresses
# (unrolled and possessive: the first ``*/`` ends a block as ``/\*.*?\*/`` would, found without trying
# every character)
COMMENT = re.compile(r"/(?:\*[^*]*+\*++(?:[^/*][^*]*+\*++)*+/|/[^\n]*+)")
SOURCE_SUFFIXES = (".c", ".h", ".cc", ".cpp")
# how many literals an ingest records per release: the longest, which are the most distinctive
# (docs/firmware.md: BusyBox 1.35.0 has 7,561 outside comments; its busybox holds 365 of the 2,000
# longest, glibc 1)
RELEASE_LITERALS = 2000
RELEASE_LITERAL_MAX = 200  # longer ones are tables and texts, not messages a binary prints whole


def c_literals(text: str) -> set[str]:
    """The string literals of a C source of at least ``LITERAL_MIN`` characters, escapes resolved and
    split at format directives."""
    found: set[str] = set()
    if "'" in text:
        for quote in QUOTE_CHARS:
            text = text.replace(quote, " " * len(quote))
    for literal in C_LITERAL.findall(text):
        if not literal:  # a literal too short to count, consumed
            continue
        if "\\" in literal:
            literal = ESCAPE.sub(_escape, literal)
        found.update(parts(literal))
    return found


def _escape(match: re.Match[str]) -> str:
    return ESCAPES.get(match.group(), "\n")


def parts(text: str) -> list[str]:
    """A string cut where a format directive, newline or tab is, the parts of ``LITERAL_MIN`` or more."""
    return [part for part in PARTS.split(text) if len(part) >= LITERAL_MIN]


def code_literals(text: str) -> set[str]:
    """``c_literals`` of the code alone, comments left out (what can be compiled into a binary)."""
    if '"' not in text:  # most headers: no literal to find, and no comment to strip for one
        return set()
    return c_literals(COMMENT.sub(" ", text))


def is_source(path: str) -> bool:
    return path.endswith(SOURCE_SUFFIXES)


def release_literals(literals: Iterable[str], limit: int = RELEASE_LITERALS) -> list[str]:
    """The ``limit`` longest literals (then in text order), each at most ``RELEASE_LITERAL_MAX`` long:
    what an ingest records of a release."""
    chosen = sorted({lit for lit in literals if len(lit) <= RELEASE_LITERAL_MAX}, key=lambda s: (-len(s), s))
    return chosen[:limit]


def binary_parts(strings: Iterable[str]) -> set[str]:
    """A binary's printable strings cut as literals are (``parts``): the forms a recorded literal takes."""
    found: set[str] = set()
    for string in strings:
        if len(string) >= LITERAL_MIN:
            found.add(string)
            found.update(parts(string))
    return found

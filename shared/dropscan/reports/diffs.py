"""A modified file's diff against its upstream base, as the HTML report shows it: syntax-highlighted
(Pygments), each changed line marked with the origin of the 0-context hunk that holds it.

The manifest carries, per file, the unified diff with 3 lines of context (``evidence.patch``) and the
0-context hunks with their origin (``evidence.hunks``: upstream, vendor or noise). A context hunk may
merge several 0-context ones, so each changed line is mapped by its line number: a removed line by its
old number into ``[old_start, old_start + old_lines)``, an added line by its new number into
``[new_start, new_start + new_lines)``. Everything here is one pass over the patch text: a kernel drop
has about 800 modified files.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.token import STANDARD_TYPES, _TokenType
from pygments.util import ClassNotFound

from dropscan.reports import view

#: the marks of changed lines by origin; the screenshot test looks for the vendor colour
ORIGIN_COLOURS: dict[str, str] = {"vendor": "#d81b60", "upstream": "#1565c0", "noise": "#9e9e9e"}

#: patch text highlighted per report; past it, diffs are shown plain (still marked): Pygments is nearly
#: all the cost of a diff, and a kernel drop's 800 diffs highlighted took 7 s (docs/design.md, "Reports")
HIGHLIGHT_BYTES = 1 << 20

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")

CSS = """
details.diff { margin: 4px 0; border: 1px solid var(--rule); border-radius: 4px; }
details.diff > summary { padding: 4px 8px; cursor: pointer; background: #f5f5f5; }
details.diff[open] > summary { border-bottom: 1px solid var(--rule); }
.origin { display: inline-block; padding: 0 6px; border-radius: 3px; color: #fff; font-size: 12px;
          font-weight: 700; }
.origin.vendor, .origin.mixed { background: #d81b60; }
.origin.upstream { background: #1565c0; }
.stat { font-family: "DejaVu Sans Mono", Menlo, monospace; font-size: 12.5px; }
.stat .a { color: #1b5e20; } .stat .r { color: #b71c1c; }
.code { font: 12.5px/1.4 "DejaVu Sans Mono", Menlo, Consolas, monospace; overflow-x: auto; margin: 0; }
.code > span, .code > a { display: block; white-space: pre; padding-left: 4px;
                          border-left: 5px solid transparent; }
.code i { display: inline-block; width: 5ch; color: #9e9e9e; text-align: right; margin-right: 1ch;
          font-style: normal;
           user-select: none; }
.code .hh { background: #eef3fb; color: #455a64; }
.code .add { background: #e9f7ec; }
.code .del { background: #fcebeb; }
.code .vendor { border-left-color: #d81b60; }
.code .upstream { border-left-color: #1565c0; }
.code .noise, .code .noise span { color: #9e9e9e !important; background: #f5f5f5; }
.code .mark { font: 700 12px system-ui, sans-serif; padding: 2px 8px; color: #fff; }
.code .mark.vendor { background: #d81b60; }
.code .mark.upstream { background: #1565c0; }
.code .mark.noise { background: #bdbdbd; color: #212121 !important; }
.code a.mark { text-decoration: none; }
.code .note { color: #616161; font-style: italic; }
"""


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a unified diff: ``sign`` is `` ``, ``+``, ``-``, ``@`` (a hunk header) or ``\\``
    (no newline at end of file); ``hunk`` indexes ``evidence.hunks`` for a changed line that one holds."""

    sign: str
    old: int | None
    new: int | None
    text: str
    hunk: int | None = None


def owners(hunks: Sequence[Mapping[str, Any]]) -> tuple[dict[int, int], dict[int, int]]:
    """The 0-context hunk (its index) holding each removed line (by old number) and added line (by new)."""
    removed: dict[int, int] = {}
    added: dict[int, int] = {}
    for i, h in enumerate(hunks):
        start, count = int(h.get("old_start") or 0), int(h.get("old_lines") or 0)
        removed.update(dict.fromkeys(range(start, start + count), i))
        start, count = int(h.get("new_start") or 0), int(h.get("new_lines") or 0)
        added.update(dict.fromkeys(range(start, start + count), i))
    return removed, added


def parse(patch: str, hunks: Sequence[Mapping[str, Any]] = ()) -> list[Line]:
    """The lines of ``patch`` after its ``---``/``+++`` header, numbered, changed lines mapped to
    ``hunks``. A patch cut short (``patch_truncated``) ends where it was cut."""
    removed, added = owners(hunks)
    out: list[Line] = []
    old = new = 0
    started = False
    for raw in patch.split("\n"):
        m = _HUNK.match(raw)
        if m:
            started = True
            old, new = int(m.group(1)), int(m.group(3))
            out.append(Line("@", None, None, raw))
            continue
        if not started or not raw:
            continue  # the header, and the empty string after the last newline
        sign, text = raw[0], raw[1:]
        if sign == "+":
            out.append(Line("+", None, new, text, added.get(new)))
            new += 1
        elif sign == "-":
            out.append(Line("-", old, None, text, removed.get(old)))
            old += 1
        elif sign == " ":
            out.append(Line(" ", old, new, text))
            old, new = old + 1, new + 1
        elif sign == "\\":
            out.append(Line("\\", None, None, raw))
    return out


@lru_cache(maxsize=256)
def _lexer(name: str) -> Lexer:
    """The lexer for a file name (``*.c``, ``Makefile``); plain text when Pygments knows none."""
    # one output line per input line, blank ones too
    try:
        return get_lexer_for_filename(name, stripnl=False, ensurenl=True)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=True)


def lexer_for(path: str) -> Lexer:
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return _lexer("x" + name[dot:] if dot > 0 else name)  # one lookup per suffix, not per path


_CLASSES: dict[_TokenType, str] = {}


def _css_class(ttype: _TokenType) -> str:
    found = _CLASSES.get(ttype)
    if found is None:
        t = ttype
        while t not in STANDARD_TYPES and t.parent is not None:
            t = t.parent
        found = _CLASSES[ttype] = STANDARD_TYPES.get(t, "")
    return found


def highlight(lexer: Lexer, texts: Sequence[str]) -> list[str]:
    """``texts`` (lines) as HTML, one string per line, lexed as one text so that comments and strings
    spanning lines are coloured right. Escaped plain text if the lexer does not keep the lines.

    A span only for a token the style colours, one for a run of tokens of the same colour: a kernel
    drop's 800 diffs are otherwise 24 MB of HTML, mostly spans around names and blanks."""
    styled = _styled()
    source = "\n".join(texts) + "\n"
    lines: list[str] = []
    parts: list[str] = []
    run_cls, run = "", list[str]()  # the current run of one class on the current line

    def close() -> None:
        if run:
            text = html.escape("".join(run), quote=False)
            parts.append(f'<span class="{run_cls}">{text}</span>' if run_cls else text)
            run.clear()

    for ttype, value in lexer.get_tokens(source):
        cls = _css_class(ttype)
        cls = cls if cls in styled else ""
        for i, piece in enumerate(value.split("\n")):
            if i:
                close()
                lines.append("".join(parts))
                parts = []
            if piece:
                if cls != run_cls:
                    close()
                    run_cls = cls
                run.append(piece)
    close()
    if parts:
        lines.append("".join(parts))
    if len(lines) != len(texts):
        return [html.escape(t, quote=False) for t in texts]
    return lines


def _visible(text: str) -> str:
    # Pygments reads a lone CR as a line break; shown as a symbol it also shows a line-ending change
    return text.replace("\r", "\u240d")


class Budget:
    """Bytes of patch text still to highlight in this report."""

    def __init__(self, limit: int = HIGHLIGHT_BYTES) -> None:
        self.left = limit

    def take(self, n: int) -> bool:
        if n > self.left:
            return False
        self.left -= n
        return True


def _coloured(path: str, lines: Sequence[Line], highlighted: bool) -> list[str]:
    """Each line's code as HTML. The patch's code lines are lexed as one text, in patch order: lexing the
    old side and the new side apart would colour a line that opens a comment on one side only right,
    but costs half as much again (context lines lexed twice), and Pygments is nearly all of the cost."""
    code = [_visible(ln.text) for ln in lines if ln.sign in " +-"]
    coloured = iter(
        highlight(lexer_for(path), code) if highlighted else [html.escape(t, quote=False) for t in code]
    )
    return [next(coloured) if ln.sign in " +-" else "" for ln in lines]


def commit_anchor(commit: str) -> str:
    return f"commit-{commit}"


def file_anchor(path: str) -> str:
    return "diff-" + hashlib.blake2s(path.encode("utf-8", "surrogateescape"), digest_size=6).hexdigest()


def hunk_label(h: Mapping[str, Any]) -> str:
    """``vendor change``, ``upstream 0123456789ab (1.38.0)``, ``noise (keywords, whitespace)``."""
    origin = h.get("origin")
    if origin == "upstream":
        label = f"upstream {view.short(h.get('commit'))}".rstrip()
        return label + (f" ({h['release']})" if h.get("release") else "")
    if origin == "noise":
        return "noise (keywords, whitespace)"
    if origin == "revert":  # the vendor's change, undoing upstream's: named with its commit
        undone = h.get("reverts") or {}
        label = f"reverts upstream {view.short(undone.get('commit'))}".rstrip()
        return label + (
            f" ({undone['release']}): {undone.get('subject') or ''}" if undone.get("release") else ""
        )
    return "vendor change"


def _mark(h: Mapping[str, Any]) -> str:
    origin = str(h.get("origin") or "vendor")
    origin = origin if origin in ORIGIN_COLOURS else "vendor"
    label = html.escape(hunk_label(h))
    if h.get("origin") == "revert":  # marked as the vendor's (it keeps the file in review), named
        return f'<span class="mark vendor revert">{label}</span>'
    if origin == "upstream" and h.get("commit"):
        title = html.escape(str(h.get("subject") or ""), quote=True)
        href = commit_anchor(str(h["commit"]))
        return f'<a class="mark upstream" href="#{href}" title="{title}">{label}</a>'
    return f'<span class="mark {origin}">{label}</span>'


def _number(n: int | None) -> str:
    return f"<i>{n}</i>" if n is not None else "<i></i>"


def body(path: str, ev: Mapping[str, Any], budget: Budget) -> str:
    """The diff of one file: a ``<div class="code">`` of marked lines (empty without a patch)."""
    patch = ev.get("patch")
    if not isinstance(patch, str) or not patch:
        return ""
    hunks: Sequence[Mapping[str, Any]] = ev.get("hunks") or []
    lines = parse(patch, hunks)
    coloured = _coloured(path, lines, budget.take(len(patch)))
    out = ['<div class="code">']
    shown: int | None = None  # the hunk whose mark was last written
    for ln, code in zip(lines, coloured, strict=True):
        if ln.sign == "@":
            out.append(f'<span class="hh">{html.escape(ln.text, quote=False)}</span>')
            shown = None
            continue
        if ln.sign == "\\":
            out.append(f'<span class="note">{html.escape(ln.text, quote=False)}</span>')
            continue
        kind = {"+": "add", "-": "del"}.get(ln.sign, "")
        origin = ""
        if ln.hunk is not None:
            h = hunks[ln.hunk]
            origin = str(h.get("origin") or "vendor")
            origin = origin if origin in ORIGIN_COLOURS else "vendor"
            if ln.hunk != shown:
                out.append(_mark(h))
                shown = ln.hunk
        cls = f"{kind} {origin}".strip()
        numbers = _number(ln.old) + _number(ln.new)
        opening = f'<span class="{cls}">' if cls else "<span>"
        out.append(f"{opening}{numbers}{html.escape(ln.sign)}{code}</span>")
    if ev.get("patch_truncated"):
        out.append('<span class="note">… the diff was cut at 64 KiB when the manifest was written</span>')
    out.append("</div>")
    return "".join(out)


def stat(ev: Mapping[str, Any]) -> str:
    added, removed = int(ev.get("lines_added") or 0), int(ev.get("lines_removed") or 0)
    return f'<span class="stat"><span class="a">+{added:,}</span> <span class="r">−{removed:,}</span></span>'


def origin_badge(ev: Mapping[str, Any]) -> str:
    origin = str(ev.get("origin") or "")
    label = {"upstream": "backport", "vendor": "vendor change", "mixed": "mixed"}.get(origin)
    return f'<span class="origin {origin}">{label}</span>' if label else ""


def details(f: Mapping[str, Any], ev: Mapping[str, Any], budget: Budget, *, expand: bool = False) -> str:
    """One file's ``<details>`` (collapsed unless ``expand``): path, origin, counts, base, the diff."""
    p = str(f["path"])
    head = [f'<span class="path">{html.escape(p).replace("/", "/<wbr>")}</span>', origin_badge(ev), stat(ev)]
    base = ev.get("base")
    if base:
        head.append(f'diffed against <span class="path">{html.escape(view.base_label(base))}</span>')
    if ev.get("error"):
        head.append(f'<span class="muted">no diff: {html.escape(str(ev["error"]))}</span>')
    opened = " open" if expand else ""
    return (
        f'<details class="diff" id="{file_anchor(p)}"{opened}>'
        f"<summary>{' '.join(h for h in head if h)}</summary>"
        f"{body(p, ev, budget)}</details>"
    )


def style_css() -> str:
    """The report's CSS for diffs and Pygments' token classes (its default style), scoped to ``.code``."""
    return CSS + _token_css()


@lru_cache(maxsize=1)
def _styled() -> frozenset[str]:
    """The token classes the style gives a colour or a weight."""
    return frozenset(rule.split()[1][1:] for rule in _token_css().splitlines())


@lru_cache(maxsize=1)
def _token_css() -> str:
    from pygments.formatters import HtmlFormatter

    formatter: Any = HtmlFormatter(style="default")
    rules = str(formatter.get_style_defs(".code")).splitlines()
    # only the token colours: its rules for pre, line numbers and the block background are not ours
    return "\n".join(r for r in rules if r.startswith(".code .") and not r.startswith(".code .hll"))

"""Unit tests for dropscan.archive.digest: the kw/ws definitions, kind sniffing, the incremental Digester."""

from __future__ import annotations

import hashlib
import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dropscan.archive import digest as digest_module
from dropscan.archive.digest import (
    TEXT_SNIFF,
    Digester,
    digest_bytes,
    is_text,
    kw_normalise,
    sniff_kind,
    ws_normalise,
)
from dropscan.models import Kind

# The definitions, written out independently of the module (the ground-truth generator uses these).
_REF_KW = re.compile(
    rb"\$(Id|Header|Revision|Rev|Date|LastChangedDate|LastChangedRevision|LastChangedBy|Author|Source"
    rb"|RCSfile|Log|Name|State|Locker|HeadURL|URL|Change|DateTime|File|FileName)(?::[^$\n]*)?\$"
)


def ref_kw(data: bytes) -> bytes:
    return _REF_KW.sub(rb"$\1$", data)


def ref_ws(data: bytes) -> bytes:
    data = ref_kw(data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return b"\n".join(line.rstrip(b" \t") for line in data.split(b"\n"))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def reference(data: bytes) -> tuple[int, str, str, str]:
    if b"\0" in data[:8192]:
        return len(data), sha(data), sha(data), sha(data)
    return len(data), sha(data), sha(ref_kw(data)), sha(ref_ws(data))


# Fed first, these make the Digester decide "text" at once, so what follows really streams when
# buffer_limit is small (the decision needs TEXT_SNIFF bytes). The second leaves a blank run open.
PAD = b"pad\n" * (TEXT_SNIFF // 4)
PAD_OPEN = b"pad " * (TEXT_SNIFF // 4)


def fed(data: bytes, cuts: list[int], buffer_limit: int, pad: bytes = b"") -> tuple[int, str, str, str]:
    """Digest ``pad + data``, the pad as one block and ``data`` split at ``cuts``."""
    digester = Digester("f", buffer_limit=buffer_limit)
    digester.update(pad)
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    for start, end in itertools.pairwise(bounds):
        digester.update(data[start:end])
    if pad and len(pad) + len(data) > buffer_limit:
        assert digester._stream is not None, "the streaming path was not taken"
    result = digester.finish()
    return result.size, result.sha256, result.kw, result.ws


# --- text or binary ---------------------------------------------------------------------------


def test_nul_in_the_first_8k_makes_binary() -> None:
    assert not is_text(b"a" * (TEXT_SNIFF - 1) + b"\0")


def test_nul_after_the_first_8k_is_still_text() -> None:
    assert is_text(b"a" * TEXT_SNIFF + b"\0")


def test_empty_file_is_text() -> None:
    result = digest_bytes(b"")
    assert (result.size, result.kind, result.sha256) == (0, Kind.TEXT, sha(b""))


# --- kinds ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "name", "kind"),
    [
        (b"\x7fELF\x02\x01\x01\0", "vmlinux", Kind.ELF),
        (b"!<arch>\nfoo.o/", "libc.a", Kind.STATIC_LIBRARY),
        (b"MZ\x90\0\x03\0", "x.exe", Kind.PE),
        (b"\xfe\xed\xfa\xce\0", "a", Kind.MACH_O),
        (b"\xfe\xed\xfa\xcf\0", "a", Kind.MACH_O),
        (b"\xce\xfa\xed\xfe\0", "a", Kind.MACH_O),
        (b"\xcf\xfa\xed\xfe\0", "a", Kind.MACH_O),
        (b"\xca\xfe\xba\xbe\0\0\0\x34", "org/x/Main.class", Kind.JAVA_CLASS),
        (b"\xca\xfe\xba\xbe\0\0\0\x02", "bin/universal", Kind.MACH_O),
        (b"int main(void) {}\n", "main.c", Kind.TEXT),
        (b"\x89PNG\r\n\x1a\n\0\0", "logo.png", Kind.BINARY),
    ],
)
def test_sniff_kind(head: bytes, name: str, kind: Kind) -> None:
    assert sniff_kind(head, name) is kind


def test_digester_reports_the_kind_of_the_first_bytes() -> None:
    assert digest_bytes(b"\x7fELF" + b"\0" * 100, "a.ko").kind is Kind.ELF


# --- kw ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expanded", "bare"),
    [
        (b"/* $Id: foo.c,v 1.2 2001/01/01 x Exp $ */", b"/* $Id$ */"),
        (b"# $Rev: 42 $", b"# $Rev$"),
        (b"# $Revision: 1.7 $", b"# $Revision$"),
        (b"$Change: 123 $", b"$Change$"),
        (b"$File: //depot/x#3 $", b"$File$"),
        (b"$FileName: x.c $", b"$FileName$"),
        (b"$DateTime: 2001/01/01 10:00:00 $", b"$DateTime$"),
        (b"$HeadURL: svn://h/r/trunk/x $", b"$HeadURL$"),
        (b"$Date: 2001-01-01 $ and $Author: bob $", b"$Date$ and $Author$"),
    ],
)
def test_expanded_keywords_collapse_to_bare(expanded: bytes, bare: bytes) -> None:
    assert kw_normalise(expanded) == bare


@pytest.mark.parametrize(
    "text",
    [
        b"$Id$ $Rev$ $Header$",  # already bare
        b"CC = $(CROSS)gcc\n$$ $1 $@",  # shell and make dollars
        b"$Identity: x $",  # not a keyword name
        b"$Id: starts here\nends here $",  # a keyword cannot span lines
        b"$id: lower case $",
    ],
)
def test_text_without_expanded_keywords_is_unchanged(text: bytes) -> None:
    assert kw_normalise(text) == text


def test_kw_digest_is_the_hash_of_the_normalised_text() -> None:
    text = b"/* $Id: foo.c,v 1.2 2001/01/01 x Exp $ */\n"
    result = digest_bytes(text)
    assert result.kw == sha(b"/* $Id$ */\n") != result.sha256


def test_bare_keywords_keep_kw_equal_to_sha256() -> None:
    result = digest_bytes(b"/* $Id$ */\n")
    assert result.kw == result.ws == result.sha256


# --- ws ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        (b"a\r\nb\r\n", b"a\nb\n"),  # CRLF
        (b"a\rb\r", b"a\nb\n"),  # lone CR (old Mac)
        (b"a\r\r\nb", b"a\n\nb"),  # CR then CRLF
        (b"a\t\t\nb \t \n", b"a\nb\n"),  # trailing tabs and spaces
        (b"a  ", b"a"),  # trailing blanks on a last line without LF
        (b"a \r\n", b"a\n"),  # blanks before a CRLF
        (b"  lead stays\n", b"  lead stays\n"),
        (b"$Rev: 9 $  \r\n", b"$Rev$\n"),  # kw first, then ws
    ],
)
def test_ws_normalise(raw: bytes, normal: bytes) -> None:
    assert ws_normalise(raw) == normal


def test_ws_digest_is_the_hash_of_the_ws_normalised_text() -> None:
    result = digest_bytes(b"x = 1;  \r\n")
    assert (result.kw, result.ws) == (result.sha256, sha(b"x = 1;\n"))


def test_binary_file_keeps_kw_and_ws_equal_to_sha256() -> None:
    data = b"\0\x01$Id: x $ \r\n trailing \t\n"
    result = digest_bytes(data)
    assert result.kind is Kind.BINARY
    assert result.kw == result.ws == result.sha256 == sha(data)


def test_normalisers_leave_binary_alone() -> None:
    data = b"\0$Id: x $\r\n"
    assert kw_normalise(data) == ws_normalise(data) == data


def test_clean_text_is_not_renormalised(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given text with no "$", no CR and no trailing blank, When digested, Then no normaliser runs.
    def boom(*_: object) -> bytes:
        raise AssertionError("normaliser ran on clean text")

    monkeypatch.setattr(digest_module, "KEYWORD_RE", None)
    monkeypatch.setattr(digest_module, "_strip_trailing_blanks", boom)
    result = digest_bytes(b"int x;\n\tint y;\n")
    assert result.kw == result.ws == result.sha256


# --- incremental and streaming ----------------------------------------------------------------

_SAMPLE = (
    b"/* $Id: foo.c,v 1.2 2001/01/01 x Exp $ */  \r\n"
    b"$Rev: 42 $\t\r$Revision$ $Change: 123 $ $File: //depot/x#3 $\n"
    b"CC = $(CROSS)gcc \t \n$Id: unclosed\n$$Id: a $$ $Date:$ \r"
    b"tail  \t"
)


@pytest.mark.parametrize(
    ("buffer_limit", "pad"), [(0, PAD), (0, PAD_OPEN), (1 << 30, PAD), (1 << 30, b"")], ids=str
)
def test_every_single_cut_gives_the_reference(buffer_limit: int, pad: bytes) -> None:
    expected = reference(pad + _SAMPLE)
    for cut in range(len(_SAMPLE) + 1):
        assert fed(_SAMPLE, [cut], buffer_limit, pad) == expected, cut


@pytest.mark.parametrize("pad", [PAD, PAD_OPEN], ids=["pad", "open-blank-pad"])
def test_byte_by_byte_streaming_gives_the_reference(pad: bytes) -> None:
    assert fed(_SAMPLE, list(range(len(_SAMPLE))), 0, pad) == reference(pad + _SAMPLE)


@pytest.mark.parametrize(
    "text",
    [
        b"x" * 50 + b"$Id: " + b"y" * 5000 + b" $ z\n",  # a keyword open over many blocks, closed
        b"x" * 50 + b"$Id: " + b"y" * 5000 + b"\n$ z\n",  # ... and one that a LF ends
        b"$Id: " + b"y" * 5000,  # ... and one the end of the file ends
        b"a" + b" \t" * 3000 + b"\n",  # a trailing blank run over many blocks
        b"a" + b" \t" * 3000 + b"b\n",  # a long blank run that is not trailing
        b"a" + b" " * 3000,  # blanks up to the end
        b"a" + b"\r" * 3000 + b"\n",  # CRs at every boundary
        b"a\r",  # a lone CR ends the file
        b"a \t\r",  # ... after blanks
        b"$Id: x $$Rev",  # a keyword prefix ends the file
    ],
)
def test_state_that_spans_many_blocks(text: bytes) -> None:
    for step in (1, 97):
        assert fed(text, list(range(0, len(text), step)), 0, PAD) == reference(PAD + text)


def test_text_over_the_buffer_limit_is_streamed_with_the_same_result() -> None:
    # Given a text bigger than the (lowered) buffer limit, fed in 64 KiB blocks
    text = _SAMPLE * 20000  # ~2.9 MB
    digester = Digester("big.c", buffer_limit=1 << 20)
    for start in range(0, len(text), 1 << 16):
        digester.update(text[start : start + (1 << 16)])
    # Then it stopped buffering and still matches the whole-buffer reference
    assert digester._stream is not None
    result = digester.finish()
    assert (result.size, result.sha256, result.kw, result.ws) == reference(text)


_TOKENS = st.sampled_from(
    [
        b"$",
        b"Id",
        b"Rev",
        b"ision",
        b"Date",
        b"Time",
        b"File",
        b"Name",
        b":",
        b" ",
        b"\t",
        b"\r",
        b"\n",
        b"x",
        b"$Id: a $",
        b"$Rev:",
        b" $",
        b"\x00",
        b"\r\n",
        b"ab",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(_TOKENS, max_size=60),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
    setup=st.sampled_from([(0, PAD), (0, PAD_OPEN), (1 << 30, b""), (0, b"")]),
)
def test_any_split_of_keyword_rich_text_gives_the_reference(
    tokens: list[bytes], cuts: list[int], setup: tuple[int, bytes]
) -> None:
    buffer_limit, pad = setup
    data = b"".join(tokens)
    assert fed(data, cuts, buffer_limit, pad) == reference(pad + data)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_any_split_of_random_bytes_gives_the_reference(data: bytes, cuts: list[int]) -> None:
    assert fed(data, cuts, 0) == reference(data)


def test_binary_after_a_text_looking_first_block_is_decided_on_8k() -> None:
    # Given a NUL at byte 8000, arriving in a later block than the first
    data = b"a" * 8000 + b"\0" + b"$Id: x $\r\n"
    assert fed(data, [100, 4000], 1 << 30) == reference(data)
    assert fed(data, [100], 1 << 30)[2] == sha(data)


# --- invariants of the normal forms ---------------------------------------------------------------

_TEXTISH = st.lists(_TOKENS, max_size=80).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(_TEXTISH, st.binary(max_size=200)))
def test_normal_forms_are_idempotent_and_ws_includes_kw(data: bytes) -> None:
    kw, ws = kw_normalise(data), ws_normalise(data)
    assert kw_normalise(kw) == kw
    assert ws_normalise(ws) == ws
    assert ws_normalise(kw) == ws
    assert len(ws) <= len(kw) <= len(data)


@settings(max_examples=300, deadline=None)
@given(data=_TEXTISH)
def test_ws_form_has_no_cr_and_no_trailing_blank(data: bytes) -> None:
    if not is_text(data):
        return
    ws = ws_normalise(data)
    assert b"\r" not in ws
    assert not any(line.endswith((b" ", b"\t")) for line in ws.split(b"\n"))


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(_TEXTISH, st.binary(max_size=200)))
def test_digests_are_the_hashes_of_the_normal_forms(data: bytes) -> None:
    result = digest_bytes(data)
    assert (result.sha256, result.kw, result.ws) == (
        sha(data),
        sha(kw_normalise(data)),
        sha(ws_normalise(data)),
    )


@settings(max_examples=200, deadline=None)
@given(
    data=st.one_of(_TEXTISH, st.binary(max_size=300)),
    cuts=st.lists(st.integers(min_value=0), max_size=10),
    limit=st.sampled_from([0, 7, 1 << 30]),
    pad=st.sampled_from([b"", PAD, PAD_OPEN]),
)
def test_streaming_digester_equals_digest_bytes_for_any_block_split(
    data: bytes, cuts: list[int], limit: int, pad: bytes
) -> None:
    whole = digest_bytes(pad + data, "f")
    assert fed(data, cuts, limit, pad) == (whole.size, whole.sha256, whole.kw, whole.ws)

"""Each file gets exactly one class, decided by the first digest form that a trusted upstream holds."""

from __future__ import annotations

import pytest

from dropscan.audit.classify import classify
from dropscan.models import DigestInfo, FileClass, FileRecord, Trust, VersionRange

RAW, KW, WS = "a" * 64, "b" * 64, "c" * 64


def rec(size: int = 10, sha: str = RAW, kw: str = KW, ws: str = WS) -> FileRecord:
    return FileRecord(path="top/f.c", size=size, sha256=sha, kw=kw, ws=ws, kind="text")


def info(*forms: str, pkg: str = "busybox") -> DigestInfo:
    return DigestInfo(frozenset(forms), {pkg: VersionRange("1.35.0", "1.36.1")})


def test_empty_file_is_empty_whatever_the_database_says() -> None:
    cls, refs = classify(rec(size=0), {RAW: info("raw")}, {})
    assert (cls, refs) == (FileClass.EMPTY, [])


@pytest.mark.parametrize(
    ("known", "expected"),
    [
        ({RAW: info("raw")}, FileClass.IDENTICAL),
        ({KW: info("kw")}, FileClass.VCS_KEYWORDS),
        ({WS: info("ws")}, FileClass.WHITESPACE),
        ({RAW: info("raw"), KW: info("kw")}, FileClass.IDENTICAL),
        ({KW: info("kw"), WS: info("ws")}, FileClass.VCS_KEYWORDS),
    ],
)
def test_first_matching_form_decides(known: dict[str, DigestInfo], expected: FileClass) -> None:
    cls, refs = classify(rec(), known, {})
    assert cls is expected
    assert refs == [{"package": "busybox", "versions": ["1.35.0", "1.36.1"]}]


def test_digest_known_only_in_another_form_does_not_match() -> None:
    # the drop's raw bytes equal an upstream file's keyword-collapsed form: not identical
    cls, _ = classify(rec(), {RAW: info("kw")}, {})
    assert cls is None


def test_match_only_in_low_trust_package_is_low_trust() -> None:
    cls, refs = classify(rec(), {RAW: info("raw", pkg="maven")}, {"maven": Trust.LOW})
    assert cls is FileClass.LOW_TRUST
    assert refs[0]["package"] == "maven"


def test_high_trust_whitespace_match_beats_low_trust_identical() -> None:
    known = {RAW: info("raw", pkg="maven"), WS: info("ws", pkg="busybox")}
    cls, refs = classify(rec(), known, {"maven": Trust.LOW, "busybox": Trust.HIGH})
    assert cls is FileClass.WHITESPACE
    assert [r["package"] for r in refs] == ["busybox"]


def test_unknown_digests_leave_the_decision_to_paths() -> None:
    assert classify(rec(), {}, {}) == (None, [])

"""Release names and version order as upstream archives spell them."""

from __future__ import annotations

import pytest

from dropscan.keys import parse_archive_name
from dropscan.models import version_key


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("busybox-1.35.0.tar.bz2", ("busybox", "1.35.0")),
        ("busybox_1.35.0.orig.tar.bz2", ("busybox", "1.35.0")),
        ("linux-6.1.176.tar.xz", ("linux", "6.1.176")),
        ("linux_6.1.176.orig.tar.xz", ("linux", "6.1.176")),
        ("u-boot-2023.01.tar.bz2", ("u-boot", "2023.01")),
        ("requests-2.31.0.tar.gz", ("requests", "2.31.0")),
        ("notes.txt", None),
    ],
)
def test_parse_archive_name(name: str, expected: tuple[str, str] | None) -> None:
    assert parse_archive_name(name) == expected


def test_versions_sort_naturally() -> None:
    versions = ["1.10.0", "1.9.2", "1.35.0", "1.4", "2023.01", "1.10.0a"]
    assert sorted(versions, key=version_key) == ["1.4", "1.9.2", "1.10.0", "1.10.0a", "1.35.0", "2023.01"]

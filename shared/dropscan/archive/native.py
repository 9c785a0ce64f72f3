"""Where dropscan's native libraries come from: the copy bundled with the deployment, else the system's.

Lambda's python3.11 runtime (Amazon Linux 2, glibc 2.26) has no libarchive, so the deployment ships one:
the ``archi`` wheel's, which auditwheel bundled beside its extension with the codecs it needs
(``archi.libs/libarchive-<hash>.so.13``, liblzma, libzstd, liblz4, libacl; docs/deployment.md says
why this one). Nothing here imports ``archi`` itself: only the libraries in its folder are used, through
dropscan's own ctypes binding (``archive.binding``) and the threaded xz decoder (``archive.xz``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
from pathlib import Path

__all__ = ["bundled_dir", "libarchive_path", "liblzma_path"]

#: the distribution whose wheel carries the libraries (auditwheel puts them in ``<name>.libs``)
BUNDLE = "archi"


@functools.cache
def bundled_dir() -> Path | None:
    """The folder of the bundled libraries, found without loading them (None where not installed)."""
    spec = importlib.util.find_spec(BUNDLE)
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / f"{BUNDLE}.libs"
    return folder if folder.is_dir() else None


def _bundled(stem: str) -> str | None:
    folder = bundled_dir()
    if folder is None:
        return None
    # auditwheel's names: <stem>-<8 hex digits>.so.<version>, a different hash per architecture
    found = sorted(folder.glob(f"{stem}-*.so*"))
    return str(found[0]) if found else None


@functools.cache
def libarchive_path() -> str | None:
    """libarchive to load: the bundled copy first, then the system's (None if neither exists)."""
    return _bundled("libarchive") or ctypes.util.find_library("archive")


def _lzma_version(path: str) -> int:
    try:
        return int(ctypes.CDLL(path).lzma_version_number())
    except (OSError, AttributeError):
        return 0


@functools.cache
def liblzma_path(minimum_version: int = 0) -> str | None:
    """liblzma to load: the bundled copy first, then the system's, the first at least ``minimum_version``
    (liblzma's encoding: 50040002 is 5.4.0 stable).

    The threaded decoder needs 5.4: the bundled 5.2.4 does not qualify for it, so a system's 5.4 or later
    is taken where there is one, and none on Lambda's Amazon Linux 2 (the stdlib then decodes).
    """
    for path in (_bundled("liblzma"), ctypes.util.find_library("lzma")):
        if path is not None and (minimum_version == 0 or _lzma_version(path) >= minimum_version):
            return path
    return None

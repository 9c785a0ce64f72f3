"""Every S3 key and id of dropscan: where a drop, its work files, its manifest and reports, an upstream
release and its path list live, and the ids of scans, parts and chunks.

Pure string rules (no I/O): the stages, the store, the sweeper and the command line all name objects
through this module, so that a layout change is made once.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import unquote_plus

DROP_PREFIX = "drops/"
UPSTREAM_PREFIX = "upstream/"
RESULTS_PREFIX = "results/"
RELEASE_PREFIX = "releases/"
FIRMWARE_PREFIX = "firmware/"  # images beside their drop: firmware/<supplier>/<drop name>/<image name>
CONTENT_PREFIX = "content/"  # upstream texts, revisions and hunks for review evidence (store.content)
ROOT = "0"  # the part that unpacks the upload itself

REPORT_FORMATS = ("html", "spdx", "cyclonedx")
_REPORT_NAMES = {"html": "report.html", "spdx": "sbom.spdx.json", "cyclonedx": "sbom.cdx.json"}
_SUPPLIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ARCHIVE_SUFFIX = re.compile(
    r"(\.orig)?\.(tar\.(gz|bz2|xz|zst|lz|lzma|Z)|tgz|tbz2?|txz|tar|zip|7z|cpio|whl)$", re.IGNORECASE
)
_NAME_VERSION = re.compile(r"^(?P<name>.+?)[-_](?P<version>\d[\w.+~-]*)$")


# ------------------------------------------------------------------ upstream git repositories
_GIT_BUNDLE = re.compile(r"^upstream/(?P<package>[^/]+)/git/(?P<name>[^/]+)\.bundle$")


def git_state_key(package: str) -> str:
    """What the ingests of a package's git repository did so far: its tags, history tips, blobs hashed."""
    return f"git/{package}/state.json.gz"


def git_report_key(package: str) -> str:
    return f"git/{package}/report.json"


def git_pack_prefix(package: str) -> str:
    """Where the packs of a package's bundles are kept: an incremental bundle's objects stand on them."""
    return f"git/{package}/packs/"


def parse_git_bundle_key(key: str) -> tuple[str, str] | None:
    """``upstream/<package>/git/<name>.bundle`` -> (package, name); None for any other key."""
    m = _GIT_BUNDLE.match(key)
    return (m["package"], m["name"]) if m else None


# ------------------------------------------------------------------ uploads and scans
def object_key(raw: str) -> str:
    """S3 event keys arrive URL-encoded (spaces as '+')."""
    return unquote_plus(raw)


def parse_drop_key(key: str) -> tuple[str, str] | None:
    """``drops/<supplier>/<name>`` -> (supplier, name); None when the key does not follow the layout."""
    if not key.startswith(DROP_PREFIX):
        return None
    parts = key[len(DROP_PREFIX) :].split("/", 1)
    if len(parts) != 2 or not parts[1] or not _SUPPLIER.match(parts[0]):
        return None
    return parts[0], parts[1]


def drop_key(supplier: str, name: str) -> str:
    return f"{DROP_PREFIX}{supplier}/{name}"


def firmware_key(supplier: str, drop_name: str, image_name: str) -> str:
    """Where the firmware image ``image_name`` of the drop ``drops/<supplier>/<drop_name>`` is uploaded."""
    return f"{firmware_prefix(supplier, drop_name)}{image_name}"


def firmware_prefix(supplier: str, drop_name: str) -> str:
    """The folder holding the firmware images of one drop (any number, in either order of upload)."""
    return f"{FIRMWARE_PREFIX}{supplier}/{drop_name}/"


def parse_firmware_key(key: str) -> tuple[str, str, str] | None:
    """``firmware/<supplier>/<drop name>/<image name>`` -> (supplier, drop name, image name); None for
    any other key. The drop's name may hold slashes (a drop key's may); the image's is the last segment."""
    if not key.startswith(FIRMWARE_PREFIX):
        return None
    supplier, _, rest = key[len(FIRMWARE_PREFIX) :].partition("/")
    drop_name, _, image_name = rest.rpartition("/")
    if not _SUPPLIER.match(supplier) or not drop_name or not image_name:
        return None
    return supplier, drop_name, image_name


def scan_id_for(bucket: str, key: str, etag: str | None) -> str:
    """Deterministic: a redelivered event or a repeated upload of the same bytes is the same scan."""
    return "s-" + hashlib.sha256(f"{bucket}\0{key}\0{etag}".encode()).hexdigest()[:24]


def manifest_key(supplier: str, scan_id: str) -> str:
    return f"{RESULTS_PREFIX}{supplier}/{scan_id}/manifest.json"


def manifest_revision_key(supplier: str, scan_id: str, revision: int) -> str:
    """Where an earlier revision of a scan's manifest is kept when a firmware image revises it (the
    notification's suffix rule, ``manifest.json``, does not match it)."""
    return f"{RESULTS_PREFIX}{supplier}/{scan_id}/revisions/manifest.{revision}.json"


def desk_index_keys(supplier: str, scan_id: str) -> tuple[str, str]:
    """The review desk's index of a scan beside its manifest (dropscan.web.index): the index, the files."""
    folder = f"{RESULTS_PREFIX}{supplier}/{scan_id}/"
    return folder + "desk.index.json", folder + "desk.files.jsonl"


def report_key(supplier: str, scan_id: str, fmt: str) -> str:
    """Reports live beside the manifest, under the supplier's prefix."""
    return f"{RESULTS_PREFIX}{supplier}/{scan_id}/{_REPORT_NAMES[fmt]}"


def report_keys(supplier: str, scan_id: str) -> dict[str, str]:
    return {fmt: report_key(supplier, scan_id, fmt) for fmt in REPORT_FORMATS}


# ------------------------------------------------------------------ work files of a scan
def work_key(scan_id: str, kind: str, seq: int, part: str = ROOT) -> str:
    """The S3 key of a chunk, a chunk's result, or the classified files (the root part's keys as before)."""
    where = f"{seq:06d}" if part == ROOT else f"{part}/{seq:06d}"
    return f"work/{scan_id}/{kind}/{where}.json.gz"


def part_key(scan_id: str, part: str) -> str:
    """Where a fanned-out nested archive waits for the invocation that unpacks it."""
    return f"work/{scan_id}/parts/{part}.bin"


# ------------------------------------------------------------------ parts and chunks
# A scan is unpacked by one or more *parts*: the upload itself (ROOT), each nested archive fanned out to an
# invocation of its own (``<parent>.<member>``), each resumed segment of a split tar or range of a split zip
# (``<part>+<k>``). Part ids are deterministic, so a redelivered part message is the same part.
def child_part(parent: str, member: int) -> str:
    """The part of the nested archive that is member number ``member`` (0-based) of ``parent``'s walk."""
    return f"{parent}.{member}"


def segment(part: str, k: int) -> str:
    """Segment number ``k`` (from 1) of ``part``: a resumed walk of it, or a range of a split zip."""
    return f"{part}+{k}"


def next_segment(part: str) -> str:
    """The part that resumes ``part`` where it stopped: ``0`` -> ``0+1`` -> ``0+2``."""
    base, plus, k = part.rpartition("+")
    return f"{base}+{int(k) + 1}" if plus and k.isdigit() else f"{part}+1"


def is_upload_part(part: str) -> bool:
    """The upload itself, or a resumed segment or range of it (not a nested archive)."""
    return part.partition("+")[0] == ROOT


def chunk_tag(part: str, seq: int) -> str:
    """A chunk's id in ``done_chunks``: its seq in the root part (as in the earlier layout), else part/seq."""
    return str(seq) if part == ROOT else f"{part}/{seq}"


def split_tag(tag: str) -> tuple[str, int]:
    """(part, seq) of a chunk id."""
    part, _, seq = tag.rpartition("/")
    return part or ROOT, int(seq)


def walk_order(tag: str) -> tuple[tuple[int, ...], int]:
    """Sort key of a chunk id: the order the members would have in one walk of the upload.

    Numeric, not textual (``0+10`` comes after ``0+2``), and ``+`` segments after the part they
    resume (``0`` < ``0+1``); nested parts (``0.3``) hold their own paths, so where they fall is moot.
    """
    part, seq = split_tag(tag)
    return tuple(int(n) for n in part.replace("+", ".").split(".")), seq


# ------------------------------------------------------------------ upstream releases
def parse_archive_name(filename: str) -> tuple[str, str] | None:
    """('busybox', '1.35.0') from busybox-1.35.0.tar.bz2 or busybox_1.35.0.orig.tar.bz2."""
    stem = _ARCHIVE_SUFFIX.sub("", filename.rsplit("/", 1)[-1])
    m = _NAME_VERSION.match(stem)
    return (m["name"], m["version"]) if m else None


def parse_upstream_key(key: str) -> tuple[str, str] | None:
    """``upstream/<package>/<version>/<file>``, or ``upstream/<file>`` named like ``foo-1.0.tar.gz``."""
    if not key.startswith(UPSTREAM_PREFIX):
        return None
    parts = key[len(UPSTREAM_PREFIX) :].split("/")
    if len(parts) >= 3 and parts[0] and parts[1]:
        return parts[0], parts[1]
    return parse_archive_name(parts[-1])


def upstream_key(package: str, version: str, filename: str) -> str:
    return f"{UPSTREAM_PREFIX}{package}/{version}/{filename}"


def release_key(package: str, version: str) -> str:
    """The release's path list (every path and its SHA-256), gzipped JSON."""
    return f"{RELEASE_PREFIX}{package}/{version}.json.gz"


def release_error_key(package: str, version: str) -> str:
    """Written instead of the path list when the release archive could not be read."""
    return f"{RELEASE_PREFIX}{package}/{version}.error.json"


def release_report_key(package: str, version: str) -> str:
    """What the last ingest of the release did: files, items written, DynamoDB calls, seconds."""
    return f"{RELEASE_PREFIX}{package}/{version}.ingest.json"


# ------------------------------------------------------------------ products and their history
def archive_stem(filename: str) -> str:
    """``acme-busybox-1.35.0-gpl`` of ``drops/acme/acme-busybox-1.35.0-gpl.tar.gz``."""
    return _ARCHIVE_SUFFIX.sub("", filename.rsplit("/", 1)[-1])


def product_key(supplier: str, product: str) -> str:
    """The scans table's key of a supplier's product (a supplier name holds no ``/``)."""
    return f"{supplier}/{product}"


def file_index_key(supplier: str, scan_id: str) -> str:
    """A scan's path -> content index beside its manifest: what the next drop's delta reads."""
    return f"{RESULTS_PREFIX}{supplier}/{scan_id}/files.json.gz"


def content_prefix(package: str) -> str:
    return f"{CONTENT_PREFIX}{package}/"


def pack_key(package: str, pack_id: str) -> str:
    """The prefix of a pack's segment keys (``<prefix>-00000.pack``, ...)."""
    return f"{content_prefix(package)}packs/{pack_id}"


def release_index_key(package: str, version: str) -> str:
    return f"{content_prefix(package)}releases/{version}.json.gz"


def sketches_key(package: str, version: str) -> str:
    return f"{content_prefix(package)}sketches/{version}.json.gz"


def shard_key(package: str, kind: str, shard: int) -> str:
    return f"{content_prefix(package)}{kind}/{shard:02d}.json.gz"


def meta_key(package: str) -> str:
    return f"{content_prefix(package)}meta.json"

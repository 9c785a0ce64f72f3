"""Components of a drop: which upstream release each one is, what it changed, added and left out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dropscan.models import CLASS_ORDER, FileClass, PackageInfo, Release, version_key

NESTED = "!/"
#: below this share of its non-empty files explained, a component is not forced onto a release
MIN_IDENTIFIED = 0.30
MAX_EXTRA_LEADING = 3


def component_of(path: str) -> str:
    """``a/b.tar.gz!/`` for members of a nested archive, ``top/`` for a folder, ``""`` for loose files."""
    if NESTED in path:
        return path.split(NESTED, 1)[0] + NESTED
    return path.split("/", 1)[0] + "/" if "/" in path else ""


def _inner(path: str, prefix: str) -> str:
    return path[len(prefix) :] if prefix.endswith(NESTED) else path


def _strip(path: str, k: int) -> str:
    parts = path.split("/")
    return "/".join(parts[k:]) if len(parts) > k else parts[-1]


def release_paths(release: Release) -> dict[str, str]:
    """The release's paths with its common top folder (``linux-6.1/``) removed: aligned path -> sha256."""
    tops = {p.split("/", 1)[0] for p in release.files if "/" in p}
    strip = len(tops) == 1 and all("/" in p for p in release.files)
    return {(_strip(p, 1) if strip else p): d for p, d in release.files.items()}


def best_alignment(paths: Iterable[str], known: Mapping[str, str] | set[str]) -> int:
    """How many leading folders of the drop's paths to drop so that most of them exist upstream."""
    paths = list(paths)
    scores = [sum(_strip(p, k) in known for p in paths) for k in range(MAX_EXTRA_LEADING + 1)]
    return max(range(len(scores)), key=lambda k: (scores[k], -k))


@dataclass
class Identification:
    release: Release | None
    explained: int
    nonempty: int
    aligned: dict[str, str] = field(default_factory=dict)  # drop path -> aligned path
    upstream_paths: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    @property
    def match_pct(self) -> float:
        return round(100.0 * self.explained / self.nonempty, 2) if self.nonempty else 0.0


def _missing(upstream_paths: Mapping[str, str], present: set[str]) -> list[str]:
    # members of upstream nested archives are covered by the archive itself
    return sorted(p for p in upstream_paths if NESTED not in p and p not in present)


def identify(files: list[dict[str, Any]], prefix: str, candidates: Iterable[Release]) -> Identification:
    """The candidate release that explains most non-empty files by digest; ties: fewest missing."""
    nonempty = [f for f in files if f["size"] > 0]
    best: tuple[tuple[int, int], Identification] | None = None
    for release in candidates:
        up = release_paths(release)
        digests = release.digests
        explained = sum(f["sha256"] in digests for f in nonempty)
        inners = {f["path"]: _inner(f["path"], prefix) for f in files}
        k = best_alignment(inners.values(), up)
        aligned = {p: _strip(i, k) for p, i in inners.items()}
        missing = _missing(up, set(aligned.values()))
        ident = Identification(release, explained, len(nonempty), aligned, up, missing)
        score = (explained, -len(missing))
        if best is None or score > best[0]:
            best = (score, ident)
    if best is None or best[1].explained < MIN_IDENTIFIED * max(1, len(nonempty)):
        return Identification(None, best[1].explained if best else 0, len(nonempty))
    return best[1]


def candidate_releases(
    files: Iterable[dict[str, Any]], packages: Mapping[str, PackageInfo]
) -> list[tuple[str, str]]:
    """(package, version) pairs within the version ranges of the component's matched digests."""
    ranges: dict[str, tuple[str, str]] = {}
    for f in files:
        for ref in f.get("upstream") or []:
            lo, hi = ref["versions"][0], ref["versions"][-1]
            old = ranges.get(ref["package"])
            if old:
                lo = min(old[0], lo, key=version_key)
                hi = max(old[1], hi, key=version_key)
            ranges[ref["package"]] = (lo, hi)
    out = []
    for pkg, (lo, hi) in sorted(ranges.items()):
        info = packages.get(pkg)
        for v in info.versions if info else (lo, hi):
            if version_key(lo) <= version_key(v) <= version_key(hi):
                out.append((pkg, v))
    return sorted(set(out))


def resolve_component(
    prefix: str,
    files: list[dict[str, Any]],
    packages: Mapping[str, PackageInfo],
    load: Callable[[str, str], Release | None],
) -> dict[str, Any]:
    """Identify the component's release, settle modified/added, and return its manifest entry.

    Mutates ``files``: each gets its ``component`` and a final ``class``.
    """
    releases = [r for pv in candidate_releases(files, packages) if (r := load(*pv)) is not None]
    ident = identify(files, prefix, releases)
    for f in files:
        f["component"] = prefix
        if f["class"] is None:
            aligned = ident.aligned.get(f["path"])
            in_upstream = ident.release is not None and aligned in ident.upstream_paths
            f["class"] = (FileClass.MODIFIED if in_upstream else FileClass.ADDED).value
    counts = Counter(f["class"] for f in files)
    rel = ident.release
    return {
        "prefix": prefix,
        "package": rel.package if rel else None,
        "version": rel.version if rel else None,
        "identified": rel is not None,
        "match_pct": ident.match_pct,
        "files": len(files),
        "classes": {c.value: counts.get(c.value, 0) for c in CLASS_ORDER},
        "missing": ident.missing,
    }


def parse_declared(text: str | None) -> list[tuple[str, str]]:
    """``linux@6.1.176,busybox@1.35.0`` (S3 metadata ``x-amz-meta-components``) -> pairs."""
    out = []
    for part in (text or "").replace(";", ",").split(","):
        name, _, version = part.strip().partition("@")
        if name:
            out.append((name, version))
    return out


def declared_mismatches(
    declared: list[tuple[str, str]], components: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Wrong source released: components identified as another release than declared, and declared
    releases that no component is."""
    if not declared:
        return []
    found = {(c["package"], c["version"]): c for c in components if c["identified"]}
    by_package = {name: version for name, version in declared}
    out: list[dict[str, Any]] = []
    for (pkg, ver), comp in sorted(found.items()):
        want = by_package.get(pkg)
        if want is None:
            out.append(
                {"kind": "undeclared", "component": comp["prefix"], "found": f"{pkg}@{ver}", "declared": None}
            )
        elif want and want != ver:
            out.append({"kind": "other-release", "component": comp["prefix"], "found": f"{pkg}@{ver}",
                        "declared": f"{pkg}@{want}"})  # fmt: skip
    present = {pkg for pkg, _ in found}
    for name, version in declared:
        if name not in present:
            label = f"{name}@{version}" if version else name
            out.append({"kind": "not-found", "component": None, "found": None, "declared": label})
    return out

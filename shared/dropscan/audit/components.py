"""Components of a drop: which upstream release each one is, what it changed, added and left out."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from dropscan.models import CLASS_ORDER, FileClass, PackageInfo, Release, version_key

NESTED = "!/"
#: below this share of its non-empty files explained, a component is not forced onto a release
MIN_IDENTIFIED = 0.30
MAX_EXTRA_LEADING = 3
#: releases whose path lists finalize reads per component, the best ranked by range counts
TOP_CANDIDATES = 3


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


def score_candidates(
    files: list[dict[str, Any]], prefix: str, candidates: Iterable[Release]
) -> list[Identification]:
    """Each candidate release's identification, best first: most non-empty files explained by digest,
    then fewest missing. The drop's paths are cut for each alignment once, whatever the candidates."""
    nonempty = [f for f in files if f["size"] > 0]
    inners = {f["path"]: _inner(f["path"], prefix) for f in files}
    cut: dict[int, list[str]] = {}  # leading folders dropped -> the drop's paths so cut, in order

    def paths(k: int) -> list[str]:
        if k not in cut:
            cut[k] = [_strip(i, k) for i in inners.values()]
        return cut[k]

    out: list[tuple[tuple[int, int], int, Identification]] = []
    for n, release in enumerate(candidates):
        up = release_paths(release)
        digests = release.digests
        explained = sum(f["sha256"] in digests for f in nonempty)
        scores = [sum(p in up for p in paths(k)) for k in range(MAX_EXTRA_LEADING + 1)]
        k = max(range(len(scores)), key=lambda k: (scores[k], -k))
        aligned = dict(zip(inners, paths(k), strict=True))
        missing = _missing(up, set(aligned.values()))
        ident = Identification(release, explained, len(nonempty), aligned, up, missing)
        out.append(((explained, -len(missing)), -n, ident))
    out.sort(key=lambda t: (t[0], t[1]), reverse=True)  # ties: the earlier candidate
    return [ident for _, _, ident in out]


def identify(files: list[dict[str, Any]], prefix: str, candidates: Iterable[Release]) -> Identification:
    """The candidate release that explains most non-empty files by digest; ties: fewest missing."""
    scored = score_candidates(files, prefix, candidates)
    return _enough(scored[0] if scored else None, files)


def _enough(best: Identification | None, files: list[dict[str, Any]]) -> Identification:
    """``best``, unless it explains too few of the non-empty files to force the component onto it."""
    nonempty = sum(f["size"] > 0 for f in files)
    if best is None or best.explained < MIN_IDENTIFIED * max(1, nonempty):
        return Identification(None, best.explained if best else 0, nonempty)
    return best


def candidate_releases(
    files: Iterable[dict[str, Any]], packages: Mapping[str, PackageInfo]
) -> list[tuple[str, str]]:
    """(package, version) pairs within the version ranges of the component's matched digests."""
    return sorted((p, v) for p, v, _ in rank_releases(files, packages))


def _ranges(files: Iterable[dict[str, Any]]) -> Iterator[tuple[str, str, str]]:
    """(package, lowest, highest) of every release range of the non-empty files' matches."""
    for f in files:
        if f["size"] == 0:
            continue
        for ref in f.get("upstream") or []:
            if ref["versions"]:
                yield ref["package"], ref["versions"][0], ref["versions"][-1]


def rank_releases(
    files: Iterable[dict[str, Any]], packages: Mapping[str, PackageInfo]
) -> list[tuple[str, str, int]]:
    """(package, version, how many non-empty files' ranges hold it) for every release any range holds,
    most first (ties: the newer first).

    Computed from the ranges the lookups returned, one pass over the files and one over each package's
    versions (a difference array): no path list is read, whatever the number of releases. A range is the
    lowest and highest release holding a digest, so a file that left and came back is counted in the
    releases between: the ranking picks candidates, whose path lists then decide (:func:`resolve_component`).
    """
    keys = {p: [version_key(v) for v in info.versions] for p, info in packages.items()}
    diffs: dict[str, list[int]] = {}
    loose: Counter[tuple[str, str]] = Counter()  # ranges of packages without a registered version list
    for pkg, lo, hi in _ranges(files):
        vkeys = keys.get(pkg)
        if not vkeys:
            loose[(pkg, lo)] += 1
            if hi != lo:
                loose[(pkg, hi)] += 1
            continue
        diff = diffs.setdefault(pkg, [0] * (len(vkeys) + 1))
        diff[bisect_left(vkeys, version_key(lo))] += 1
        diff[bisect_right(vkeys, version_key(hi))] -= 1
    out = [(p, v, n) for (p, v), n in loose.items()]
    for pkg, diff in diffs.items():
        running = 0
        for version, step in zip(packages[pkg].versions, diff, strict=False):
            running += step
            if running > 0:
                out.append((pkg, version, running))
    out.sort(key=lambda t: (t[0], version_key(t[1])), reverse=True)
    out.sort(key=lambda t: -t[2])  # stable: among equal counts, the newer release first
    return out


def releases_holding(
    ref: Mapping[str, Any], packages: Mapping[str, PackageInfo], keys: dict[str, list[Any]] | None = None
) -> int:
    """How many registered releases of the ref's package lie in its range (0: history only).

    ``keys``: the packages' sorted version keys, made once per component and kept there (80,000 files
    against 1,000 releases would otherwise make them 80,000 times)."""
    if not ref["versions"]:
        return 0
    info = packages.get(ref["package"])
    if info is None or not info.versions:
        return 1 if ref["versions"][0] == ref["versions"][-1] else 2
    keys = {} if keys is None else keys
    vkeys = keys.get(info.name)
    if vkeys is None:
        vkeys = keys[info.name] = [version_key(v) for v in info.versions]
    lo, hi = version_key(ref["versions"][0]), version_key(ref["versions"][-1])
    return bisect_right(vkeys, hi) - bisect_left(vkeys, lo)


def _summary(ident: Identification) -> dict[str, Any] | None:
    rel = ident.release
    if rel is None:
        return None
    return {
        "package": rel.package,
        "version": rel.version,
        "files": ident.explained,
        "match_pct": ident.match_pct,
        "missing": len(ident.missing),
    }


#: classes whose files have an upstream counterpart at their own path, diffed for review evidence
_DIFFED = frozenset({FileClass.MODIFIED.value, FileClass.VCS_KEYWORDS.value, FileClass.WHITESPACE.value})


def resolve_component(
    prefix: str,
    files: list[dict[str, Any]],
    packages: Mapping[str, PackageInfo],
    load: Callable[[str, str], Release | None],
) -> dict[str, Any]:
    """Identify the component's release, settle modified/added, and return its manifest entry.

    The releases are ranked by their range counts (:func:`rank_releases`); the path lists of the
    :data:`TOP_CANDIDATES` first are read and decide, by files explained and then fewest missing: the
    nearest release and the runner-up, each with its score. Mutates ``files``: each gets its
    ``component`` and a final ``class``, and each upstream reference the number of releases holding it.
    """
    ranked = rank_releases(files, packages)
    top = [r for p, v, _ in ranked[:TOP_CANDIDATES] if (r := load(p, v)) is not None]
    scored = [_enough(i, files) for i in score_candidates(files, prefix, top)]
    ident = scored[0] if scored else _enough(None, files)
    keys: dict[str, list[Any]] = {}
    for f in files:
        f["component"] = prefix
        for ref in f.get("upstream") or []:
            ref["releases"] = releases_holding(ref, packages, keys)
        if f["class"] is None:
            aligned = ident.aligned.get(f["path"])
            in_upstream = ident.release is not None and aligned in ident.upstream_paths
            f["class"] = (FileClass.MODIFIED if in_upstream else FileClass.ADDED).value
        if f["class"] in _DIFFED and ident.release is not None:
            # the upstream file it differs from, for the review evidence (stages.evidence)
            aligned = ident.aligned.get(f["path"], "")
            if aligned in ident.upstream_paths:
                f["base"] = {"path": aligned, "sha256": ident.upstream_paths[aligned]}
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
        "nearest": _summary(scored[0]) if rel and scored else None,
        "runner_up": _summary(scored[1]) if len(scored) > 1 else None,
        "releases_in_range": len(ranked),
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

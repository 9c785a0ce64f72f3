"""What every report reads from a manifest; the triage fields (licences, red flags, trust) are optional."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dropscan.models import CLASS_ORDER, REVIEW_CLASSES

Manifest = Mapping[str, Any]

CLASSES: tuple[str, ...] = tuple(c.value for c in CLASS_ORDER)
REVIEW: frozenset[str] = frozenset(c.value for c in REVIEW_CLASSES)
SEVERITIES: tuple[str, ...] = ("action-required", "review")


def drop_name(manifest: Manifest) -> str:
    return str(manifest["source"]["key"]).rsplit("/", 1)[-1]


def component_name(c: Mapping[str, Any]) -> str:
    """``busybox 1.35.0``, or the folder of an unidentified component."""
    if c.get("identified") and c.get("package"):
        return f"{c['package']} {c['version']}" if c.get("version") else str(c["package"])
    return str(c.get("prefix") or "").rstrip("/") or "(top level)"


def purl(c: Mapping[str, Any]) -> str | None:
    """``pkg:generic/busybox@1.35.0`` for an identified component; None when nothing was identified."""
    if not (c.get("identified") and c.get("package")):
        return None
    from packageurl import PackageURL

    return str(PackageURL(type="generic", name=c["package"], version=c.get("version") or None).to_string())


def is_cleared(f: Mapping[str, Any]) -> bool:
    """An auditor accepted this content earlier and nothing new was found in it: out of the review set."""
    d = f.get("decision")
    return bool(d and d.get("verdict") == "accepted" and not d.get("reopened"))


def evidence(f: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The file's review evidence (its upstream base, diff and hunks' origins); None on older manifests."""
    ev = f.get("evidence")
    return ev if isinstance(ev, Mapping) else None


def is_backport(f: Mapping[str, Any]) -> bool:
    """A modified file whose every change upstream published (or is noise): cited, not reviewed."""
    ev = evidence(f)
    return (
        f["class"] == "modified" and ev is not None and ev.get("origin") == "upstream" and not ev.get("error")
    )


def in_review(f: Mapping[str, Any]) -> bool:
    return f["class"] in REVIEW and not is_cleared(f) and not is_backport(f)


def has_triage(manifest: Manifest) -> bool:
    """Whether the review set was scanned for licences and red flags (manifests before issue 5 were not)."""
    return "flags" in manifest or "triage" in manifest


def severity_rank(severity: str | None) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def flags(manifest: Manifest) -> list[dict[str, Any]]:
    """The red flags, most severe first, the vendor's before upstream's own text, then by path and line;
    flags in files no binary of the firmware contains (``shipped: false``) after all the others."""
    return sorted(
        manifest.get("flags") or [],
        key=lambda f: (
            f.get("shipped") is False,
            severity_rank(f.get("severity")),
            bool(f.get("upstream_text")),  # upstream's own text below the vendor's
            f.get("path") or "",
            f.get("line") or 0,
        ),
    )


def flag_counts(manifest: Manifest) -> dict[str, int]:
    counts = (manifest.get("summary") or {}).get("flags")
    if isinstance(counts, Mapping):
        return {s: int(counts.get(s, 0)) for s in SEVERITIES}
    found = flags(manifest)
    return {s: sum(1 for f in found if f.get("severity") == s) for s in SEVERITIES}


def licence_findings(f: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [lic for lic in f.get("licenses") or [] if lic.get("expression")]


def finding_label(lic: Mapping[str, Any]) -> str:
    """``BSD-3-Clause (spdx-tag, line 3)``."""
    where = [str(lic["source"])] if lic.get("source") else []
    if lic.get("line"):
        end = lic.get("end_line")
        where.append(f"lines {lic['line']}–{end}" if end and end != lic["line"] else f"line {lic['line']}")
    return f"{lic['expression']} ({', '.join(where)})" if where else str(lic["expression"])


def flag_location(f: Mapping[str, Any]) -> str:
    """``path:line``; a flag about the whole drop (``review-limit``) has no path."""
    return f"{f['path']}:{f['line']}" if f.get("line") else str(f.get("path") or "") or "(whole drop)"


@dataclass
class ComponentView:
    """A component with what of the manifest belongs to it: review files, backports (modified files whose
    changes upstream published), flags, unreadable files."""

    data: Mapping[str, Any]
    review: list[Mapping[str, Any]] = field(default_factory=list)
    backports: list[Mapping[str, Any]] = field(default_factory=list)
    flags: list[Mapping[str, Any]] = field(default_factory=list)
    unreadable: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return str(self.data.get("prefix") or "")

    @property
    def name(self) -> str:
        return component_name(self.data)

    @property
    def classes(self) -> dict[str, int]:
        counts = self.data.get("classes") or {}
        return {c: int(counts.get(c, 0)) for c in CLASSES}

    @property
    def licence(self) -> str | None:
        value = self.data.get("license")
        return str(value) if value else None

    @property
    def licence_unknown(self) -> str | None:
        """Why the component's licence is unknown (None: known, or not looked for)."""
        return licence_unknown(self.data)

    @property
    def trust(self) -> str | None:
        value = self.data.get("trust")
        return str(value) if value else None


def licence_unknown(c: Mapping[str, Any]) -> str | None:
    """Why a component's licence could not be told; None when it was, or when triage did not look."""
    if c.get("license") or not c.get("license_reason") or not c.get("prefix"):
        return None
    return str(c["license_reason"])


def owner(prefixes: Sequence[str], path: str) -> str | None:
    """The longest component prefix of ``path`` (files of older manifests may lack ``component``)."""
    best: str | None = None
    for p in prefixes:
        if path.startswith(p) and (best is None or len(p) > len(best)):
            best = p
    return best


def components(manifest: Manifest) -> list[ComponentView]:
    """The components in manifest order, each with its review files, flags and unreadable files.

    One pass over ``files``: a kernel manifest holds 80,000 of them and only the few thousand of the
    review set are kept.
    """
    views = [ComponentView(c) for c in manifest.get("components") or []]
    by_prefix = {v.prefix: v for v in views}
    prefixes = list(by_prefix)

    def view_of(path: str, declared: Any) -> ComponentView | None:
        key = declared if isinstance(declared, str) and declared in by_prefix else owner(prefixes, path)
        return by_prefix.get(key) if key is not None else None

    for f in manifest.get("files") or []:
        if f["class"] not in REVIEW and not f.get("unreadable"):
            continue
        v = view_of(f["path"], f.get("component"))
        if v is None:
            continue
        if in_review(f):
            v.review.append(f)
        elif is_backport(f):
            v.backports.append(f)
        if f.get("unreadable"):
            v.unreadable.append(f)
    for fl in flags(manifest):
        v = view_of(str(fl.get("path") or ""), fl.get("component"))
        if v is not None:
            v.flags.append(fl)
    return views


def trusted_releases(manifest: Manifest) -> list[dict[str, Any]]:
    """The upstream releases the scan matched components against, with their trust level when recorded."""
    out = []
    for c in manifest.get("components") or []:
        if c.get("identified") and c.get("package"):
            out.append(
                {
                    "release": component_name(c),
                    "prefix": c.get("prefix") or "",
                    "trust": c.get("trust"),
                    "license": c.get("license"),
                    "license_unknown": licence_unknown(c),
                    "match_pct": c.get("match_pct"),
                }
            )
    return out


def low_trust_packages(manifest: Manifest) -> list[str]:
    """Packages that explained files only as low-trust matches (collections, not releases)."""
    names = {
        u["package"]
        for f in manifest.get("files") or []
        if f["class"] == "low-trust"
        for u in f.get("upstream") or []
    }
    return sorted(names)


#: a review set larger than this is also shown grouped (by folder, by distinct content) in the summary
GROUP_ABOVE = 1_000


@dataclass
class Group:
    """Review files sharing a folder or a content: how many, one of them, and what they state."""

    key: str
    files: int = 0
    example: str = ""
    classes: dict[str, int] = field(default_factory=dict)
    licences: dict[str, int] = field(default_factory=dict)


def _grouped(files: Sequence[Mapping[str, Any]], key_of: Any) -> list[Group]:
    groups: dict[str, Group] = {}
    for f in files:
        key = key_of(f)
        g = groups.get(key)
        if g is None:
            g = groups[key] = Group(key, example=str(f["path"]))
        g.files += 1
        g.classes[f["class"]] = g.classes.get(f["class"], 0) + 1
        for expr in dict.fromkeys(lic["expression"] for lic in licence_findings(f)):
            g.licences[expr] = g.licences.get(expr, 0) + 1
    return sorted(groups.values(), key=lambda g: (-g.files, g.key))


def by_folder(files: Sequence[Mapping[str, Any]]) -> list[Group]:
    """The review files grouped by the folder they lie in, most files first."""
    return _grouped(files, lambda f: folder(str(f["path"])))


def folder(path: str) -> str:
    return path.rpartition("/")[0] + "/" if "/" in path else "(top level)"


def by_content(files: Sequence[Mapping[str, Any]]) -> list[Group]:
    """The review files grouped by SHA-256 (copies of one file), most copies first."""
    return _grouped(files, lambda f: str(f["sha256"]))


def group_flags(
    found: Sequence[Mapping[str, Any]],
) -> list[tuple[tuple[str, str, str], int, Mapping[str, Any]]]:
    """Red flags grouped by (severity, kind, detail): the count and the first of each, most severe first."""
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for f in found:
        key = (str(f.get("severity")), str(f.get("kind")), str(f.get("detail") or ""))
        if key in groups:
            groups[key][0] += 1
        else:
            groups[key] = [1, f]
    return sorted(
        ((k, n, f) for k, (n, f) in groups.items()), key=lambda g: (severity_rank(g[0][0]), -g[1], g[0])
    )


def limit_note(manifest: Manifest) -> str | None:
    """One sentence when triage stopped at its limits (``triage.limited``): how many files, and why."""
    triage = manifest.get("triage")
    limited = triage.get("limited") if isinstance(triage, Mapping) else None
    if not isinstance(limited, Mapping):
        return None
    tags, unread = int(limited.get("tags_only") or 0), int(limited.get("not_read") or 0)
    reasons = "; ".join(str(r) for r in limited.get("reasons") or [])
    return (
        f"Review set beyond the triage limits: {tags:,} files read for licence tags and restriction terms "
        f"only, {unread:,} not read (files[].triage in the manifest names them). {reasons}."
    )


def plural(n: int, singular: str, plural_form: str | None = None) -> str:
    """``1 backported upstream fix``, ``16 backported upstream fixes``."""
    return f"{n:,} {singular if n == 1 else (plural_form or singular + 's')}"


def duration(seconds: float) -> str:
    """``141 s``, ``2.4 s``, ``less than a second``: never "0 s" for work that took time."""
    if seconds < 1:
        return "less than a second"
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:,.0f} s"


def short(commit: Any) -> str:
    return str(commit or "")[:12]


def base_label(base: Mapping[str, Any] | None) -> str:
    """``busybox 1.37.0 networking/wget.c``; a historical base: ``busybox commit 0123456789ab …``."""
    if not base:
        return "no upstream base"
    where = [str(base.get("package") or "?")]
    if base.get("version"):
        where.append(str(base["version"]))
    if base.get("commit"):
        where.append(("at commit " if base.get("version") else "commit ") + short(base["commit"]))
    return " ".join([*where, str(base.get("path") or "")]).rstrip()


def similar_label(similar: Mapping[str, Any]) -> str:
    """``close to busybox 1.37.0 networking/wget.c (67 % of its lines)``."""
    release = " ".join(str(similar[k]) for k in ("package", "version") if similar.get(k))
    return f"close to {release} {similar.get('path')} ({int(similar.get('similarity') or 0)} % of its lines)"


def baseline(c: Mapping[str, Any]) -> Mapping[str, Any] | None:
    value = c.get("baseline")
    return value if isinstance(value, Mapping) else None


def baseline_name(c: Mapping[str, Any]) -> str:
    """``busybox 1.37.0 + 16 backported upstream fixes + 14 vendor-changed files`` (parts that are 0 left
    out); the component's name when the manifest carries no baseline."""
    b = baseline(c)
    if b is None or not c.get("package"):
        return component_name(c)
    parts = [f"{c['package']} {b.get('release') or c.get('version') or ''}".rstrip()]
    if b.get("backported"):
        parts.append(plural(int(b["backported"]), "backported upstream fix", "backported upstream fixes"))
    if b.get("vendor_changed"):
        parts.append(plural(int(b["vendor_changed"]), "vendor-changed file"))
    return " + ".join(parts)


def cited_commits(manifest: Manifest) -> Mapping[str, Mapping[str, Any]]:
    """The upstream commits the evidence cites, by id: subject, date, first release holding them."""
    ev = manifest.get("evidence")
    commits = ev.get("commits") if isinstance(ev, Mapping) else None
    return commits if isinstance(commits, Mapping) else {}


def has_evidence(manifest: Manifest) -> bool:
    """Whether modified files carry evidence (manifests before issue 24 do not)."""
    s = manifest.get("summary") or {}
    return "backported" in s or "vendor_changed" in s or "evidence" in manifest


# ------------------------------------------------------------------ firmware (issue 35)
#: binary statuses, those a reader acts on first (``dropscan.firmware.matching``)
BINARY_STATUSES: tuple[str, ...] = (
    "wrong-version",
    "source-missing",
    "unknown",
    "corresponds",
    "no-obligation",
)
#: statuses that need nothing of the drop: the source is there, or the licence asks for none
SATISFIED: frozenset[str] = frozenset({"corresponds", "no-obligation"})
FIRMWARE_VERDICTS: dict[str, str] = {
    "complete": "the drop holds the source of every binary whose licence asks for it",
    "incomplete": "binaries under copyleft licences ship without their source in the drop",
    "wrong": "the drop is not the source of what ships: another version, kernel or architecture",
}


def firmware(manifest: Manifest) -> Mapping[str, Any] | None:
    """The manifest's ``firmware`` part (``stages.firmware_check.attach``); None without an image."""
    value = manifest.get("firmware")
    return value if isinstance(value, Mapping) and value.get("images") else None


def firmware_images(manifest: Manifest) -> list[Mapping[str, Any]]:
    fw = firmware(manifest)
    return list(fw["images"]) if fw else []


def status_rank(status: str | None) -> int:
    return BINARY_STATUSES.index(status) if status in BINARY_STATUSES else len(BINARY_STATUSES)


def binaries(section: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The image's binaries, those a reader acts on first (wrong version, source missing), then by path."""
    return sorted(section.get("binaries") or [], key=lambda b: (status_rank(b.get("status")), b["path"]))


def unmet(section: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The binaries whose source the drop does not hold, or holds in another version, or that are unknown."""
    return [b for b in binaries(section) if b.get("status") not in SATISFIED]


def status_counts(section: Mapping[str, Any]) -> dict[str, int]:
    """``{status: n}`` in reading order (the section's summary, else counted)."""
    counts = (section.get("summary") or {}).get("statuses")
    if not isinstance(counts, Mapping):
        counts = {}
        for b in section.get("binaries") or []:
            counts[b.get("status")] = counts.get(b.get("status"), 0) + 1
    return {s: int(n) for s, n in sorted(counts.items(), key=lambda kv: status_rank(kv[0])) if n}


def binary_name(b: Mapping[str, Any]) -> str:
    """``busybox 1.35.0``; a binary of no known package by its file name."""
    if b.get("package"):
        return f"{b['package']} {b['version']}" if b.get("version") else str(b["package"])
    return file_name(str(b.get("path") or ""))


def file_name(path: str) -> str:
    """The last name of an image path: ``router.bin@0x4c0000:squashfs!/bin/busybox`` -> ``busybox``."""
    return path.rsplit("!", 1)[-1].rstrip("/").rsplit("/", 1)[-1] or path


def drop_component(manifest: Manifest, prefix: str | None) -> Mapping[str, Any] | None:
    """The manifest's component of ``prefix`` (a section names it as the drop's folder, slash or not)."""
    if not prefix:
        return None
    for c in manifest.get("components") or []:
        if str(c.get("prefix") or "").rstrip("/") == prefix.rstrip("/"):
            return c  # type: ignore[no-any-return]
    return None


def drop_has(manifest: Manifest, b: Mapping[str, Any]) -> str:
    """What the drop holds for a binary, to follow "the drop has": ``busybox 1.30.1 (busybox-1.30.1)``,
    ``no source of it``."""
    prefix = b.get("component")
    if not prefix:
        return "nothing identified as it" if b.get("status") == "unknown" else "no source of it"
    c = drop_component(manifest, str(prefix))
    package = (c or {}).get("package") or b.get("package")
    version = (c or {}).get("version")
    named = (
        f"{package} {version}" if package and version else f"{package or 'source'}, version not identified"
    )
    return f"{named} ({prefix})"


def binary_evidence(b: Mapping[str, Any]) -> str:
    """``identifier: BusyBox v1.35.0``; ``literals: 1,480 literals``: how the binary was named, by what."""
    ev = b.get("evidence") or {}
    parts = [str(i) for i in ev.get("identifiers") or []]
    if ev.get("literals"):
        parts.append(plural(int(ev["literals"]), "literal"))
    return str(ev.get("by") or "none") + (": " + "; ".join(parts) if parts else "")


def binary_purpose(b: Mapping[str, Any]) -> str:
    """What the binary is, in the words SPDX and CycloneDX share: application, library, operating-system
    (the kernel and its modules), firmware (a bootloader), file (bytes no format claimed)."""
    kind = b.get("kind")
    if kind in ("kernel", "module"):
        return "operating-system"
    if kind == "bootloader":
        return "firmware"
    if kind != "elf":
        return "file"
    elf = b.get("elf") or {}
    name = file_name(str(b.get("path") or ""))
    if elf.get("soname") or _shared_name(name):
        return "library"
    return "application"


def _shared_name(name: str) -> bool:
    """``libc.so.6``, ``libxt_tcp.so``, ``ld.so.1``: a shared object by its name."""
    return name.endswith(".so") or ".so." in name


def kernel_facts(kernel: Mapping[str, Any]) -> list[str]:
    """The kernel check in sentences: version, configuration's architecture, options, modules."""
    version, drop = kernel.get("version"), kernel.get("drop_version")
    arch = f" ({kernel['arch']})" if kernel.get("arch") else ""
    if drop is None:
        said = "the drop has no kernel Makefile to compare with"
    elif kernel.get("version_mismatch"):
        said = f"the drop's Makefile says {drop}: ANOTHER VERSION"
    else:
        said = f"the drop's Makefile says {drop}: the same"
    facts = [f"Linux {version or 'version unknown'}{arch}; {said}."]
    if kernel.get("config_arch") is None:
        facts.append("The drop has no kernel .config selecting an architecture.")
    elif kernel.get("config_arch_mismatch"):
        facts.append(f"The drop's .config is for {kernel['config_arch']}: ANOTHER ARCHITECTURE.")
    else:
        facts.append(f"The drop's .config is for {kernel['config_arch']}: the same architecture.")
    differences = kernel.get("option_differences") or {}
    source = kernel.get("config_source")
    n = len(differences)
    verb = "differs" if n == 1 else "differ"
    if source == "ikconfig":
        facts.append(
            f"{plural(n, 'option')} of the image's built-in configuration (IKCONFIG) {verb} from the drop's "
            ".config."
        )
    elif source == "modules":
        implied = int(kernel.get("implied_options") or 0)
        facts.append(
            f"{n:,} of the {plural(implied, 'option')} its modules and built-ins imply {verb} from the "
            "drop's .config."
        )
    else:
        facts.append("Options not compared: no configuration of the image, or no .config in the drop.")
    other = kernel.get("modules_other_release") or []
    facts.append(
        f"{plural(len(other), 'module')} built for another kernel release."
        if other
        else "Every module is built for this kernel release."
    )
    return facts


def option_value(value: Any) -> str:
    return "not set" if value in (None, "n") else str(value)


def option_difference(option: str, values: Sequence[Any]) -> str:
    """``CONFIG_USB_UAS: m in the image (modules), y in the drop``."""
    image, drop = values[0], values[1]
    source = f" ({values[2]})" if len(values) > 2 and values[2] else ""
    return f"{option}: {option_value(image)} in the image{source}, {option_value(drop)} in the drop"


def in_binary_label(f: Mapping[str, Any]) -> str | None:
    """``in the firmware`` / ``not in the firmware`` for a source file the firmware check told."""
    value = f.get("in_binary")
    if value is True:
        return "in the firmware"
    if value is False:
        return "not in the firmware"
    return None


def unshipped(flag: Mapping[str, Any]) -> bool:
    """A flag in a file no shipped binary contains (``stages.firmware_check.attach``)."""
    return flag.get("shipped") is False

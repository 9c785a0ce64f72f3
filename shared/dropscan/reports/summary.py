"""The audit summary as people read it: e-mail subject and plain-text body, also printed by the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dropscan.keys import manifest_key
from dropscan.reports import view
from dropscan.reports.licence_names import described, names_of

SUBJECT_LIMIT = 99  # SNS rejects subjects of 100 characters or more

_LABELS = (
    ("vcs-keywords", "VCS-only"),
    ("whitespace", "whitespace-only"),
    ("low-trust", "low-trust"),
    ("modified", "modified"),
    ("added", "added"),
)


def drop_name(manifest: Mapping[str, Any]) -> str:
    return str(manifest["source"]["key"]).rsplit("/", 1)[-1]


def subject(manifest: Mapping[str, Any]) -> str:
    """``dropscan: <supplier>/<drop> — <verdict>: <review> of <files> files (<pct>%) need review``.

    With backports, ``, 16 backported`` follows the counts; with a firmware image, ``; firmware wrong``
    (its verdict) ends it. Over SNS's limit, the drop name is shortened in the middle first (to 12
    characters at least), then the backports are left to the body, then the name is shortened further:
    the verdicts and the review counts are what a reader of an inbox needs to see, and no phrase of them
    is ever cut.
    """
    s = manifest["summary"]
    backported = f", {s['backported']:,} backported" if s.get("backported") else ""
    fw = view.firmware(manifest)
    firmware = f"; firmware {fw['verdict']}" if fw and fw.get("verdict") else ""
    if manifest["status"] == "complete" and manifest.get("delta"):
        counts = f"{s['review']:,} of {s['files']:,} files ({s['review_pct']:.1f}%), {since(manifest)}"
        tail = f" — {manifest['verdict']}: {counts}{backported}"
    elif manifest["status"] == "complete":
        counts = f"{s['review']:,} of {s['files']:,} files ({s['review_pct']:.1f}%) need review"
        tail = f" — {manifest['verdict']}: {counts}{backported}"
    else:
        tail = f" — {manifest['verdict']}: {manifest['reason'] or manifest['status']}"
    tail += firmware
    head = f"dropscan: {manifest['supplier']}/"
    name = drop_name(manifest)
    room = SUBJECT_LIMIT - len(head) - len(tail)
    if backported and room < 12:  # the verdict and the review counts come first, then the backports
        tail, room = tail.removesuffix(firmware).removesuffix(backported) + firmware, room + len(backported)
    if len(name) > room:
        name = _middle(name, max(room, 2))
    text = head + name + tail
    if len(text) > SUBJECT_LIMIT:  # a supplier name or a reason of its own length: shorten those too
        text = _middle(head + name, max(2, SUBJECT_LIMIT - len(tail))) + tail
    return text if len(text) <= SUBJECT_LIMIT else _middle(text, SUBJECT_LIMIT)


def _middle(text: str, width: int) -> str:
    """``text`` in ``width`` characters, its middle given way to "…"."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep // 2] + "…" + (text[len(text) - keep // 2 :] if keep // 2 else "")


def since(manifest: Mapping[str, Any]) -> str:
    """``6 new since 3.2.0``: the paths new or changed since the product's previous drop."""
    d = manifest["delta"]
    prev = d["previous"]
    name = prev.get("version") or str(prev.get("key") or "").rsplit("/", 1)[-1] or prev["scan_id"]
    return f"{len(d['new']) + len(d['changed']):,} new since {name}"


def _delta_lines(manifest: Mapping[str, Any], limit: int) -> list[str]:
    """What changed since the previous drop: first in the body, as in the HTML report."""
    d = manifest.get("delta")
    if not d:
        return []
    prev = d["previous"]
    lines = [
        f"Since the previous drop ({str(prev['key']).rsplit('/', 1)[-1]}, scan {prev['scan_id']}):"
        f" {len(d['new']):,} new, {len(d['changed']):,} changed, {len(d['removed']):,} removed."
    ]
    for label in ("new", "changed", "removed"):
        lines += [f"  {label:<8} {p}" for p in d[label][:limit]]
        if len(d[label]) > limit:
            lines.append(f"  … and {len(d[label]) - limit:,} more {label} (see the manifest)")
    return [*lines, ""]


def _cleared_text(s: Mapping[str, Any]) -> str:
    decided = s.get("decisions") or {}
    parts = [f"{s['cleared']:,} cleared by earlier decisions"] if s.get("cleared") else []
    parts += [f"{decided[k]:,} {k}" for k in ("needs-action", "rejected") if decided.get(k)]
    if decided.get("reopened"):
        parts.append(f"{decided['reopened']:,} decisions re-opened")
    return f" ({', '.join(parts)})" if parts else ""


def component_line(c: Mapping[str, Any]) -> str:
    """``u-boot 2023.01 — high trust, upstream licence GPL-2.0-or-later, 19,278 files, 99.2 % identical…``"""
    classes = c["classes"]
    nonempty = max(1, c["files"] - classes.get("empty", 0))
    name = view.baseline_name(c) if c["identified"] else f"{c['prefix'] or '(top level)'} unidentified"
    parts = [f"{c['files']:,} files", f"{100.0 * classes.get('identical', 0) / nonempty:.1f} % identical"]
    if c.get("license"):
        origin = "licence" if c.get("license_source") == "drop" else "upstream licence"
        parts.insert(0, f"{origin} {described(str(c['license']))}")
    elif view.licence_unknown(c):
        parts.insert(0, "licence unknown")
    if c.get("trust"):
        parts.insert(0, f"{c['trust']} trust")
    parts += [f"{classes[k]:,} {label}" for k, label in _LABELS if classes.get(k)]
    if c.get("cleared"):
        parts.append(f"{c['cleared']:,} cleared by earlier decisions")
    commits = len((view.baseline(c) or {}).get("commits") or [])
    if commits:
        parts.append(f"backports cite {view.plural(commits, 'upstream commit')}")
    if c["missing"]:
        parts.append(view.plural(len(c["missing"]), "upstream file") + " missing")
    runner = c.get("runner_up")
    if c["identified"] and runner:  # the evidence for "this release, not that one"
        parts.append(
            f"nearest of {c.get('releases_in_range', 0):,} releases; runner-up {runner['version']} "
            f"({runner['files']:,} files, {runner['match_pct']} %)"
        )
    where = f" [{c['prefix']}]" if c["identified"] and c["prefix"] else ""
    return f"{name}{where} — " + ", ".join(parts)


def body(
    manifest: Mapping[str, Any],
    *,
    review_limit: int = 50,
    links: Mapping[str, str] | None = None,
    links_expire: int | None = None,
    local: Mapping[str, str] | None = None,
) -> str:
    """The e-mail's body. ``links``: presigned URLs of the reports (the deployed service); ``local``:
    the files a local run wrote (name -> path or file: URI), listed instead of the bucket's keys."""
    s = manifest["summary"]
    src = manifest["source"]
    lines = [
        f"Supplier:  {manifest['supplier']}",
        f"Drop:      {src['key']} ({src['size']:,} bytes, sha256 {src.get('sha256') or '-'})",
        f"Scan:      {manifest['scan_id']}",
        f"Status:    {manifest['status']}" + (f" — {manifest['reason']}" if manifest["reason"] else ""),
        f"Verdict:   {manifest['verdict']}",
        *_firmware_head(manifest),
        *_database_lines(manifest),
        "",
        f"{view.plural(s['files'], 'file')}; {s['review']:,} ({s['review_pct']:.1f}%) need review"
        f"{_cleared_text(s)}.",
        "  " + ", ".join(f"{n:,} {c}" for c, n in s["classes"].items() if n),
        *_evidence_counts(s),
        "",
    ]
    note = view.limit_note(manifest)
    if note:
        lines += [note, ""]
    lines += _delta_lines(manifest, review_limit)
    if manifest["components"]:
        lines.append("Components:")
        lines += [f"  {component_line(c)}" for c in manifest["components"]]
        lines.append("")
    mismatches = manifest.get("mismatches") or []
    if mismatches:
        lines.append("Declared components do not match what was delivered:")
        for m in mismatches:
            where = f" ({m['component'] or '(top level)'})" if m["component"] is not None else ""
            if m["kind"] == "not-found":
                lines.append(f"  declared {m['declared']}: not found in the drop")
            elif m["kind"] == "other-release":
                lines.append(f"  declared {m['declared']}, delivered {m['found']}{where}")
            else:
                lines.append(f"  undeclared {m['found']}{where}")
        lines.append("")
    lines += _firmware_lines(manifest, review_limit)
    lines += _flag_lines(manifest, review_limit)
    review = [f for f in manifest["files"] if view.in_review(f)]
    lines += _licence_lines(review)
    if review:
        # files with red flags first: with a long review set they are what the reader must not miss
        rank = {f.get("path"): view.severity_rank(f.get("severity")) for f in reversed(view.flags(manifest))}
        review.sort(key=lambda f: (rank.get(f["path"], len(view.SEVERITIES)), f["path"]))
        shown = review_limit
        if len(review) > view.GROUP_ABOVE:  # beyond reading: its folders and contents, then a few files
            lines += _group_lines(review)
            shown = GROUP_LINES
        lines.append("Review set" + (" (files with red flags first):" if rank else ":"))
        lines += [_review_line(f) for f in review[:shown]]
        if len(review) > shown:
            lines.append(f"  … and {len(review) - shown:,} more (see the manifest)")
        lines.append("")
    lines += _backport_lines(manifest, review_limit)
    unreadable = [f for f in manifest["files"] if f.get("unreadable")]
    if unreadable:
        lines.append("Unreadable nested archives:")
        lines += [f"  {f['path']}: {f['unreadable']}" for f in unreadable[:review_limit]]
        lines.append("")
    lines += _report_lines(manifest, links, links_expire, local)
    return "\n".join(lines)


def _database_lines(manifest: Mapping[str, Any]) -> list[str]:
    """``Database:  ~/.local/share/dropscan (embedded; 2 packages, 3 releases: busybox 1.35.0, …)``."""
    db = manifest.get("database")
    if not db:
        return []
    held = [f"{p} {', '.join(v)}" for p, v in (db.get("held") or {}).items()]
    shown = "; ".join(held[:5]) + ("; …" if len(held) > 5 or db["packages"] > len(held) else "")
    counts = f"{view.plural(int(db['packages']), 'package')}, {view.plural(int(db['releases']), 'release')}"
    return [f"Database:  {db['location']} ({db['kind']}; {counts}" + (f": {shown})" if held else ")")]


def _flag_lines(manifest: Mapping[str, Any], limit: int) -> list[str]:
    if not view.has_triage(manifest):
        return []
    found = view.flags(manifest)
    if not found:
        return ["Red flags: none.", ""]
    counts = view.flag_counts(manifest)
    lines = [f"Red flags ({counts['action-required']:,} action required, {counts['review']:,} to review):"]
    if len(found) > view.GROUP_ABOVE:  # more than anyone reads one by one: by kind first, then a few
        for (severity, kind, detail), n, first in view.group_flags(found)[:GROUP_LINES]:
            label = "ACTION" if severity == "action-required" else "review"
            where = view.flag_location(first)
            lines.append(f"  {label:<6} {kind:<20} {n:>7,} file{'s' if n != 1 else ' '}  e.g. {where}")
            if detail:
                lines.append(f"         {_one_line(detail)}")
        limit = GROUP_LINES // 2
        lines += ["", f"The first {limit} of them:"]
    for f in found[:limit]:
        label = "ACTION" if f.get("severity") == "action-required" else "review"
        label = "cleared" if f.get("cleared") else label  # on a file an auditor accepted with it
        upstream = "  (upstream's own text)" if f.get("upstream_text") else ""
        upstream += "  (not in the firmware)" if view.unshipped(f) else ""
        lines.append(f"  {label:<6} {f.get('kind', ''):<20} {view.flag_location(f)}{upstream}")
        if f.get("detail"):
            lines.append(f"         {f['detail']}")
        if f.get("evidence"):
            lines.append(f"         > {_one_line(str(f['evidence']))}")
    if len(found) > limit:
        lines.append(f"  … and {len(found) - limit:,} more (see the manifest)")
    return [*lines, ""]


#: groups listed in a grouped summary
GROUP_LINES = 20


def _group_lines(review: list[Mapping[str, Any]]) -> list[str]:
    """A review set beyond reading, grouped: its folders and its distinct contents, largest first."""
    lines: list[str] = []
    for title, groups, unit in (
        ("folder", view.by_folder(review), "folders"),
        ("distinct content", view.by_content(review), "contents"),
    ):
        within = f"{len(review):,} files in " if title == "folder" else ""
        lines.append(f"Review set by {title} ({within}{len(groups):,} {unit}):")
        for g in groups[:GROUP_LINES]:
            stated = "; ".join(list(g.licences)[:3]) or "no licence statement"
            name = g.key if title == "folder" else f"{g.key[:12]}… e.g. {g.example}"
            lines.append(f"  {g.files:>7,} files  {name}  [{stated}]")
        if len(groups) > GROUP_LINES:
            lines.append(f"  … and {len(groups) - GROUP_LINES:,} more {unit} (see the manifest)")
        lines.append("")
    return lines


def _licence_lines(review: list[Mapping[str, Any]]) -> list[str]:
    """Licence statements found in the review set: each expression with how many files state it."""
    files_of: dict[str, list[str]] = {}
    for f in review:
        for expr in dict.fromkeys(lic["expression"] for lic in view.licence_findings(f)):
            files_of.setdefault(expr, []).append(f["path"])
    if not files_of:
        return []
    lines = ["Licences stated in the review set:"]
    width = max(len(e) for e in files_of)
    for expr, paths in sorted(files_of.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        example = ", ".join(p.rsplit("/", 1)[-1] for p in paths[:3]) + (", …" if len(paths) > 3 else "")
        name = names_of(expr)
        lines.append(
            f"  {expr:<{width}} {len(paths):>6,} file{'s' if len(paths) != 1 else ' '}  ({example})"
            + (f" — {name}" if name else "")
        )
    return [*lines, ""]


def _review_line(f: Mapping[str, Any]) -> str:
    found = list(dict.fromkeys(lic["expression"] for lic in view.licence_findings(f)))
    d = f.get("decision")
    said = ""
    if d and d.get("reopened"):
        said = f"  (re-opened {d['verdict']} by {d['by']}: {d.get('reopen_reason', '')})"
    elif d:
        said = f"  ({d['verdict']} by {d['by']}, {d['at'][:10]})"
    return (
        f"  {f['class']:<9} {f['path']}"
        + (f"  [{'; '.join(found)}]" if found else "")
        + _evidence_text(f)
        + (f"  ({shipped})" if (shipped := view.in_binary_label(f)) else "")
        + said
    )


def _evidence_counts(s: Mapping[str, Any]) -> list[str]:
    """The backports and vendor changes (manifests before issue 24 have neither count)."""
    if "backported" not in s and "vendor_changed" not in s:
        return []
    backported, vendor = int(s.get("backported") or 0), int(s.get("vendor_changed") or 0)
    return [
        f"  {view.plural(backported, 'backported upstream fix', 'backported upstream fixes')} (changes "
        f"upstream published: cited, not in the review set); {view.plural(vendor, 'vendor-changed file')}."
    ]


def _evidence_text(f: Mapping[str, Any]) -> str:
    """``  (vendor: +12 -3 against busybox 1.37.0 networking/wget.c)``; for an added file, its near file."""
    ev = view.evidence(f)
    if ev is not None and f["class"] == "modified":
        if ev.get("error"):
            return f"  (no diff: {_one_line(str(ev['error']), 80)})"
        counts = f"+{int(ev.get('lines_added') or 0):,} -{int(ev.get('lines_removed') or 0):,}"
        undone = [view.short(r.get("commit")) for r in ev.get("reverts") or () if r.get("commit")]
        reverts = f"; reverts upstream {', '.join(undone)}" if undone else ""  # flagged, with the subject
        return f"  ({ev.get('origin')}: {counts} against {view.base_label(ev.get('base'))}{reverts})"
    similar = f.get("similar")
    if isinstance(similar, Mapping) and f["class"] == "added":
        return f"  ({view.similar_label(similar)})"
    return ""


def _backport_lines(manifest: Mapping[str, Any], limit: int) -> list[str]:
    """Modified files whose changes upstream published, each with the commits it cites."""
    backports = [f for f in manifest["files"] if view.is_backport(f)]
    if not backports:
        return []
    commits = view.cited_commits(manifest)
    lines = [f"Backported upstream fixes ({view.plural(len(backports), 'file')}, not in the review set):"]
    for f in sorted(backports, key=lambda f: str(f["path"]))[:limit]:
        cited = dict.fromkeys(
            str(h["commit"]) for h in (view.evidence(f) or {}).get("hunks") or [] if h.get("commit")
        )
        named = [
            view.short(c) + (f" ({commits[c]['release']})" if (commits.get(c) or {}).get("release") else "")
            for c in cited
        ]
        lines.append(f"  {f['path']}  [{', '.join(named) or 'no commit cited'}]")
    if len(backports) > limit:
        lines.append(f"  … and {len(backports) - limit:,} more (see the manifest)")
    return [*lines, ""]


def _report_lines(
    manifest: Mapping[str, Any],
    links: Mapping[str, str] | None = None,
    links_expire: int | None = None,
    local: Mapping[str, str] | None = None,
) -> list[str]:
    reports = manifest.get("reports") or {}
    if local:
        return ["Reports (files of this run):", *[f"  {name:<10} {path}" for name, path in local.items()], ""]
    if not reports:
        return []
    lines = [
        "Reports (beside the manifest):",
        f"  manifest   {manifest_key(manifest['supplier'], manifest['scan_id'])}",
    ]
    lines += [f"  {name:<10} {key}" for name, key in reports.items()]
    if links:
        hours = f" (links valid for {links_expire / 3600:g} h)" if links_expire else ""
        lines += ["", f"Download{hours}:"]
        lines += [f"  {name:<10} {url}" for name, url in links.items()]
    return [*lines, ""]


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def message_attributes(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """SNS attributes that subscription filter policies can select on (``firmware``: its verdict)."""
    fw = view.firmware(manifest)
    return {
        "supplier": {"DataType": "String", "StringValue": manifest["supplier"]},
        "scan_id": {"DataType": "String", "StringValue": manifest["scan_id"]},
        "status": {"DataType": "String", "StringValue": manifest["status"]},
        "verdict": {"DataType": "String", "StringValue": manifest["verdict"]},
        "review": {"DataType": "Number", "StringValue": str(manifest["summary"]["review"])},
        **({"firmware": {"DataType": "String", "StringValue": str(fw["verdict"])}} if fw else {}),
    }


# ------------------------------------------------------------------ firmware (issue 35)
def _firmware_head(manifest: Mapping[str, Any]) -> list[str]:
    """``Firmware:  wrong (router.bin)``: the pair's verdict beside the drop's."""
    fw = view.firmware(manifest)
    if fw is None:
        return []
    images = ", ".join(str(s.get("image")) for s in fw["images"])
    return [f"Firmware:  {fw.get('verdict')} ({images})"]


def _firmware_lines(manifest: Mapping[str, Any], limit: int) -> list[str]:
    """Per image: its binaries by status, those whose source the drop lacks (or holds in another
    version), the kernel and BusyBox checks, which source files are in the binaries."""
    fw = view.firmware(manifest)
    if fw is None:
        return []
    verdict = str(fw.get("verdict"))
    lines = [f"Firmware: {verdict} — {view.FIRMWARE_VERDICTS.get(verdict, verdict)}."]
    for section in fw["images"]:
        lines += _image_lines(manifest, section, limit)
    return [*lines, ""]


def _image_lines(manifest: Mapping[str, Any], section: Mapping[str, Any], limit: int) -> list[str]:
    counts = ", ".join(f"{n:,} {s}" for s, n in view.status_counts(section).items())
    total = int((section.get("summary") or {}).get("binaries") or len(section.get("binaries") or []))
    arch = section.get("arch") or "arch unknown"
    lines = [
        f"  {section.get('image')} ({int(section.get('size') or 0):,} bytes, {arch}, verdict "
        f"{section.get('verdict')}): {view.plural(total, 'binary', 'binaries')}"
        + (f": {counts}" if counts else "")
    ]
    if section.get("stopped"):
        lines.append(
            f"    Unpacking stopped: {_one_line(str(section['stopped']))} (what was found is listed)."
        )
    lines += [
        f"    Unreadable: {b['path']} ({b.get('format')}): {_one_line(str(b.get('reason')))}"
        for b in section.get("blobs") or []
        if b.get("status") == "unreadable"
    ]
    lines += _unmet_lines(manifest, view.unmet(section), limit)
    kernel = section.get("kernel")
    if isinstance(kernel, Mapping):
        lines += _kernel_lines(kernel, limit)
    busybox = section.get("busybox")
    if isinstance(busybox, Mapping):
        missing = list(busybox.get("not_configured") or [])
        said = f"{len(missing):,} not configured in the drop's .config: {', '.join(missing)}"
        lines.append(
            f"    BusyBox: {int(busybox.get('applets') or 0):,} applets; "
            + (said if missing else "every one configured in the drop's .config")
        )
    told = [c for c in section.get("components") or [] if c.get("counts")]
    if told:
        lines.append("    Source files in the binaries (told by their distinctive literals):")
        lines += [
            f"      {c.get('prefix')}: {int(c['counts'].get('true') or 0):,} in, "
            f"{int(c['counts'].get('false') or 0):,} not, "
            f"{int(c['counts'].get('none') or 0):,} cannot be told"
            for c in told
        ]
    return lines


def _unmet_lines(manifest: Mapping[str, Any], unmet: list[Mapping[str, Any]], limit: int) -> list[str]:
    """The binaries whose source the drop lacks or holds in another version: by package when they are
    more than ``limit``, then one by one (path, package and version, licence, what the drop has)."""
    if not unmet:
        return []
    lines = [f"    Binaries whose source the drop does not hold as built ({len(unmet):,}):"]
    shown = limit
    if len(unmet) > limit:
        for (status, name, has), n, first in _binary_groups(manifest, unmet)[:GROUP_LINES]:
            lines.append(f"      {status:<14} {name:<24} {n:>6,}  the drop has {has}; e.g. {first['path']}")
        shown = GROUP_LINES // 2
        lines.append(f"    The first {shown} of them:")
    for b in unmet[:shown]:
        licence = f", {b['license']}" if b.get("license") else ""
        lines.append(
            f"      {b.get('status'):<14} {b['path']}: {view.binary_name(b)}{licence}; "
            f"the drop has {view.drop_has(manifest, b)}"
        )
    if len(unmet) > shown:
        lines.append(f"      … and {len(unmet) - shown:,} more (see the manifest)")
    return lines


def _kernel_lines(kernel: Mapping[str, Any], limit: int) -> list[str]:
    facts = view.kernel_facts(kernel)
    lines = [f"    Kernel: {facts[0]}", *(f"            {fact}" for fact in facts[1:])]
    differences = kernel.get("option_differences") or {}
    lines += [f"              {view.option_difference(k, v)}" for k, v in list(differences.items())[:limit]]
    if len(differences) > limit:
        lines.append(f"              … and {len(differences) - limit:,} more options (see the manifest)")
    other = kernel.get("modules_other_release") or []
    lines += [f"              {p}" for p in other[:limit]]
    if len(other) > limit:
        lines.append(f"              … and {len(other) - limit:,} more modules (see the manifest)")
    return lines


def _binary_groups(
    manifest: Mapping[str, Any], found: list[Mapping[str, Any]]
) -> list[tuple[tuple[str, str, str], int, Mapping[str, Any]]]:
    """Binaries grouped by (status, package and version, what the drop has): count and first, in order."""
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for b in found:
        key = (str(b.get("status")), view.binary_name(b) if b.get("package") else "(unnamed)",
               view.drop_has(manifest, b))  # fmt: skip
        if key in groups:
            groups[key][0] += 1
        else:
            groups[key] = [1, b]
    return sorted(
        ((k, n, b) for k, (n, b) in groups.items()), key=lambda g: (view.status_rank(g[0][0]), -g[1], g[0])
    )

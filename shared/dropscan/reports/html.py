"""The static HTML report: one self-contained page (inline CSS, no script, nothing fetched) for lawyers."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dropscan import __version__
from dropscan.reports import changes, diffs, firmware_html, view
from dropscan.reports.licence_names import names_of
from dropscan.reports.view import ComponentView

#: one colour per class; the screenshot test looks for these in the class bars
CLASS_COLOURS: dict[str, str] = {
    "identical": "#2e7d32",
    "vcs-keywords": "#66bb6a",
    "whitespace": "#aed581",
    "empty": "#bdbdbd",
    "low-trust": "#00838f",
    "modified": "#ef6c00",
    "added": "#6a1b9a",
}
SEVERITY_COLOURS: dict[str, str] = {"action-required": "#c62828", "review": "#f9a825"}
VERDICT_COLOURS: dict[str, str] = {
    "clean": "#2e7d32",
    "review": "#f9a825",
    "action-required": "#c62828",
    "rejected": "#455a64",
    "failed": "#455a64",
}

CLASS_MEANING: dict[str, str] = {
    "identical": "byte-for-byte a file of a trusted upstream release",
    "vcs-keywords": "differs from an upstream file only in expanded version-control keywords ($Id$, …)",
    "whitespace": "differs from an upstream file only in line endings or trailing blanks",
    "empty": "zero length: no content, no evidence",
    "low-trust": "found only in a low-trust source (a collection anyone can publish to): not evidence",
    "modified": "changed by the supplier: the path exists upstream, the content differs",
    "added": "added by the supplier: no upstream counterpart",
}
SET_ASIDE = ("identical", "vcs-keywords", "whitespace", "empty")

#: rows per component's review list; a component with more is cut with a note (the manifest has them all)
REVIEW_ROWS = 5_000
FLAG_ROWS = 5_000
#: past those, a list is shown grouped (by folder, by distinct content, by kind of flag), then this many rows
GROUP_ROWS = 200
#: diffs shown per component and list (review set, backports); the manifest has them all
DIFF_FILES = 2_000

CSS = """
:root { --ink: #212121; --muted: #616161; --rule: #e0e0e0; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: var(--ink);
       margin: 0; background: #fafafa; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 32px 48px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 10px; border-bottom: 2px solid var(--rule); padding-bottom: 4px; }
h3 { font-size: 16px; margin: 20px 0 8px; }
p { margin: 6px 0 10px; max-width: 78ch; }
code, .path { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 13px; }
.path { overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: 3px 12px; border-radius: 4px; color: #fff; font-weight: 700;
         letter-spacing: .02em; }
.verdict { font-size: 18px; padding: 6px 16px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 12px 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
dl.classes { display: grid; grid-template-columns: max-content 1fr max-content 1fr; gap: 3px 14px;
             margin: 6px 0 12px; font-size: 14px; }
dl.classes dd { margin: 0; color: var(--muted); }
.tiles { display: flex; flex-wrap: wrap; gap: 12px; margin: 14px 0; }
.tile { border: 1px solid var(--rule); border-radius: 6px; padding: 8px 14px; min-width: 130px; }
.tile b { display: block; font-size: 22px; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 14px; }
th, td { text-align: left; vertical-align: top; padding: 5px 8px; border-bottom: 1px solid var(--rule); }
th { background: #f5f5f5; font-weight: 600; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.sev { width: 1%; white-space: nowrap; }
td.cls { white-space: nowrap; }
td.sev .badge { font-size: 12px; padding: 2px 8px; }
.evidence { font-family: "DejaVu Sans Mono", Menlo, monospace; font-size: 12.5px; background: #f5f5f5;
            padding: 1px 4px; border-radius: 3px; white-space: pre-wrap; word-break: break-word; }
.bar { display: flex; width: 100%; height: 26px; border-radius: 4px; overflow: hidden; margin: 8px 0 6px;
       background: #eee; }
.bar span { display: block; height: 100%; min-width: 3px; }
ul.legend { list-style: none; padding: 0; margin: 4px 0 12px; display: flex; flex-wrap: wrap; gap: 4px 18px; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px;
          vertical-align: -1px; }
.lic { display: block; }
section.component { margin-top: 28px; }
.ev { font-size: 13px; margin-top: 2px; }
footer { margin-top: 40px; padding-top: 10px; border-top: 1px solid var(--rule); color: var(--muted);
         font-size: 13px; }
@media print { body { background: #fff; } main { padding: 0; } tr { break-inside: avoid; }
               .bar, .badge, .swatch { print-color-adjust: exact; -webkit-print-color-adjust: exact; } }
"""


def e(value: Any) -> str:
    """Escape for text and attribute values: paths and evidence are the supplier's bytes."""
    return html.escape("" if value is None else str(value), quote=True)


def path(value: Any) -> str:
    """A path that may wrap after each slash."""
    return e(value).replace("/", "/<wbr>")


def badge(text: str, colour: str, cls: str = "badge") -> str:
    dark_text = colour in (SEVERITY_COLOURS["review"],)
    style = f"background:{colour}" + (";color:#212121" if dark_text else "")
    return f'<span class="{cls}" style="{style}">{e(text)}</span>'


def severity_badge(severity: str | None) -> str:
    label = {"action-required": "action required", "review": "review"}.get(severity or "", severity or "?")
    return badge(label, SEVERITY_COLOURS.get(severity or "", "#757575"))


def pct(n: int, total: int) -> str:
    return f"{100.0 * n / total:.1f} %" if total else "–"


def render(manifest: Mapping[str, Any], *, expand: bool = False) -> str:
    """The page; ``expand`` opens every diff (for printing, and the screenshot test)."""
    views = view.components(manifest)
    budget = diffs.Budget()
    title = f"dropscan audit — {manifest['supplier']}/{view.drop_name(manifest)}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title><style>{CSS}{diffs.style_css()}{_firmware_css(manifest)}</style></head>"
        "<body><main>",
        _header(manifest),
        changes.section(manifest),
        _method(manifest),
        _flags_section(manifest),
        *([fw] if (fw := firmware_html.section(manifest)) else []),
        *(_component(manifest, v, budget, expand) for v in views),
        *([cited] if (cited := _commits(manifest)) else []),
        _unreadable(views),
        _footer(manifest),
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------ header
def _header(m: Mapping[str, Any]) -> str:
    s = m.get("summary") or {}
    src = m.get("source") or {}
    classes = s.get("classes") or {}
    total = int(s.get("files") or 0)
    set_aside = sum(int(classes.get(c, 0)) for c in SET_ASIDE)
    verdict = str(m.get("verdict") or m.get("status") or "?")
    facts = [
        ("Supplier", e(m.get("supplier"))),
        ("Drop", f'<span class="path">{e(src.get("key"))}</span>'),
        ("Size", f"{int(src.get('size') or 0):,} bytes"),
        ("SHA-256", f"<code>{e(src.get('sha256') or '–')}</code>"),
        ("Scanned", e(m.get("finished_at") or m.get("created_at") or "–")),
        ("Status", e(m.get("status")) + (f" — {e(m['reason'])}" if m.get("reason") else "")),
    ]
    fw = view.firmware(m)
    if fw is not None:  # the pair's verdict: is the drop the source of what ships
        images = ", ".join(str(s.get("image")) for s in fw["images"])
        facts.append(
            (
                "Firmware",
                f'{firmware_html.verdict_badge(fw.get("verdict"))} <a href="#firmware">{e(images)}</a>',
            )
        )
    tiles = [(f"{total:,}", "files in the drop"), (f"{set_aside:,}", "set aside (upstream)")]
    if classes.get("low-trust"):
        tiles.append((f"{int(classes['low-trust']):,}", "low-trust matches"))
    tiles.append((f"{int(s.get('review') or 0):,}", f"to review ({float(s.get('review_pct') or 0):.1f} %)"))
    if s.get("backported"):
        tiles.append((f"{int(s['backported']):,}", "backported upstream fixes (not reviewed)"))
    if s.get("vendor_changed"):
        tiles.append(
            (
                f"{int(s['vendor_changed']):,}",
                view.plural(int(s["vendor_changed"]), "vendor-changed file").split(" ", 1)[1],
            )
        )
    if s.get("cleared"):
        tiles.append((f"{int(s['cleared']):,}", "cleared by earlier decisions"))
    if view.has_triage(m):
        counts = view.flag_counts(m)
        tiles += [(f"{counts['action-required']:,}", "red flags: action required")]
        tiles += [(f"{counts['review']:,}", "red flags: to review")]
    return "\n".join(
        [
            "<header>",
            f'<h1>Source drop audit: <span class="path">{e(view.drop_name(m))}</span></h1>',
            f"<p>Verdict: {badge(verdict, VERDICT_COLOURS.get(verdict, '#455a64'), 'badge verdict')}</p>",
            '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>",
            '<div class="tiles">' + "".join(f'<div class="tile"><b>{n}</b>{e(t)}</div>' for n, t in tiles),
            "</div>",
            _bar({c: int(classes.get(c, 0)) for c in view.CLASSES}) if total else "",
            *([f'<p class="limit"><strong>{e(note)}</strong></p>'] if (note := view.limit_note(m)) else []),
            "</header>",
        ]
    )


# ------------------------------------------------------------------ method
def _method(m: Mapping[str, Any]) -> str:
    out = [
        '<section id="method"><h2>Method</h2>',
        "<p>dropscan compares every file of the drop with the published releases of the open-source "
        "projects it contains (the <em>trust-upstream</em> method). Each file is fingerprinted with "
        "SHA-256; a file whose fingerprint equals that of a file in a trusted upstream release is, byte "
        "for byte, the upstream authors' published file: it comes under the upstream release's licence and "
        "needs no review of its own, so it is set aside. Files that differ from an upstream file only in "
        "expanded version-control keywords or in whitespace are set aside the same way. What remains — "
        "files the supplier changed (<em>modified</em>) or added (<em>added</em>) — is the review set "
        "below, scanned for licence statements and red flags.</p>",
        "<p>The upstream releases are taken from the projects' published release archives and are trusted "
        "at <em>high</em> level. A source marked <em>low</em> trust, such as a large collection that anyone "
        "can publish to, can only explain a file as a low-trust match: such matches are shown but never "
        "set a file aside.</p>",
    ]
    releases = view.trusted_releases(m)
    if releases:
        out.append("<h3>Upstream releases the components were matched against</h3>")
        out.append(
            "<table><tr><th>Folder in the drop</th><th>Upstream release</th><th>Trust</th>"
            '<th>Upstream licence</th><th class="num">Files identical to it</th></tr>'
        )
        for r in releases:
            match = f"{float(r['match_pct']):.1f} %" if r.get("match_pct") is not None else "–"
            licence = _named(r["license"]) if r["license"] else e(_unknown(r))
            out.append(
                f'<tr><td class="path">{path(r["prefix"] or "(top level)")}</td><td>{e(r["release"])}</td>'
                f"<td>{e(r['trust'] or 'not recorded')}</td><td>{licence}</td>"
                f'<td class="num">{match}</td></tr>'
            )
        out.append("</table>")
    else:
        out.append("<p>No component of this drop was identified as an upstream release.</p>")
    low = view.low_trust_packages(m)
    if low:
        out.append(f"<p>Low-trust sources with matches: {e(', '.join(low))}.</p>")
    if view.has_evidence(m):
        out.append(_evidence_method())
    out.append('<h3>File classes</h3><dl class="classes">')
    for cls in view.CLASSES:
        out.append(
            f'<dt><span class="swatch" style="background:{CLASS_COLOURS[cls]}"></span>{e(cls)}</dt>'
            f"<dd>{e(CLASS_MEANING[cls])}</dd>"
        )
    out.append("</dl>")
    triage = m.get("triage")
    if isinstance(triage, Mapping):
        out.append(
            f"<p>Licence statements and red flags: {e(triage.get('detector') or 'detector not recorded')}, "
            f"{view.plural(int(triage.get('files') or 0), 'file')} examined"
            + (f" in {view.duration(float(triage['seconds']))}" if triage.get("seconds") is not None else "")
            + ".</p>"
        )
    elif not view.has_triage(m):
        out.append(
            "<p><strong>This manifest carries no licence triage:</strong> the review set was not scanned "
            "for licence statements or red flags.</p>"
        )
    out.append("</section>")
    return "\n".join(out)


def _unknown(release: Mapping[str, Any]) -> str:
    return "licence unknown" if release.get("license_unknown") else "not recorded"


# ------------------------------------------------------------------ flags
def _flag_groups(found: Sequence[Mapping[str, Any]]) -> str:
    head = '<tr><th>Severity</th><th>Kind</th><th class="num">Files</th><th>For example</th>'
    head += "<th>What it means</th></tr>"
    rows = [f'<table class="flag-groups">{head}']
    for (severity, kind, detail), n, first in view.group_flags(found)[:GROUP_ROWS]:
        rows.append(
            f'<tr><td class="sev">{severity_badge(severity)}</td><td>{e(kind)}</td><td class="num">{n:,}</td>'
            f'<td class="path">{path(view.flag_location(first))}</td><td>{e(detail)}</td></tr>'
        )
    rows.append("</table>")
    return "\n".join(rows)


def _flag_table(found: Sequence[Mapping[str, Any]]) -> str:
    head = '<tr><th>Severity</th><th>Kind</th><th>File</th><th class="num">Line</th><th>Evidence</th>'
    head += "<th>What it means</th></tr>"
    rows = [f'<table class="flags">{head}']
    limit = FLAG_ROWS
    if len(found) > FLAG_ROWS:  # beyond reading: by kind, then the first few
        rows.insert(0, _flag_groups(found) + f"<p>The first {GROUP_ROWS:,} of {len(found):,}:</p>")
        limit = GROUP_ROWS
    for f in found[:limit]:
        rows.append(
            f'<tr class="flag {e(f.get("severity"))}">'
            f'<td class="sev">{severity_badge(f.get("severity"))}</td>'
            f'<td>{e(f.get("kind"))}</td><td class="path">{path(f.get("path"))}{_unshipped_note(f)}</td>'
            f'<td class="num">{e(f.get("line") or "–")}</td>'
            f'<td><span class="evidence">{e(f.get("evidence") or "")}</span></td>'
            f"<td>{e(f.get('detail') or '')}</td></tr>"
        )
    rows.append("</table>")
    if len(found) > limit:
        rows.append(f"<p>… and {len(found) - limit:,} more red flags: see manifest.json.</p>")
    return "\n".join(rows)


def _flags_section(m: Mapping[str, Any]) -> str:
    out = ['<section id="flags"><h2>Red flags</h2>']
    if not view.has_triage(m):
        out.append("<p>Not checked: this manifest predates licence triage.</p>")
    else:
        found = view.flags(m)
        counts = view.flag_counts(m)
        if not found:
            out.append("<p>No red flags were raised.</p>")
        else:
            out.append(
                f"<p>{counts['action-required']:,} need action before the product ships; "
                f"{counts['review']:,} need a reviewer's judgement. Most severe first.</p>"
            )
            out.append(_flag_table(found))
    out.append("</section>")
    return "\n".join(out)


# ------------------------------------------------------------------ components
def _bar(classes: Mapping[str, int]) -> str:
    total = sum(classes.values())
    label = ", ".join(f"{n:,} {c}" for c, n in classes.items() if n)
    spans = "".join(
        f'<span style="flex:{n} 1 0px;background:{CLASS_COLOURS[c]}" title="{e(c)}: {n:,}"></span>'
        for c, n in classes.items()
        if n
    )
    legend = "".join(
        f'<li><span class="swatch" style="background:{CLASS_COLOURS[c]}"></span>{e(c)} '
        f'<b>{n:,}</b> <span class="muted">({pct(n, total)})</span></li>'
        for c, n in classes.items()
        if n
    )
    return (
        f'<div class="bar" role="img" aria-label="{e(label)}">{spans}</div><ul class="legend">{legend}</ul>'
    )


def _named(expression: str) -> str:
    """A licence expression, then what its ids mean to a reader (ScanCode's own ids explained)."""
    names = names_of(expression)
    return e(expression) + (f' <span class="muted">({e(names)})</span>' if names else "")


def _findings(f: Mapping[str, Any]) -> str:
    items = []
    for lic in view.licence_findings(f):
        text = f' <span class="evidence">{e(lic["text"])}</span>' if lic.get("text") else ""
        name = names_of(str(lic["expression"]))
        named = f' <span class="muted">{e(name)}</span>' if name else ""
        items.append(f'<span class="lic"><b>{e(view.finding_label(lic))}</b>{named}{text}</span>')
    return "".join(items)


def _review_groups(files: Sequence[Mapping[str, Any]]) -> str:
    """A review set beyond reading: its folders and its distinct contents, largest first."""
    out = []
    for title, groups, first in (
        ("by folder", view.by_folder(files), "Folder"),
        ("by distinct content", view.by_content(files), "Content (SHA-256), e.g."),
    ):
        out.append(f"<h3>Files to review {title} ({len(groups):,})</h3>")
        out.append(
            f'<table class="groups"><tr><th>{e(first)}</th><th class="num">Files</th><th>Classes</th>'
            "<th>Licence statements found (files)</th></tr>"
        )
        for g in groups[:GROUP_ROWS]:
            name = path(g.key) if title == "by folder" else f"<code>{e(g.key[:16])}…</code> {path(g.example)}"
            classes = ", ".join(f"{n:,} {c}" for c, n in sorted(g.classes.items()))
            stated = ", ".join(f"{x} ({n:,})" for x, n in g.licences.items()) or "none"
            out.append(
                f'<tr><td class="path">{name}</td><td class="num">{g.files:,}</td><td>{e(classes)}</td>'
                f"<td>{e(stated)}</td></tr>"
            )
        out.append("</table>")
        if len(groups) > GROUP_ROWS:
            out.append(f"<p>… and {len(groups) - GROUP_ROWS:,} more: see manifest.json.</p>")
    return "\n".join(out)


def _review_table(
    files: Sequence[Mapping[str, Any]],
    flagged: Mapping[str, list[str]],
    triaged: bool,
    limit: int = REVIEW_ROWS,
) -> str:
    head = '<tr><th>File</th><th>Class</th><th>Kind</th><th class="num">Size</th>'
    head += "<th>Licence statements found</th><th>Red flags</th></tr>" if triaged else "</tr>"
    rows = [f'<table class="review">{head}']
    for f in files[:limit]:
        colour = CLASS_COLOURS.get(f["class"], "#757575")
        cells = (
            f'<td class="path">{path(f["path"])}{_evidence_note(f)}{_in_binary_note(f)}</td>'
            f'<td class="cls"><span class="swatch" style="background:{colour}"></span>'
            f"{e(f['class'])}</td><td>{e(f.get('kind'))}</td>"
            f'<td class="num">{int(f.get("size") or 0):,}</td>'
        )
        if triaged:
            found = _findings(f) or '<span class="muted">none</span>'
            cells += f"<td>{found}</td><td>{e(', '.join(flagged.get(f['path'], [])))}</td>"
        rows.append(f"<tr>{cells}</tr>")
    rows.append("</table>")
    if len(files) > limit:
        rows.append(f"<p>… and {len(files) - limit:,} more files to review: see manifest.json.</p>")
    return "\n".join(rows)


def _evidence_note(f: Mapping[str, Any]) -> str:
    """Under a review file's path: how it differs from upstream (with a link to its diff), or for an
    added file the upstream file it is close to."""
    ev = view.evidence(f)
    if ev is not None and f["class"] == "modified":
        link = f' <a href="#{diffs.file_anchor(str(f["path"]))}">diff</a>' if ev.get("patch") else ""
        against = f" against {e(view.base_label(ev['base']))}" if ev.get("base") else ""
        error = f" — no diff: {e(ev['error'])}" if ev.get("error") else ""
        return f'<div class="ev">{diffs.origin_badge(ev)} {diffs.stat(ev)}{against}{error}{link}</div>'
    similar = f.get("similar")
    if isinstance(similar, Mapping) and f["class"] == "added":
        return f'<div class="ev muted">{e(view.similar_label(similar))}</div>'
    return ""


def _in_binary_note(f: Mapping[str, Any]) -> str:
    """Under a file's path: whether the firmware's binaries hold it (``in_binary``), when that was told."""
    label = view.in_binary_label(f)
    return f'<div class="ev muted in-binary">{e(label)}</div>' if label else ""


def _unshipped_note(f: Mapping[str, Any]) -> str:
    """Under a flag's path: its file is in no binary of the firmware (``shipped: false``)."""
    return '<div class="ev muted unshipped">not in the firmware</div>' if view.unshipped(f) else ""


def _firmware_css(m: Mapping[str, Any]) -> str:
    return firmware_html.CSS if view.firmware(m) is not None else ""


def _diff_list(files: Sequence[Mapping[str, Any]], budget: diffs.Budget, expand: bool) -> str:
    with_diff = sorted((f for f in files if view.evidence(f) is not None), key=lambda f: str(f["path"]))
    out = [diffs.details(f, view.evidence(f) or {}, budget, expand=expand) for f in with_diff[:DIFF_FILES]]
    if len(with_diff) > DIFF_FILES:
        out.append(f"<p>… and {len(with_diff) - DIFF_FILES:,} more diffs: see manifest.json.</p>")
    return "\n".join(out)


def _baseline(c: Mapping[str, Any]) -> str:
    b = view.baseline(c)
    if b is None:
        return ""
    parts = [e(view.baseline_name(c))]
    if b.get("added"):
        parts.append(e(view.plural(int(b["added"]), "added file")))
    commits = len(b.get("commits") or [])
    cited = f", citing {view.plural(commits, 'upstream commit')}" if commits else ""
    return f'<p class="baseline">Baseline: <b>{" + ".join(parts)}</b>{cited}.</p>'


def _changes(v: ComponentView, budget: diffs.Budget, expand: bool) -> list[str]:
    """The diffs of the review set's modified files, then the backports (nothing without evidence)."""
    out = []
    changed = [f for f in v.review if f["class"] == "modified" and view.evidence(f) is not None]
    if changed:
        out.append(f"<h3>Changes against upstream ({len(changed):,} files)</h3>")
        out.append(_diff_list(changed, budget, expand))
    if v.backports:
        out += [
            f"<h3>Backported upstream fixes ({len(v.backports):,})</h3>",
            "<p>Modified files whose every change upstream published itself, in the commits cited: upstream "
            "code under the trust-upstream method, listed for the record and not part of the review set.</p>",
            _diff_list(v.backports, budget, expand),
        ]
    return out


def _commits(m: Mapping[str, Any]) -> str:
    """The upstream commits the diffs cite, each with an anchor the hunk labels link to."""
    commits = view.cited_commits(m)
    if not commits:
        return ""
    rows = "".join(
        f'<tr id="{diffs.commit_anchor(str(sha))}"><td><code>{e(sha)}</code></td>'
        f"<td>{e(c.get('release') or 'not in a release')}</td><td>{e(c.get('date') or '–')}</td>"
        f"<td>{e(c.get('subject') or '')}</td></tr>"
        for sha, c in sorted(commits.items(), key=lambda kv: (str(kv[1].get("date") or ""), kv[0]))
    )
    return (
        '<section id="commits"><h2>Upstream commits cited</h2><p>Changes found in the drop that upstream '
        "published in these commits (first release holding each).</p>"
        f"<table><tr><th>Commit</th><th>First release</th><th>Date</th><th>Subject</th></tr>{rows}</table>"
        "</section>"
    )


def _evidence_method() -> str:
    return (
        "<p>Each modified file is diffed against its nearest upstream state (the same path in the matched "
        "release, or the commit of the package's history it is closest to). A change that upstream "
        "published itself, the same lines removed and added in a commit of its history, is marked "
        '<span class="origin upstream">upstream</span> and cites the commit; any other change is a '
        '<span class="origin vendor">vendor change</span>; a change of keywords or whitespace only is '
        "noise. A file whose changes are all upstream's is a <em>backport</em>: upstream code, counted "
        "apart from the review set.</p>"
    )


def _component(m: Mapping[str, Any], v: ComponentView, budget: diffs.Budget, expand: bool = False) -> str:
    c = v.data
    heading = v.name if c.get("identified") else f"{v.name} — not identified"
    facts = [f'Folder <span class="path">{e(v.prefix or "(top level)")}</span>']
    if c.get("identified"):
        facts.append(f"{float(c.get('match_pct') or 0):.1f} % of its files identical to the release")
    if v.trust:
        facts.append(f"{e(v.trust)} trust")
    if v.licence:
        origin = "licence" if c.get("license_source") == "drop" else "upstream licence"
        facts.append(f"{origin} <b>{_named(v.licence)}</b>")
    elif v.licence_unknown:
        facts.append(f'<b>licence unknown</b> <span class="muted">({e(v.licence_unknown)})</span>')
    out = [
        f'<section class="component"><h2>{e(heading)}</h2>',
        f"<p>{' · '.join(facts)} · {int(c.get('files') or 0):,} files</p>",
        *([line] if (line := _baseline(c)) else []),
        _bar(v.classes),
    ]
    if not c.get("identified"):
        out.append(
            "<p>No trusted upstream release explains enough of this folder: every file in it that is not "
            "empty is in the review set.</p>"
        )
    triaged = view.has_triage(m)
    if v.flags:
        out.append(f"<h3>Red flags ({len(v.flags):,})</h3>")
        out.append(_flag_table(v.flags))
    flagged: dict[str, list[str]] = {}
    for f in v.flags:
        flagged.setdefault(str(f.get("path")), []).append(str(f.get("kind")))
    if v.review:
        limit = REVIEW_ROWS
        if len(v.review) > REVIEW_ROWS:  # beyond reading: grouped, then the first files
            out.append(_review_groups(v.review))
            limit = GROUP_ROWS
        out.append(f"<h3>Files to review ({len(v.review):,})</h3>")
        # flagged files first: they are what the reader acts on
        ordered = sorted(v.review, key=lambda f: (f["path"] not in flagged, f["path"]))
        out.append(_review_table(ordered, flagged, triaged, limit))
    else:
        out.append("<p>Nothing to review in this component.</p>")
    out += _changes(v, budget, expand)
    missing = c.get("missing") or []
    if missing:
        out.append(
            f"<details><summary>{len(missing):,} file{'s' if len(missing) != 1 else ''} of the upstream "
            "release absent from the drop</summary><ul>"
            + "".join(f'<li class="path">{path(p)}</li>' for p in missing[:REVIEW_ROWS])
            + "</ul></details>"
        )
    out.append("</section>")
    return "\n".join(out)


def _unreadable(views: Iterable[ComponentView]) -> str:
    files = [f for v in views for f in v.unreadable]
    if not files:
        return ""
    rows = "".join(
        f'<tr><td class="path">{path(f["path"])}</td><td>{e(f["unreadable"])}</td></tr>' for f in files
    )
    return (
        '<section id="unreadable"><h2>Unreadable files</h2><p>Nested archives that could not be opened: '
        "their content was not examined.</p>"
        f"<table><tr><th>File</th><th>Why</th></tr>{rows}</table></section>"
    )


def _footer(m: Mapping[str, Any]) -> str:
    return (
        f"<footer>Scan <code>{e(m.get('scan_id'))}</code> · manifest {e(m.get('schema'))} written by "
        f"{e(m.get('generator') or 'dropscan')} · this report by dropscan {e(__version__)}. "
        "manifest.json beside this report is the source of truth.</footer>"
    )

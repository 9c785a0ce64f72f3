"""The HTML report's opening section: what changed since the supplier's last drop of the product, and
what earlier decisions cleared or re-opened. Kept apart from html.py, which renders the rest."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

#: paths listed per kind before the list is folded
ROWS = 500


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _paths(label: str, paths: Sequence[str]) -> str:
    if not paths:
        return ""
    items = "".join(f'<li class="path">{_e(p)}</li>' for p in paths[:ROWS])
    more = f"<li>… and {len(paths) - ROWS:,} more: see manifest.json</li>" if len(paths) > ROWS else ""
    opened = " open" if len(paths) <= 50 else ""
    return f"<details{opened}><summary>{len(paths):,} {label}</summary><ul>{items}{more}</ul></details>"


def section(m: Mapping[str, Any]) -> str:
    """``<section id="changes">``, or nothing for a first drop without decisions."""
    d = m.get("delta")
    s = m.get("summary") or {}
    decided = s.get("decisions") or {}
    if not d and not s.get("cleared") and not any(decided.values()):
        return ""
    out = ['<section id="changes">']
    if d:
        prev = d["previous"]
        name = prev.get("version") or str(prev.get("key", "")).rsplit("/", 1)[-1]
        out.append(f"<h2>What changed since the last drop ({_e(name)})</h2>")
        out.append(
            f"<p>Compared with scan <code>{_e(prev['scan_id'])}</code> of "
            f'<span class="path">{_e(prev["key"])}</span>, finished {_e(prev.get("finished_at") or "–")}: '
            f"{len(d['new']):,} new, {len(d['changed']):,} changed and {len(d['removed']):,} removed "
            "files (paths compared inside their component).</p>"
        )
        out += [_paths(k, d[k]) for k in ("new", "changed", "removed")]
    else:
        out.append("<h2>Earlier decisions</h2>")
    if s.get("cleared") or any(decided.values()):
        out.append(
            f"<p>{int(s.get('cleared') or 0):,} files of the review set were cleared by decisions an "
            f"auditor recorded on their content earlier; {int(decided.get('needs-action') or 0):,} "
            f"need action, {int(decided.get('rejected') or 0):,} were rejected, "
            f"{int(decided.get('reopened') or 0):,} decisions were re-opened because the file now carries "
            "a red flag or licence they did not see.</p>"
        )
        reopened = [f for f in m.get("files") or [] if (f.get("decision") or {}).get("reopened")]
        if reopened:
            rows = "".join(
                f'<tr><td class="path">{_e(f["path"])}</td><td>{_e(f["decision"]["verdict"])} by '
                f"{_e(f['decision']['by'])}</td><td>{_e(f['decision'].get('reopen_reason', ''))}</td></tr>"
                for f in reopened[:ROWS]
            )
            out.append(f"<table><tr><th>Re-opened</th><th>Decision</th><th>Why</th></tr>{rows}</table>")
    out.append("</section>")
    return "\n".join(out)

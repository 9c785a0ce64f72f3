"""The firmware part of the HTML report (issue 35): per image, its binaries with their status and the
evidence for it, the kernel and BusyBox checks, which source files of the drop are in the binaries.
Every path and string here comes from the supplier's image: all of it is escaped."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from dropscan.reports import view
from dropscan.reports.licence_names import names_of

#: one colour per binary status, none of them another of the page's; the screenshot test looks for them
STATUS_COLOURS: dict[str, str] = {
    "wrong-version": "#a4161a",
    "source-missing": "#e65100",
    "unknown": "#5d4037",
    "corresponds": "#1e6b24",
    "no-obligation": "#546e7a",
}
VERDICT_COLOURS: dict[str, str] = {"complete": "#1e6b24", "incomplete": "#e65100", "wrong": "#a4161a"}
#: rows of an image's binary table; the manifest has them all
BINARY_ROWS = 5_000

CSS = """
table.binaries td { font-size: 13.5px; }
table.binaries td:first-child { width: 34%; }
td.status { white-space: nowrap; }
td.status .ev { white-space: normal; }
td.status .badge, ul.statuses .badge { font-size: 12px; padding: 2px 8px; }
ul.statuses { list-style: none; padding: 0; margin: 6px 0 12px; display: flex; flex-wrap: wrap;
              gap: 6px 18px; }
section.image { margin-top: 18px; }
ul.kernel { margin: 4px 0 10px; padding-left: 20px; }
"""


def e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def path(value: Any) -> str:
    """An image path that may wrap after each slash and at the ``!`` between a blob and its file."""
    return e(value).replace("/", "/<wbr>").replace("!", "!<wbr>")


def badge(text: str, colour: str, cls: str = "badge") -> str:
    return f'<span class="{cls}" style="background:{colour}">{e(text)}</span>'


def verdict_badge(verdict: Any, cls: str = "badge") -> str:
    return badge(str(verdict), VERDICT_COLOURS.get(str(verdict), "#455a64"), cls)


def status_badge(status: Any) -> str:
    return badge(str(status), STATUS_COLOURS.get(str(status), "#757575"))


def section(manifest: Mapping[str, Any]) -> str:
    """The ``firmware`` section of the page; empty for a manifest without an image."""
    fw = view.firmware(manifest)
    if fw is None:
        return ""
    verdict = str(fw.get("verdict"))
    out = [
        '<section id="firmware"><h2>Firmware</h2>',
        f"<p>Verdict for the drop and its firmware: {verdict_badge(verdict)} "
        f"{e(view.FIRMWARE_VERDICTS.get(verdict, ''))}.</p>",
        "<p>Each binary of the image is matched to the component of the drop it states (BusyBox's version "
        "string, the Linux banner, a module's vermagic) or whose distinctive string literals it holds; a "
        "binary no component explains is named by its SONAME or program name, with that package's licence. "
        f"{status_badge('corresponds')} the drop holds its source, of the version it states; "
        f"{status_badge('wrong-version')} the drop holds another version; {status_badge('source-missing')} "
        f"a copyleft licence and no source in the drop; {status_badge('no-obligation')} a licence that asks "
        f"for no source; {status_badge('unknown')} not identified. Evidence: <em>identifier</em> (the "
        "binary states package and version), <em>literals</em> (it holds the component's distinctive "
        "literals), <em>upstream-literals</em> (those an upstream release recorded), <em>soname</em> (its "
        "SONAME or program name), <em>gconv</em> (a glibc gconv module).</p>",
    ]
    out += [_image(manifest, s) for s in fw["images"]]
    out.append("</section>")
    return "\n".join(out)


def _image(manifest: Mapping[str, Any], s: Mapping[str, Any]) -> str:
    blobs = s.get("blobs") or []
    unreadable = [b for b in blobs if b.get("status") == "unreadable"]
    files = int((s.get("summary") or {}).get("files") or 0)
    facts = [
        ("Verdict", verdict_badge(s.get("verdict"))),
        ("Size", f"{int(s.get('size') or 0):,} bytes"),
        ("Architecture", e(s.get("arch") or "unknown")),
        (
            "Unpacked",
            f"{len(blobs) - len(unreadable):,} blobs, {files:,} files"
            + (f"; <b>{len(unreadable):,} unreadable</b>" if unreadable else ""),
        ),
    ]
    if s.get("stopped"):
        facts.append(("Stopped", f"<b>{e(s['stopped'])}</b> (what was found is listed)"))
    counts = "".join(f"<li>{status_badge(st)} <b>{n:,}</b></li>" for st, n in view.status_counts(s).items())
    out = [
        f'<section class="image"><h3>Image <span class="path">{path(s.get("image"))}</span></h3>',
        '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>",
        f'<ul class="statuses">{counts}</ul>',
    ]
    kernel = s.get("kernel")
    if isinstance(kernel, Mapping):
        out.append(_kernel(kernel))
    busybox = s.get("busybox")
    if isinstance(busybox, Mapping):
        missing = list(busybox.get("not_configured") or [])
        said = (
            f"{len(missing):,} not configured in the drop's .config: <b>{e(', '.join(missing))}</b>"
            if missing
            else "every one configured in the drop's .config"
        )
        out.append(
            f'<h4>BusyBox</h4><p><span class="path">{path(busybox.get("path"))}</span>: '
            f"{int(busybox.get('applets') or 0):,} applets; {said}.</p>"
        )
    out.append(_files(s))
    out.append(_binaries(manifest, s))
    if blobs:
        out.append(_blobs(blobs))
    out.append("</section>")
    return "\n".join(out)


def _kernel(kernel: Mapping[str, Any]) -> str:
    facts = "".join(f"<li>{e(fact)}</li>" for fact in view.kernel_facts(kernel))
    out = [f'<h4>Kernel</h4><ul class="kernel">{facts}</ul>']
    differences = kernel.get("option_differences") or {}
    if differences:
        rows = "".join(
            f"<tr><td><code>{e(option)}</code></td><td>{e(view.option_value(v[0]))}</td>"
            f"<td>{e(view.option_value(v[1]))}</td><td>{e(v[2] if len(v) > 2 else '')}</td></tr>"
            for option, v in differences.items()
        )
        out.append(
            '<table class="options"><tr><th>Option</th><th>In the image</th><th>In the drop\'s .config</th>'
            f"<th>Image side from</th></tr>{rows}</table>"
        )
    other = kernel.get("modules_other_release") or []
    if other:
        out.append(
            "<p>Modules built for another kernel release:</p><ul>"
            + "".join(f'<li class="path">{path(p)}</li>' for p in other[:BINARY_ROWS])
            + "</ul>"
        )
    return "\n".join(out)


def _files(s: Mapping[str, Any]) -> str:
    told = [c for c in s.get("components") or [] if c.get("counts")]
    if not told:
        return ""
    rows = "".join(
        f'<tr><td class="path">{path(c.get("prefix"))}</td>'
        f'<td class="num">{int(c.get("binaries") or 0):,}</td>'
        f'<td class="num">{int(c["counts"].get("true") or 0):,}</td>'
        f'<td class="num">{int(c["counts"].get("false") or 0):,}</td>'
        f'<td class="num">{int(c["counts"].get("none") or 0):,}</td></tr>'
        for c in told
    )
    return (
        "<h4>Source files in the binaries</h4><p>Each C file of a component told by its literals no other "
        "file of the drop has: one of them in the component's binaries, the file is in; two or more, all "
        "absent, it is not. A red flag in a file that is not in is marked <em>not in the firmware</em>.</p>"
        '<table class="in-binary"><tr><th>Component</th><th class="num">Binaries</th><th class="num">In</th>'
        f'<th class="num">Not in</th><th class="num">Cannot be told</th></tr>{rows}</table>'
    )


def _binaries(manifest: Mapping[str, Any], s: Mapping[str, Any]) -> str:
    found = view.binaries(s)
    head = (
        "<tr><th>File in the image</th><th>Arch</th><th>Package</th><th>Version</th><th>Licence</th>"
        "<th>Component of the drop</th><th>Status</th><th>Evidence</th></tr>"
    )
    rows = [f"<h4>Binaries ({len(found):,})</h4>", f'<table class="binaries">{head}']
    for b in found[:BINARY_ROWS]:
        status = str(b.get("status"))
        has = ""
        if status not in view.SATISFIED:
            has = f'<div class="ev muted">the drop has {e(view.drop_has(manifest, b))}</div>'
        licence = str(b.get("license") or "")
        named = f' title="{e(names_of(licence))}"' if licence and names_of(licence) else ""
        rows.append(
            f'<tr class="binary {e(status)}"><td class="path">{path(b.get("path"))}</td>'
            f"<td>{e(b.get('arch') or '–')}</td><td>{e(b.get('package') or '–')}</td>"
            f"<td>{e(b.get('version') or '–')}</td><td{named}>{e(licence or '–')}</td>"
            f'<td class="path">{path(b.get("component") or "–")}</td>'
            f'<td class="status">{status_badge(status)}{has}</td>'
            f"<td>{e(view.binary_evidence(b))}</td></tr>"
        )
    rows.append("</table>")
    if len(found) > BINARY_ROWS:
        rows.append(f"<p>… and {len(found) - BINARY_ROWS:,} more binaries: see manifest.json.</p>")
    return "\n".join(rows)


def _blobs(blobs: list[Mapping[str, Any]]) -> str:
    rows = "".join(
        f'<tr><td class="path">{path(b.get("path"))}</td><td>{e(b.get("format"))}</td>'
        f'<td class="num">{int(b.get("offset") or 0):#x}</td><td class="num">{int(b.get("size") or 0):,}</td>'
        f"<td>{e(b.get('detail') or '')}</td><td>{e(b.get('status'))}</td>"
        f"<td>{e(b.get('reason') or '')}</td></tr>"
        for b in blobs
    )
    return (
        f"<details><summary>{len(blobs):,} blobs found in the image</summary>"
        '<table class="blobs"><tr><th>Blob</th><th>Format</th><th class="num">Offset</th>'
        f'<th class="num">Size</th><th>Detail</th><th>Status</th><th>Why</th></tr>{rows}</table></details>'
    )

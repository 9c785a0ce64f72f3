"""What the audit remembers, on the command line: ``decide``, ``decisions list|export|import`` and
``history``. Decisions are written with the caller's credentials (on AWS: the stack's ComplianceRole)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dropscan.cli.common import target_of
from dropscan.models import SCOPES, VERDICTS, Decision


def _fail(message: str) -> int:
    print(f"dropscan: error: {message}", file=sys.stderr)
    return 2


def _merge_into(client: Any, incoming: list[Decision]) -> dict[str, int]:
    from dropscan.audit.decision_rules import merge

    merged = merge(client.existing_decisions(incoming), incoming)
    client.write_decisions(merged.write)
    return merged.counts()


# ------------------------------------------------------------------ decide
def cmd_decide(a: argparse.Namespace) -> int:
    from dropscan.audit.decision_rules import DecisionError, record
    from dropscan.reports import ManifestError, load_manifest
    from dropscan.store.scans import now

    if not a.path and not a.all_review:
        return _fail("name the files: --path PATH (repeatable) or --all-review")
    try:
        manifest = load_manifest(Path(a.manifest).expanduser())
        decided = record(
            manifest,
            paths=a.path,
            all_review=a.all_review,
            verdict=a.verdict,
            by=a.by,
            at=now(),
            note=a.note or "",
            scope=a.scope,
        )
    except (ManifestError, DecisionError) as e:
        return _fail(str(e))
    with target_of(a, upstream=False) as (client, _, _):
        counts = _merge_into(client, decided)
    print(json.dumps({"decisions": len(decided), "verdict": a.verdict, "scope": a.scope} | counts))
    return 0


# ------------------------------------------------------------------ decisions list | export | import
def _selected(client: Any, supplier: str | None, scope: str | None) -> Iterable[Decision]:
    """Every decision, or those a supplier's drops see (its own and global ones), or one scope."""
    if supplier:
        scopes = [scope] if scope else ["supplier", "global"]
        return [d for s in scopes for d in client.decisions.of_scope(s, supplier)]
    if scope == "global":
        return list(client.decisions.of_scope("global"))
    return [d for d in client.decisions.all() if scope is None or d.scope == scope]


def cmd_decisions(a: argparse.Namespace) -> int:
    from dropscan.audit.decision_rules import DecisionError, export_text, parse_export
    from dropscan.store.scans import now

    if a.decisions_command == "import":
        path = Path(a.file).expanduser()
        if not path.is_file():
            return _fail(f"no such file: {path}")
        try:
            incoming = parse_export(path.read_text())
        except DecisionError as e:
            return _fail(f"{path}: {e}")
        with target_of(a, upstream=False) as (client, _, _):
            counts = _merge_into(client, incoming)
        print(json.dumps({"decisions": len(incoming)} | counts))
        return 0
    with target_of(a, upstream=False) as (client, _, _):
        found = sorted(_selected(client, a.supplier, a.scope), key=lambda d: (d.scope_key, d.subject))
    if a.decisions_command == "export":
        Path(a.file).expanduser().write_text(export_text(found, exported_at=now()))
        print(json.dumps({"decisions": len(found), "file": a.file}))
    elif a.json:
        print(json.dumps([d.to_json() for d in found], indent=1))
    else:
        for d in found:
            note = f"  — {d.note}" if d.note else ""
            print(f"{d.scope_key:<24} {d.verdict:<12} {d.at}  {d.by:<16} {d.subject[:19]}…  {d.path}{note}")
        print(f"{len(found):,} decision{'s' if len(found) != 1 else ''}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------ history
def cmd_history(a: argparse.Namespace) -> int:
    with target_of(a, upstream=False) as (client, _, _):
        scans = client.history(a.supplier, a.product)
    if a.json:
        print(json.dumps(scans, indent=1, default=str))
        return 0
    if not scans:
        print(f"no scans of {a.supplier}/{a.product}", file=sys.stderr)
        return 1
    print(
        f"{'finished':<26} {'drop':<40} {'verdict':<16} {'files':>7} {'review':>7} {'cleared':>7}"
        f" {'new':>6} {'changed':>7} {'removed':>7}"
    )
    for s in scans:
        o = s.get("outcome") or {}

        def n(k: str, o: dict[str, Any] = o) -> str:
            return f"{int(o[k]):,}" if k in o else "-"

        drop = str(s["key"]).rsplit("/", 1)[-1]
        print(
            f"{s.get('finished_at') or s['status']:<26} {drop:<40} {o.get('verdict') or s['status']:<16}"
            f" {n('files'):>7} {n('review'):>7} {n('cleared'):>7} {n('new'):>6}"
            f" {n('changed'):>7} {n('removed'):>7}"
        )
    return 0


def add_memory_commands(sub: Any, add_target: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("decide", help="record an auditor's decision on files of a manifest, by content")
    p.add_argument("manifest", help="the manifest.json the files were reviewed in")
    p.add_argument("--path", action="append", default=[], help="a file of the review set; repeatable")
    p.add_argument("--all-review", action="store_true", help="every file of the manifest's review set")
    p.add_argument("--verdict", required=True, choices=VERDICTS, help="what the auditor decided")
    p.add_argument("--by", required=True, metavar="NAME", help="who decides (kept with the decision)")
    p.add_argument("--note", help="why, for the next reader")
    p.add_argument(
        "--scope",
        choices=SCOPES,
        default="supplier",
        help="supplier: this supplier's drops only (default); global: every supplier's drops",
    )
    add_target(p)
    p.set_defaults(func=cmd_decide)

    d = sub.add_parser("decisions", help="auditors' decisions: list, export, import (dropscan.decisions/1)")
    ds = d.add_subparsers(dest="decisions_command", required=True)
    for name, text in (
        ("list", "the decisions, or those a supplier's drops see"),
        ("export", "write them to a file to review and share (JSON, one decision a line)"),
        ("import", "merge a file in: later decisions replace earlier ones, nothing is duplicated"),
    ):
        p = ds.add_parser(name, help=text)
        if name != "list":
            p.add_argument("file")
        if name != "import":
            p.add_argument("--supplier", help="only what this supplier's drops see: its own and global")
            p.add_argument("--scope", choices=SCOPES, help="only the decisions of this scope")
        if name == "list":
            p.add_argument("--json", action="store_true", help="as JSON, one object a decision")
        add_target(p)
    d.set_defaults(func=cmd_decisions)

    p = sub.add_parser("history", help="the scans of a supplier's product: verdict, review, cleared, delta")
    p.add_argument("--supplier", required=True, help="the supplier the drops came from")
    p.add_argument("--product", required=True, help="as the manifests name it (`product`)")
    p.add_argument("--json", action="store_true", help="as JSON, one object a scan")
    add_target(p)
    p.set_defaults(func=cmd_history)

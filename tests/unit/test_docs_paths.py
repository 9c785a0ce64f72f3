"""Every module the docs name exists: ``dropscan.x.y`` (and ``dropscan.x.y.name``), the rooms' short
forms in code spans (`` `audit.findings.apply` ``), and ``shared/dropscan/x/y.py``, in README.md and
docs/*.md. A name past the module (a function, a class) must be defined at the top of that module."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shared" / "dropscan"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

ROOMS = ("archive", "audit", "cli", "firmware", "git", "local", "reports", "stages", "store", "web")
# `dropscan.manifest/1` and `dropscan.decisions/1` are format names, not modules
_DOTTED = re.compile(r"\bdropscan(?:\.[A-Za-z_]\w*)+(?![\w/-])")
_SHORT = re.compile(r"`(?:" + "|".join(ROOMS) + r")(?:\.[A-Za-z_]\w*)+(?=[`(\s,])")
_PATH = re.compile(r"\bshared/dropscan(?:/[\w.-]+)*/?")


def named(text: str) -> list[str]:
    """The dotted module paths ``text`` names, each as ``dropscan.…``."""
    out = [m.group(0) for m in _DOTTED.finditer(text)]
    out += ["dropscan." + m.group(0).lstrip("`") for m in _SHORT.finditer(text)]
    for m in _PATH.finditer(text):
        path = m.group(0).rstrip("/.")
        if path.endswith(".py"):
            out.append(path.removeprefix("shared/").removesuffix(".py").replace("/", "."))
        else:
            out.append(path)  # a folder or a data file: checked as a path
    return out


@cache
def top_names(module: Path) -> frozenset[str]:
    """What the top of a module defines: functions, classes, assignments, imported names."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def problem(name: str) -> str | None:
    """Why ``name`` does not exist (None: it does)."""
    if name.startswith("shared/"):
        return None if (ROOT / name).exists() else "no such path"
    parts = name.split(".")
    for n in range(len(parts), 0, -1):  # the longest module or package it starts with
        base = PACKAGE.parent.joinpath(*parts[:n])
        if base.with_suffix(".py").is_file():
            module: Path | None = base.with_suffix(".py")
        elif base.is_dir():
            module = base / "__init__.py" if (base / "__init__.py").is_file() else None
        else:
            continue
        rest = parts[n:]
        if not rest or (module is not None and rest[0] in top_names(module)):
            return None
        return f"{'.'.join(parts[:n])} has no {rest[0]}"
    return "no such module"


def test_the_check_finds_each_form_and_tells_a_missing_module_or_name() -> None:
    text = (
        "`dropscan.audit.findings.apply`, (`audit.triage_plan.cut`), shared/dropscan/stages/triage.py, "
        "`shared/dropscan/schema/manifest.schema.json`, the format dropscan.manifest/1, `audit.nothing`, "
        "`stages.triage._drop` and dropscan.archive.Limits."
    )
    assert named(text) == [
        "dropscan.audit.findings.apply",
        "dropscan.archive.Limits",
        "dropscan.audit.triage_plan.cut",
        "dropscan.audit.nothing",
        "dropscan.stages.triage._drop",
        "dropscan.stages.triage",
        "shared/dropscan/schema/manifest.schema.json",
    ]
    found = [problem(n) for n in named(text)]
    assert found == [None, None, None, "dropscan.audit has no nothing", None, None, None]
    assert problem("dropscan.triage_plan.TriageLimits") == "dropscan has no triage_plan"
    assert problem("dropscan.audit.findings.nothing") == "dropscan.audit.findings has no nothing"
    assert problem("shared/dropscan/audit/nothing.json") == "no such path"
    assert named("shared/dropscan/audit/nothing.py") == ["dropscan.audit.nothing"]


def test_every_module_path_the_docs_name_exists() -> None:
    bad = []
    for doc in DOCS:
        for line_no, line in enumerate(doc.read_text().splitlines(), 1):
            for name in named(line):
                why = problem(name)
                if why:
                    bad.append(f"{doc.relative_to(ROOT)}:{line_no}: {name}: {why}")
    assert not bad, "the docs name modules that do not exist:\n" + "\n".join(bad)

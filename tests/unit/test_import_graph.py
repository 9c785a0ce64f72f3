"""The rooms of docs/design.md ("Layout"), kept by the import graph of shared/dropscan: every module
parsed with ast, every import of it (at the top, in a function, or for type checking only) an edge."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shared" / "dropscan"

#: import cycles between modules that are known and owned by work under way elsewhere; each is listed
#: with who removes it. The test fails on any other cycle, and on a listed one that is gone (so this
#: list only shrinks: empty it as the cycles are broken).
KNOWN_CYCLES: list[frozenset[str]] = []

#: modules that do no I/O (docs/design.md: "audit/, keys, events and models do no I/O and import no
#: data access")
PURE = ("dropscan.audit", "dropscan.keys", "dropscan.events", "dropscan.models")
DATA_ACCESS = ("dropscan.store", "dropscan.local")
AWS_CLIENTS = ("boto3", "botocore", "pynamodb")  # and their type stubs, mypy_boto3_*
#: the only rooms that may import an AWS client: store/, and local/ (it deploys moto)
CLIENT_ROOMS = ("dropscan.store", "dropscan.local")
PLAN = "dropscan.audit.triage_plan"


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # a module of dropscan, or the top-level name of another package
    names: tuple[str, ...]  # the names a ``from`` import takes out of ``target``
    line: int
    typing_only: bool  # inside ``if TYPE_CHECKING:``

    def at(self) -> str:
        return f"{self.importer}:{self.line} imports {self.target}" + (
            f" ({', '.join(self.names)})" if self.names else ""
        )


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_aws_client(package: str) -> bool:
    return package in AWS_CLIENTS or package.startswith("mypy_boto3")


def in_room(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in rooms)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node under ``node``, and whether it lies in an ``if TYPE_CHECKING:`` block."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.body:
                yield sub, True
                yield from _walk(sub, True)
            for sub in child.orelse:
                yield sub, typing_only
                yield from _walk(sub, typing_only)
        else:
            yield child, typing_only
            yield from _walk(child, typing_only)


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names (relative imports resolved against ``importer``)."""
    if not node.level:
        return node.module or ""
    package = importer if modules()[importer].name == "__init__.py" else importer.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _target(name: str) -> str:
    """``name`` as an edge's end: the dropscan module it is (or is inside), or another package's top."""
    if not name.startswith("dropscan"):
        return name.split(".")[0]
    while name not in modules() and "." in name:
        name = name.rpartition(".")[0]
    return name


@cache
def imports() -> list[Import]:
    out: list[Import] = []
    for importer, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        for node, typing_only in _walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out.append(Import(importer, _target(alias.name), (), node.lineno, typing_only))
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(importer, node)
                plain: list[str] = []
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in modules():  # ``from dropscan.audit import findings``: the module itself
                        out.append(Import(importer, sub, (), node.lineno, typing_only))
                    else:
                        plain.append(alias.name)
                if plain:
                    out.append(Import(importer, _target(source), tuple(plain), node.lineno, typing_only))
    return out


def graph() -> dict[str, set[str]]:
    """dropscan module -> the dropscan modules it imports at run time (type-checking imports left out:
    they never run, and are how an annotation names a type without an import cycle)."""
    edges: dict[str, set[str]] = {m: set() for m in modules()}
    for i in imports():
        if i.target in modules() and i.target != i.importer and not i.typing_only:
            edges[i.importer].add(i.target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


# ------------------------------------------------------------------ the tests
def test_the_graph_sees_every_module_and_the_imports_it_is_built_from() -> None:
    """A check of the checker: the modules and edges every rule below relies on are found."""
    edges = graph()
    assert {"dropscan.stages.triage", "dropscan.audit.findings", "dropscan.store.scans"} <= set(edges)
    assert "dropscan.audit.findings" in edges["dropscan.stages.triage"]
    assert "dropscan.store.batch" in edges["dropscan.store.decisions"]
    # settings names TriageLimits for type checking and imports it in the function that builds one
    seen = {i.typing_only for i in imports() if (i.importer, i.target) == ("dropscan.settings", PLAN)}
    assert seen == {True, False}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_between_modules() -> None:
    found = set(cycles(graph()))
    unknown = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not unknown, f"import cycles: {unknown}"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"no longer cycles: remove them from KNOWN_CYCLES: {gone}"


def test_pure_modules_import_no_data_access_and_no_aws_client() -> None:
    bad = [
        i.at()
        for i in imports()
        if in_room(i.importer, PURE) and (in_room(i.target, DATA_ACCESS) or is_aws_client(i.target))
    ]
    assert not bad, "audit/, keys, events and models import no store/, local/ or AWS client:\n" + "\n".join(
        bad
    )


def test_only_store_and_local_import_an_aws_client() -> None:
    bad = [i.at() for i in imports() if is_aws_client(i.target) and not in_room(i.importer, CLIENT_ROOMS)]
    assert not bad, "boto3, botocore and pynamodb are imported by store/ and local/ only:\n" + "\n".join(bad)


def test_no_stage_imports_a_handler() -> None:
    bad = [i.at() for i in imports() if in_room(i.importer, ("dropscan.stages",)) and i.target == "functions"]
    assert not bad, "a stage never imports a handler (functions/):\n" + "\n".join(bad)


def _stage(module: str) -> str | None:
    """The stage a module of stages/ is (stages/__init__ is none)."""
    return module if module.startswith("dropscan.stages.") else None


def _other_stages(importer: str, tree: ast.Module) -> dict[str, str]:
    """The local names ``importer`` binds to other stage modules (``from dropscan.stages import x``)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(importer, node)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if _stage(sub) and sub in modules() and sub != importer:
                    bound[alias.asname or alias.name] = sub
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _stage(alias.name) and alias.asname and alias.name != importer:
                    bound[alias.asname] = alias.name
    return bound


def test_no_stage_imports_another_stages_private_names() -> None:
    """Neither ``from dropscan.stages.x import _y`` nor ``x._y`` on an imported stage module."""
    bad: list[str] = []
    for i in imports():
        theirs = _stage(i.target)
        if _stage(i.importer) and theirs and theirs != i.importer:
            bad += [f"{i.at()}: {n}" for n in i.names if n.startswith("_")]
    for importer, path in modules().items():
        if not _stage(importer):
            continue
        tree = ast.parse(path.read_text(), str(path))
        bound = _other_stages(importer, tree)
        bad += [
            f"{importer}:{node.lineno} uses {bound[node.value.id]}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr.startswith("_")
        ]
    assert not bad, "a stage uses another stage's private names:\n" + "\n".join(bad)

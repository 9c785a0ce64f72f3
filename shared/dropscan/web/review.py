"""A scan's review set as the desk pages it: one row per review file with its decision state, filters,
groups and pages. Pure: the manifest and the decisions come in, values go out.

The rows of a manifest are built once and kept (``rows``); each request filters and counts them anew,
which is a pass over a list: a 120,000-file review set is paged on the server, never sent whole.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from dropscan.audit.decision_rules import in_review_class
from dropscan.models import Decision
from dropscan.reports import view

#: the decision states a review file can be in, in the order the desk lists them
STATES = ("open", "reopened", "needs-action", "rejected", "accepted", "backport")
GROUPS = ("component", "folder", "flag", "state")
PAGE_SIZE = 100
GROUPS_SHOWN = 60


@dataclass(frozen=True, slots=True)
class Row:
    path: str
    sha256: str
    cls: str
    component: str
    folder: str
    flags: tuple[str, ...]  # kinds, most severe first
    severity: str  # the most severe flag's, or ""
    licences: tuple[str, ...]
    state: str
    by: str = ""
    at: str = ""
    component_key: str = ""  # the component, or "(top level)": its group
    flag_key: str = ""  # the most severe flag's kind, or "(no flag)": its group


#: the attribute of a row each grouping counts and orders by
GROUP_ATTR = {"component": "component_key", "folder": "folder", "flag": "flag_key", "state": "state"}
DONE = frozenset({"accepted", "backport"})  # left out unless asked for: the work left is the rest


@dataclass
class Query:
    """What a review page asks for (its query string), checked: unknown values are ignored."""

    component: str = ""
    folder: str = ""
    flag: str = ""
    state: str = ""
    q: str = ""
    group: str = "state"
    page: int = 1

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Query:
        try:
            page = max(1, int(params.get("page") or 1))
        except ValueError:
            page = 1
        group = params.get("group") or "state"
        state = params.get("state") or ""
        return cls(
            component=params.get("component") or "",
            folder=params.get("folder") or "",
            flag=params.get("flag") or "",
            state=state if state in STATES or state == "all" else "",
            q=(params.get("q") or "")[:200],
            group=group if group in GROUPS else "state",
            page=page,
        )

    def params(self, **changes: Any) -> dict[str, str]:
        """The query string of this page with ``changes`` (empty values left out)."""
        values = {k: getattr(self, k) for k in ("component", "folder", "flag", "state", "q", "group")}
        values.update({k: v for k, v in changes.items() if k != "page"})
        out = {k: str(v) for k, v in values.items() if v}
        page = changes.get("page", 1)
        if page and int(page) > 1:
            out["page"] = str(page)
        return out


@dataclass
class Page:
    rows: list[Row]
    total: int  # rows matching the filters
    page: int
    pages: int
    groups: list[tuple[str, int]]  # the grouping's values among the matching rows, most first
    states: dict[str, int] = field(default_factory=dict)  # every row's state, unfiltered


def _state(f: Mapping[str, Any]) -> tuple[str, str, str]:
    d = f.get("decision")
    if d:
        if d.get("reopened"):
            return "reopened", str(d.get("by") or ""), str(d.get("at") or "")
        return str(d.get("verdict")), str(d.get("by") or ""), str(d.get("at") or "")
    if view.is_backport(f):
        return "backport", "", ""
    return "open", "", ""


def rows(manifest: Mapping[str, Any]) -> list[Row]:
    """Every file of the review classes (modified, added; readable), sorted by path."""
    flags_at: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for fl in manifest.get("flags") or []:
        flags_at[str(fl.get("path") or "")].append(fl)
    out = []
    for f in manifest["files"]:
        if not in_review_class(f):
            continue
        path = str(f["path"])
        found = sorted(flags_at.get(path, ()), key=lambda fl: view.severity_rank(fl.get("severity")))
        state, by, at = _state(f)
        component = str(f.get("component") or "")
        kinds = tuple(dict.fromkeys(str(fl.get("kind")) for fl in found))
        out.append(
            Row(
                path=path,
                sha256=str(f["sha256"]),
                cls=str(f["class"]),
                component=component,
                folder=view.folder(path),
                flags=kinds,
                severity=str(found[0].get("severity") or "") if found else "",
                licences=tuple(dict.fromkeys(lic["expression"] for lic in view.licence_findings(f))),
                state=state,
                by=by,
                at=at,
                component_key=component or "(top level)",
                flag_key=kinds[0] if kinds else "(no flag)",
            )
        )
    out.sort(key=lambda r: r.path)
    return out


class Orders:
    """A review set's rows in each grouping's order (by its key, then path), as positions: made once
    per grouping and kept with the rows, so that no request sorts 120,000 rows. Decisions change
    states, not positions: the orders hold for the rows with decisions laid over them."""

    def __init__(self, base: Sequence[Row]) -> None:
        self.base = base
        self._orders: dict[str, list[int]] = {}
        self._paths: list[str] | None = None
        self._groups: dict[str, list[tuple[str, int]]] = {}

    def under(self, rows: Sequence[Row], folder: str) -> Sequence[Row]:
        """The rows (aligned with the base rows) in ``folder`` or below it: a range of the paths."""
        if folder == "(top level)":
            return [r for r in rows if "/" not in r.path]
        if self._paths is None:
            self._paths = [r.path for r in self.base]
        prefix = folder.rstrip("/") + "/"
        lo = bisect.bisect_left(self._paths, prefix)
        hi = bisect.bisect_left(self._paths, prefix + "\U0010ffff", lo)
        return rows[lo:hi]

    def groups(self, group: str) -> list[tuple[str, int]]:
        """Every row's count by ``group`` (not state: decisions change states), most first."""
        if group not in self._groups:
            counts = Counter(map(attrgetter(GROUP_ATTR[group]), self.base))
            self._groups[group] = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:GROUPS_SHOWN]
        return self._groups[group]

    def of(self, group: str) -> list[int]:
        if group not in self._orders:
            key = attrgetter(GROUP_ATTR[group])
            # the rows are sorted by path, and the sort is stable
            self._orders[group] = sorted(range(len(self.base)), key=lambda i: key(self.base[i]))
        return self._orders[group]


def overlay(all_rows: Sequence[Row], taken: Iterable[Decision], supplier: str) -> list[Row]:
    """The rows with the decisions taken on the desk since the scan (later ones win; a supplier's own
    over a global one, as a scan chooses): the review set as it stands now."""
    latest: dict[str, Decision] = {}
    for d in sorted(taken, key=lambda d: d.at):
        if not d.subject.startswith("sha256:"):
            continue  # a hunk's: its file's state follows once every hunk is accepted
        if d.scope == "supplier" and d.supplier != supplier:
            continue
        digest = d.subject.removeprefix("sha256:")
        held = latest.get(digest)
        if held is not None and held.scope == "supplier" and d.scope == "global":
            continue
        latest[digest] = d
    if not latest:
        return list(all_rows)
    return [
        replace(r, state=x.verdict, by=x.by, at=x.at) if (x := latest.get(r.sha256)) else r for r in all_rows
    ]


def group_key(row: Row, group: str) -> str:
    return str(getattr(row, GROUP_ATTR[group]))


def _filtered(
    rows: Sequence[Row], q: Query, *, folder_done: bool = False, state_done: bool = False
) -> list[Row]:
    """The rows the filters of ``q`` keep, in their order: one comprehension a filter (none for a
    filter the caller has applied already). No state asked: every state but accepted and backport."""
    found = list(rows)
    if q.folder and not folder_done:
        prefix, folder = q.folder.rstrip("/") + "/", q.folder
        found = [r for r in found if r.path.startswith(prefix) or r.folder == folder]
    if q.component:
        component = q.component
        found = [r for r in found if r.component == component]
    if q.flag == "(no flag)":
        found = [r for r in found if not r.flags]
    elif q.flag:
        flag = q.flag
        found = [r for r in found if flag in r.flags]
    if q.q:
        needle = q.q.lower()
        found = [r for r in found if needle in r.path.lower()]
    if q.state == "" and not state_done:
        found = [r for r in found if r.state not in DONE]
    elif q.state not in ("", "all"):
        state = q.state
        found = [r for r in found if r.state == state]
    return found


def matching(all_rows: Sequence[Row], q: Query) -> list[Row]:
    """The rows the filters keep, by path."""
    return _filtered(all_rows, q)


#: the states of a file nobody has decided yet (or whose decision a new finding re-opened)
UNDECIDED = frozenset({"open", "reopened"})


@dataclass(frozen=True)
class Next:
    """Where a reviewer working through a review set goes from a file: the next undecided file."""

    path: str | None  # the first undecided file after this one by path (then from the start), or None
    undecided: int  # undecided files left, this one among them if it is


def next_undecided(all_rows: Sequence[Row], path: str) -> Next:
    """The undecided file after ``path`` in the review set's path order, wrapping round to the first;
    ``all_rows`` are by path (:func:`rows`, with :func:`overlay`'s decisions), so this is a bisection and
    one pass."""
    at = bisect.bisect_right(all_rows, path, key=attrgetter("path"))
    later = (r.path for r in all_rows[at:] if r.state in UNDECIDED)
    earlier = (r.path for r in all_rows[:at] if r.state in UNDECIDED and r.path != path)
    undecided = sum(1 for r in all_rows if r.state in UNDECIDED)
    return Next(next(later, None) or next(earlier, None), undecided)


def page(all_rows: Sequence[Row], q: Query, size: int = PAGE_SIZE, orders: Orders | None = None) -> Page:
    """One page of the rows the filters keep, in the grouping's order (by state: the order of
    :data:`STATES`; else by the group's key), with the count of each group.

    ``all_rows`` are by path, so a folder is a range of them (found by bisection); with no accepted
    or backported row the default state filter keeps everything; with no folder asked, a grouping's
    order is the one :class:`Orders` keeps. What is left is a pass or two over the rows."""
    orders = orders or Orders(all_rows)
    states = Counter(map(attrgetter("state"), all_rows))
    state_done = q.state == "" and not (states.keys() & DONE)
    everything = not (q.folder or q.component or q.flag or q.q) and (q.state == "all" or state_done)
    if everything and q.group != "state":  # every row, in an order and with counts kept: one page
        positions = orders.of(q.group)
        pages = max(1, -(-len(positions) // size))
        n = min(q.page, pages)
        return Page(
            rows=[all_rows[i] for i in positions[(n - 1) * size : n * size]],
            total=len(positions),
            page=n,
            pages=pages,
            groups=orders.groups(q.group),
            states=dict(states),
        )
    if everything:  # by state: the states counted already are the groups
        found, counts = list(all_rows), Counter(states)
    elif q.folder or q.group == "state":
        narrowed = orders.under(all_rows, q.folder) if q.folder else all_rows
        found = _filtered(narrowed, q, folder_done=narrowed is not all_rows, state_done=state_done)
        if q.group != "state":
            found.sort(key=attrgetter(GROUP_ATTR[q.group]))  # stable: by path within a group
        counts = Counter(map(attrgetter(GROUP_ATTR[q.group]), found))
    else:
        found = _filtered([all_rows[i] for i in orders.of(q.group)], q, state_done=state_done)
        counts = Counter(map(attrgetter(GROUP_ATTR[q.group]), found))
    if q.group == "state" and len(counts) > 1:  # in the order of STATES, each state's rows by path
        ranked = sorted(counts, key=lambda s: (STATES.index(s) if s in STATES else len(STATES), s))
        found = [r for s in ranked for r in found if r.state == s]
    pages = max(1, -(-len(found) // size))
    n = min(q.page, pages)
    return Page(
        rows=found[(n - 1) * size : n * size],
        total=len(found),
        page=n,
        pages=pages,
        groups=sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:GROUPS_SHOWN],
        states=dict(states),
    )


def components(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(prefix, name) of each component, for the filter."""
    return [(str(c.get("prefix") or ""), view.component_name(c)) for c in manifest.get("components") or []]

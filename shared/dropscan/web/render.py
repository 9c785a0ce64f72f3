"""The desk's pages: Jinja2 templates (``templates/``) with autoescaping on for every template, so that
each value from a drop (paths, licence texts, evidence lines, commit subjects, notes) lands as text.
The only markup passed in whole is the diff, which :mod:`dropscan.reports.diffs` escapes line by line."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader
from markupsafe import Markup


def _n(value: Any) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("dropscan.web", "templates"),
        autoescape=True,  # every template, whatever its name
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["u"] = lambda v: quote(str(v), safe="")
    env.filters["n"] = _n
    return env


def page(template: str, **context: Any) -> str:
    context.setdefault("csrf", "")
    context.setdefault("user", None)
    context.setdefault("page_kind", template.removesuffix(".html"))
    return environment().get_template(template).render(**context)


def trusted(html: str) -> Markup:
    """HTML this package made and escaped itself (the diff)."""
    return Markup(html)  # dropscan.reports.diffs escapes every line it writes


def url(path: str, params: dict[str, str]) -> str:
    return f"{path}?{urlencode(params)}" if params else path


@cache
def static(name: str) -> tuple[str, str] | None:
    """(content type, text) of a static file; the stylesheet carries the report's diff colours too."""
    types = {"desk.js": "text/javascript; charset=utf-8", "desk.css": "text/css; charset=utf-8"}
    if name not in types:
        return None
    text = (files("dropscan.web") / "static" / name).read_text(encoding="utf-8")
    if name == "desk.css":
        from dropscan.reports.diffs import style_css

        text += "\n" + style_css()
    return types[name], text

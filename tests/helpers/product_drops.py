"""Two releases of a supplier's product, built from a small upstream: the drops of the decisions and
delta tests (tests/e2e/test_decisions.py, test_decisions_up.py)."""

from __future__ import annotations

from typing import Any

#: an upstream release of 24 files
UPSTREAM = {f"widget-1.0/src/w{i:02d}.c": f"int w{i}(void) {{ return {i}; }}\n".encode() for i in range(20)}
UPSTREAM |= {
    "widget-1.0/COPYING": b"GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991\n",
    "widget-1.0/Makefile": b"all:\n\tcc -o widget src/*.c\n",
    "widget-1.0/configs/board_defconfig": b"CONFIG_ARM=y\nCONFIG_WIDGET=y\n",
    "widget-1.0/README": b"widget\n",
}


def first_drop() -> dict[str, bytes]:
    """The supplier's 1.0: four upstream files modified, three added (one marked proprietary), the
    board's configuration modified."""
    files = {p.replace("widget-1.0/", "widget-1.0-acme/"): data for p, data in UPSTREAM.items()}
    for i in range(4):
        files[f"widget-1.0-acme/src/w{i:02d}.c"] += b"/* acme: tuned */\n"
    files["widget-1.0-acme/configs/board_defconfig"] += b"CONFIG_ACME_BOARD=y\n"
    files["widget-1.0-acme/acme/board.c"] = b"int board = 1200;\n"
    files["widget-1.0-acme/acme/leds.c"] = b"int leds = 4;\n"
    files["widget-1.0-acme/acme/secret.c"] = b"/* CONFIDENTIAL AND PROPRIETARY to Acme */\nint s;\n"
    return files


def second_drop(first: dict[str, bytes]) -> tuple[dict[str, bytes], set[str], set[str]]:
    """1.1: three reviewed files and two upstream-identical files edited, one file added.

    Returns the files, the changed paths and the new paths (of the 1.1 tree)."""
    files = {p.replace("widget-1.0-acme/", "widget-1.1-acme/"): d for p, d in first.items()}
    changed = {"src/w00.c", "src/w01.c", "acme/leds.c", "src/w10.c", "src/w11.c"}
    for p in changed:
        files[f"widget-1.1-acme/{p}"] += b"/* 1.1 */\n"
    files["widget-1.1-acme/acme/power.c"] = b"int power = 3;\n"
    return files, {f"widget-1.1-acme/{p}" for p in changed}, {"widget-1.1-acme/acme/power.c"}


def review_set(m: dict[str, Any]) -> set[str]:
    return {
        f["path"]
        for f in m["files"]
        if f["class"] in ("modified", "added")
        and not (f.get("decision", {}).get("verdict") == "accepted" and not f["decision"].get("reopened"))
    }

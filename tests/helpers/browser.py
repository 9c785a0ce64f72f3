"""Pages as headless Chromium renders them: a screenshot to assert on pixels."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest


def screenshot(tmp_path: Path, page: str, name: str, height: int = 3200) -> Any:
    from PIL import Image

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("DROPSCAN_REQUIRE_BROWSER") == "1":
            pytest.fail("DROPSCAN_REQUIRE_BROWSER=1 but chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium); the HTML is checked without it")
    src, png = tmp_path / f"{name}.html", tmp_path / f"{name}.png"
    src.write_text(page, encoding="utf-8")
    # fmt: off
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium'}", f"--screenshot={png}", f"--window-size=1280,{height}",
            src.as_uri()]
    # fmt: on
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return Image.open(png).convert("RGB")


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)

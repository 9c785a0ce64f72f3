"""Pages as headless Chromium renders them: a screenshot to assert on pixels; and the review desk driven
in Chromium by Selenium (tests/e2e/test_web_browser.py, test_web_busybox.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
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


# ------------------------------------------------------------------ the desk in Chromium, through Selenium
WAIT = 60  # seconds a page may take on a loaded machine; the waits end as soon as it is there
POLL = 0.02  # how often a wait looks (Selenium's default, half a second, would be most of a walkthrough)


def _waiting(b: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(b, WAIT, poll_frequency=POLL)


def browser_or_skip() -> tuple[str, str]:
    """(chromium, chromedriver): the test skipped without them, failed under DROPSCAN_REQUIRE_BROWSER=1."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        if os.environ.get("DROPSCAN_REQUIRE_BROWSER") == "1":
            pytest.fail("DROPSCAN_REQUIRE_BROWSER=1 but chromium or chromedriver is missing (make browser)")
        pytest.skip("chromium and chromium-driver are not installed (make browser)")
    pytest.importorskip("selenium")
    return chromium, driver


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    """Headless Chromium driven by chromedriver, its profile in ``profile``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = browser_or_skip()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1800",
                "--disable-background-networking", "--disable-component-update", "--no-first-run",
                f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(arg)
    b = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield b
    finally:
        b.quit()


def wait_for(b: Any, css: str, text: str | None = None) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    if text is not None:
        _waiting(b).until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))
    return _waiting(b).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def wait_shown(b: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    return _waiting(b).until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)))


def click(b: Any, css: str) -> None:
    """Click, then wait until the page the script puts in place of this one is there."""
    from selenium.webdriver.support import expected_conditions as ec

    old = b.find_element("css selector", "body")
    b.find_element("css selector", css).click()
    _waiting(b).until(ec.staleness_of(old))


def visit(b: Any, url: str) -> None:
    """Go to ``url`` (a "#/..." of the desk: the script fetches it), then wait until it is in place."""
    from selenium.webdriver.support import expected_conditions as ec

    old = b.find_element("css selector", "body")
    b.get(url)
    _waiting(b).until(ec.staleness_of(old))

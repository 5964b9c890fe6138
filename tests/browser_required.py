"""The one rule for tests that drive a real browser: Debian's `chromium` and `chromium-driver`
packages (nothing downloads a browser or a driver). Outside CI a missing one skips the test with
a reason; under CI=true (where .ci/run installs both) it fails it, so a skip never hides a lost
test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def require_chromium() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if not missing:
        return
    why = f"{' and '.join(missing)} missing: apt-get install chromium chromium-driver"
    if os.environ.get("CI") == "true":
        pytest.fail(f"A browser is required under CI: {why}")
    pytest.skip(why)


@contextmanager
def chromium(*, width: int = 1400, height: int = 1800) -> Iterator[webdriver.Chrome]:
    """Headless Chromium driven by the packaged chromedriver (its path given, so selenium never
    looks for or fetches one)."""
    require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", f"--window-size={width},{height}"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()

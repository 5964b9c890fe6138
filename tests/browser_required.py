"""A real browser for the tests that drive one: Debian's `chromium` and `chromium-driver`
packages (nothing downloads a browser or a driver), missing as tests/required.py says (a skip
on a developer's machine, a failure under CI=true, where .ci/run installs both)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.required import missing

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def require_chromium() -> None:
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if absent:
        missing(f"{' and '.join(absent)} not installed (apt-get install chromium chromium-driver)")


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

"""The dashboard's files ship in the package (read through importlib.resources, as a wheel
install reads them), every script and stylesheet a page names is one the gateway serves, and the
vendored chart library keeps its licence beside it."""

from __future__ import annotations

import re

from levergate.dashboard.http import PAGES, STATIC, asset


def test_every_page_names_only_files_the_gateway_serves() -> None:
    for page in PAGES.values():
        html = asset(page).decode()
        named = re.findall(r'(?:src|href)="/dashboard/static/([^"]+)"', html)
        assert named, page
        assert set(named) <= set(STATIC), page
        assert "<script>" not in html  # no inline script: the pages' CSP allows none
        assert " style=" not in html


def test_every_served_file_ships_and_uplot_keeps_its_licence() -> None:
    for name in STATIC:
        assert asset(name), name
    assert b"MIT License" in asset("uPlot.LICENSE")
    assert b"uPlot" in asset("uPlot.iife.min.js")

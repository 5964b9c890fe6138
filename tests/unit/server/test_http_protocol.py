"""The connection cap's warning: one line per cool-down, carrying the count since the last."""

from __future__ import annotations

import logging

import pytest

from levergate.server.http_protocol import Overload


def test_refused_connections_are_logged_once_per_cool_down_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="levergate.server")
    overload = Overload(every=10.0)
    for now in (100.0, 101.0, 105.0, 109.9):
        overload.refuse(now=now, cap=8)
    assert len(caplog.records) == 1
    overload.refuse(now=110.0, cap=8)
    assert len(caplog.records) == 2
    assert "4 connection(s) answered 503" in caplog.records[1].getMessage()

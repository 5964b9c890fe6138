"""The connection cap's warning: one line per cool-down, carrying the count since the last; the
request targets a server remembers parsed."""

from __future__ import annotations

import logging
from urllib.parse import unquote

import httptools
import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.server.http_protocol import Overload, Targets


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


# ---- Targets: a request target's (path, query), parsed once -------------------------------------

_TARGET_BYTES = st.binary(max_size=40).map(
    lambda raw: b"/" + bytes(b for b in raw if 0x21 <= b < 0x7F and b not in b"#")
)


def _parsed_afresh(target: bytes) -> tuple[str, str]:
    url = httptools.parse_url(target)
    path = url.path.decode("ascii")
    return (unquote(path) if "%" in path else path), (url.query or b"").decode("latin-1")


@given(st.lists(_TARGET_BYTES, max_size=30))
def test_a_known_target_is_what_parsing_it_afresh_gives(targets: list[bytes]) -> None:
    known = Targets()
    for target in [*targets, *targets]:  # each met twice: parsed, then remembered
        try:
            expected = _parsed_afresh(target)
        except httptools.HttpParserInvalidURLError:
            with pytest.raises(httptools.HttpParserInvalidURLError):
                known.parse(target)
            assert target not in known.known  # a target that fails is never remembered
            continue
        remembered = known.known.get(target)
        got = remembered if remembered is not None else known.parse(target)
        assert got == expected
        assert known.known[target] == expected
        assert len(known.known) <= Targets.MOST


def test_targets_are_bounded_in_number_and_length() -> None:
    known = Targets()
    for n in range(3 * Targets.MOST):
        known.parse(b"/v1/models?after=%d" % n)
        assert len(known.known) <= Targets.MOST
    long = b"/" + b"a" * Targets.LONGEST
    assert known.parse(long) == ("/" + "a" * Targets.LONGEST, "")
    assert long not in known.known
    assert known.parse(b"/v1/a%20b?x=%41") == ("/v1/a b", "x=%41")

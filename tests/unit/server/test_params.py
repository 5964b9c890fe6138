"""What the routes that run no call read from a query string (server/params.py)."""

from __future__ import annotations

import pytest

from levergate.core.call import Trace
from levergate.errors import BadRequest
from levergate.server.exchange import Request
from levergate.server.params import limit_of, query


@pytest.mark.parametrize("text", ["²", "1²", "١٢", "-1", "0", "1001", "", " 5", "1e3"])
def test_a_limit_other_than_ascii_digits_from_1_to_the_most_is_a_400(text: str) -> None:
    # '²' passed `str.isdigit` and failed `int`: a 500 from GET /admin/log and the dashboard
    with pytest.raises(BadRequest) as caught:
        limit_of({"limit": text}, default=10, most=1000)
    assert caught.value.param == "limit"


def test_a_limit_is_read_or_defaulted() -> None:
    assert limit_of({"limit": "1000"}, default=10, most=1000) == 1000
    assert limit_of({}, default=10, most=1000) == 10


def _query(text: str) -> dict[str, str]:
    request = Request("GET", "/admin/log", {}, Trace())
    request.query = text
    return query(request)


def test_a_parameter_given_twice_is_a_400_naming_it() -> None:
    # Until 2026-12 the first value was taken: `tenant=a&tenant=b` answered for "a" alone.
    with pytest.raises(BadRequest) as caught:
        _query("tenant=a&limit=5&tenant=b")
    assert caught.value.param == "tenant"
    assert "2 times" in caught.value.message


def test_parameters_given_once_are_read() -> None:
    assert _query("tenant=a&limit=5&model=") == {"tenant": "a", "limit": "5"}
    assert _query("") == {}

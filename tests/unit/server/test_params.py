"""What the routes that run no call read from a query string (server/params.py)."""

from __future__ import annotations

import pytest

from levergate.errors import BadRequest
from levergate.server.params import limit_of


@pytest.mark.parametrize("text", ["²", "1²", "١٢", "-1", "0", "1001", "", " 5", "1e3"])
def test_a_limit_other_than_ascii_digits_from_1_to_the_most_is_a_400(text: str) -> None:
    # '²' passed `str.isdigit` and failed `int`: a 500 from GET /admin/log and the dashboard
    with pytest.raises(BadRequest) as caught:
        limit_of({"limit": text}, default=10, most=1000)
    assert caught.value.param == "limit"


def test_a_limit_is_read_or_defaulted() -> None:
    assert limit_of({"limit": "1000"}, default=10, most=1000) == 1000
    assert limit_of({}, default=10, most=1000) == 10

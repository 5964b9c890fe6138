"""`Quota`: the provider's x-ratelimit-* headers, parsed once into the value the balancer reads."""

from __future__ import annotations

import pytest

from levergate.core.quota import Quota


def test_headroom_is_the_smallest_share_left_and_reset_counts_only_when_exhausted() -> None:
    quota = Quota.from_headers(
        {
            "x-ratelimit-limit-requests": "100",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "1m30s",
            "x-ratelimit-limit-tokens": "1000",
            "x-ratelimit-remaining-tokens": "500",
            "x-ratelimit-reset-tokens": "6s",
        }
    )
    assert quota is not None
    assert quota.headroom == 0.0
    assert quota.requests.exhausted
    assert not quota.tokens.exhausted
    assert quota.reset_floor() == pytest.approx(90.0)


def test_no_headers_or_nonsense_gives_nothing_to_act_on() -> None:
    assert Quota.from_headers({"content-type": "application/json"}) is None
    quota = Quota.from_headers(
        {
            "x-ratelimit-remaining-tokens": "nan",
            "x-ratelimit-limit-tokens": "inf",
            "x-ratelimit-reset-tokens": "soon",
        }
    )
    assert quota is None or (quota.headroom is None and quota.reset_floor() is None)

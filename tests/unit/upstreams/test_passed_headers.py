from __future__ import annotations

from levergate.config import PASSED_RESPONSE_HEADERS, UpstreamSettings
from levergate.redact import Redactor
from levergate.upstreams.passed_headers import HeaderAllowList

PROVIDER = {
    "X-RateLimit-Remaining-Requests": "41",
    "x-ratelimit-reset-tokens": "6ms",
    "openai-processing-ms": "312",
    "openai-version": "2020-10-01",
    "x-request-id": "req_abc",
    "set-cookie": "__cf_bm=secret",
    "server": "cloudflare",
    "content-type": "application/json",
}


def test_the_default_list_passes_limits_and_timings_and_renames_the_request_id() -> None:
    picked = HeaderAllowList(PASSED_RESPONSE_HEADERS).pick(PROVIDER)
    assert picked == {
        "x-ratelimit-remaining-requests": "41",
        "x-ratelimit-reset-tokens": "6ms",
        "openai-processing-ms": "312",
        "openai-version": "2020-10-01",
        "x-upstream-request-id": "req_abc",
    }


def test_the_list_is_configured_per_upstream_and_may_be_empty() -> None:
    upstream = UpstreamSettings(
        name="u", base_url="http://127.0.0.1:1/v1", response_headers=("server",)
    )
    assert HeaderAllowList(upstream.response_headers).pick(PROVIDER) == {"server": "cloudflare"}
    assert HeaderAllowList(()).pick(PROVIDER) == {}
    default = UpstreamSettings(name="u", base_url="http://127.0.0.1:1/v1")
    assert default.response_headers == PASSED_RESPONSE_HEADERS


def test_a_passed_value_is_redacted() -> None:
    """Found by the canary suite: an upstream echoing its key in an allowed header."""
    key = "sk-canary-0123456789"
    picked = HeaderAllowList(PASSED_RESPONSE_HEADERS).pick(
        {"x-request-id": f"Bearer {key}", "x-ratelimit-limit-tokens": "9"},
        redact=Redactor([key]),
    )
    assert picked == {"x-upstream-request-id": "Bearer [redacted]", "x-ratelimit-limit-tokens": "9"}

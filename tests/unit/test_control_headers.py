"""The one header parser (control_headers.py): every header map either becomes valid `Controls`
or a 400 naming the header — never another exception, never a value outside its bounds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.config import RequestLimitsSettings
from levergate.control_headers import (
    ASYNC_HEADERS,
    CONTROL_HEADERS,
    INVALID,
    MAX_FEATURE_CHARS,
    NO_OPTIONS,
    Options,
    parse_controls,
    with_options,
)
from levergate.core.controls import (
    DEFAULT_CONTROLS,
    NO_CACHE,
    AsyncAsk,
    CachePolicy,
    Controls,
    Priority,
)
from levergate.errors import BadRequest

LIMITS = RequestLimitsSettings(min_timeout_seconds=0.5, max_timeout_seconds=60)
NOW = 1000.0
NAMES = (*CONTROL_HEADERS, "cache-control", "x-levergate-tenant", "authorization", "x-other")
# Values near every edge the parser judges: numbers, words, switches, names, garbage.
WORDS = st.sampled_from(
    ("", " ", "0", "1", "-1", "0.4", "0.5", "2.5", "1e306", "inf", "nan", "-0", "1_0", "²",
     "interactive", "BATCH", " default ", "urgent", "on", "off", "yes", "true", "false", "24h",
     "2h", "ops", "a/b", "http://x", "no-cache", "no-store, max-age=5", "max-age=nan",
     "max-age=x", "wf-1:step.2", "é", "x" * 129, "1" * 13, "\x00", "7200")
)  # fmt: skip
VALUES = st.one_of(WORDS, st.text(max_size=40))


def parse(headers: dict[str, str]) -> Controls:
    return parse_controls(headers, now=NOW, limits=LIMITS)


def outcome(headers: dict[str, str], body_feature: str | None) -> Controls | BadRequest:
    """The parse, or the 400 it raised; any other exception fails the property."""
    try:
        return parse_controls(headers, now=NOW, limits=LIMITS, body_feature=body_feature)
    except BadRequest as exc:
        return exc


@given(st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=6), st.one_of(st.none(), VALUES))
def test_any_header_map_parses_to_bounded_controls_or_a_400_naming_the_header(
    headers: dict[str, str], body_feature: str | None
) -> None:
    controls = outcome(headers, body_feature)
    if isinstance(controls, BadRequest):
        assert controls.http_status == 400
        assert controls.param == "metadata.feature" or controls.param in headers
        assert controls.param in (*CONTROL_HEADERS, "cache-control", "metadata.feature")
        return
    assert isinstance(controls.priority, Priority)
    if controls.deadline is not None:
        assert NOW + LIMITS.min_timeout_seconds <= controls.deadline <= NOW + 60
    assert len(controls.feature) <= MAX_FEATURE_CHARS
    assert controls.feature.isascii()
    assert controls.feature.isprintable()
    for seconds in (controls.cache.ttl, controls.cache.max_age):
        assert seconds is None or (math.isfinite(seconds) and seconds >= 0)
    assert controls.workflow is None or 1 <= len(controls.workflow) <= 128
    ask = controls.run_async
    assert ask is None or ask.not_after is None or 0 <= ask.not_after < 10**12
    assert (ask is None) == (not any(name in headers for name in ASYNC_HEADERS))


def test_no_headers_is_the_default_and_each_header_sets_its_field() -> None:
    assert parse({}) is DEFAULT_CONTROLS
    assert parse({"x-levergate-priority": "Interactive"}).priority is Priority.INTERACTIVE
    assert parse({"x-levergate-timeout": "2.5"}).deadline == NOW + 2.5
    assert parse({"x-levergate-timeout": "1e9"}).deadline == NOW + 60  # clamped
    assert parse({"x-levergate-feature": "faq"}).feature == "faq"
    assert parse({"cache-control": "no-cache, max-age=5"}).cache == CachePolicy(
        lookup=False, max_age=5
    )
    assert parse({"x-levergate-cache-ttl": "1e306"}).cache.ttl == 1e306  # the cache clamps it
    assert parse({"x-levergate-speculative": "off"}).speculative is False
    assert parse({"x-levergate-workflow": "wf-1:step.2"}).workflow == "wf-1:step.2"
    assert parse({"x-levergate-defer": "24h", "x-levergate-webhook": "ops"}).run_async == (
        AsyncAsk(defer=True, webhook="ops")
    )
    assert parse({"x-other": "1", "cache-control": "public"}).cache == CachePolicy()


def test_the_body_feature_stands_when_no_header_names_one() -> None:
    def feature(headers: dict[str, str], body: object) -> str:
        return parse_controls(headers, now=NOW, limits=LIMITS, body_feature=body).feature

    assert feature({}, "search") == "search"
    assert feature({"x-levergate-feature": "faq"}, "search") == "faq"
    assert feature({"x-levergate-feature": ""}, "search") == "search"
    assert feature({}, 7) == ""
    with pytest.raises(BadRequest) as caught:
        feature({}, "x" * 200)
    assert caught.value.param == "metadata.feature"


@pytest.mark.parametrize(
    ("header", "value", "says"),
    [
        ("x-levergate-priority", "urgent", "interactive, default or batch"),
        ("x-levergate-timeout", "soon", "finite"),
        ("x-levergate-timeout", "nan", "finite"),
        ("x-levergate-timeout", "0.1", "at least 0.5"),
        ("x-levergate-feature", "two words", "visible ASCII"),
        ("x-levergate-cache-ttl", "-1", "non-negative"),
        ("x-levergate-cache-ttl", "inf", "non-negative"),
        ("cache-control", "max-age=nan", "max-age"),
        ("x-levergate-speculative", "maybe", "on or off"),
        ("x-levergate-workflow", "a b", "A-Z"),
        ("x-levergate-async", "maybe", "true or false"),
        ("x-levergate-defer", "2h", "24h"),
        ("x-levergate-deadline", "tomorrow", "Unix time"),
        ("x-levergate-deadline", "²", "Unix time"),
        ("x-levergate-webhook", "https://evil.example/", "URLs are not accepted"),
        ("x-levergate-webhook-url", "https://evil.example/", "URLs are not accepted"),
    ],
)
def test_a_bad_value_is_a_400_that_names_its_header(header: str, value: str, says: str) -> None:
    with pytest.raises(BadRequest, match=says) as caught:
        parse({header: value})
    assert caught.value.http_status == 400
    assert caught.value.param == header
    assert caught.value.code in (INVALID, "webhook_url_not_allowed")


def test_library_options_override_the_headers_and_are_checked_the_same_way() -> None:
    base = parse({"x-levergate-priority": "batch", "x-levergate-feature": "faq"})
    assert with_options(base, now=NOW, limits=LIMITS, options=NO_OPTIONS) is base
    options = Options(priority="interactive", timeout=3, cache=False, speculative=True)
    got = with_options(base, now=NOW, limits=LIMITS, options=options)
    assert got == Controls(priority=Priority.INTERACTIVE, deadline=NOW + 3, feature="faq",
                           cache=NO_CACHE, speculative=True)  # fmt: skip
    whole = Controls(workflow="wf", priority=Priority.BATCH)
    assert with_options(base, now=NOW, limits=LIMITS, options=Options(controls=whole)) == whole
    for bad, param in ((Options(priority="high"), "priority"), (Options(timeout=math.inf),
                       "timeout"), (Options(feature=""), "feature"),
                       (Options(controls=Controls(feature="a b")), "controls.feature"),
                       (Options(priority=0), "priority"), (Options(feature=7), "feature"),  # type: ignore[arg-type]
                       (Options(controls=Controls(workflow="")), "controls.workflow")):  # fmt: skip
        with pytest.raises(BadRequest) as caught:
            with_options(base, now=NOW, limits=LIMITS, options=bad)
        assert caught.value.param == param


def test_the_client_timeout_is_read_only_when_asked_and_never_refused() -> None:
    sdk = {"x-stainless-read-timeout": "30.0"}
    assert parse_controls(sdk, now=NOW, limits=LIMITS) is DEFAULT_CONTROLS
    assert parse_controls(sdk, now=NOW, limits=LIMITS, patience=True).patience == NOW + 30
    huge = {"x-stainless-read-timeout": "1e9"}
    assert parse_controls(huge, now=NOW, limits=LIMITS, patience=True).patience == NOW + 60
    for junk in ("", "soon", "-1", "0", "nan", "inf"):
        got = parse_controls({"x-stainless-read-timeout": junk}, now=NOW, limits=LIMITS,
                             patience=True)  # fmt: skip
        assert got.patience is None, junk

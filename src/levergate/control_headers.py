"""The one place a request's control headers are read: `x-levergate-*` and `Cache-Control` in,
a `Controls` value out (core/controls.py). `Gateway.make_call` calls it for every edge (the
ASGI app, the in-process transports, library calls that pass `headers=`); layers read
`call.ctx.controls` and never these headers.

Every value is bounded and checked here, before any work: a bad one is a 400
`invalid_header_value` whose `param` names the header — never a 500, never silently ignored
(a typo in a priority used to run the request as `default`). Unknown `Cache-Control`
directives are ignored, as HTTP caches do.

    x-levergate-priority     interactive | default | batch (any case)
    x-levergate-timeout      seconds, finite, >= limits.min_timeout_seconds; clamped to
                             limits.max_timeout_seconds; becomes an absolute deadline
    x-levergate-feature      1-128 visible ASCII characters (else the body's metadata.feature)
    Cache-Control            no-cache, no-store, max-age=<seconds>
    x-levergate-cache-ttl    seconds, finite, >= 0 (the cache clamps it to cache.max_ttl_seconds)
    x-levergate-speculative  on|off (true/false, 1/0, yes/no)
    x-levergate-workflow     1-128 of [A-Za-z0-9._:-]
    x-levergate-async        true|false (1/0)
    x-levergate-defer        24h
    x-levergate-deadline     Unix seconds (up to 12 digits)
    x-levergate-webhook      a target name, 1-64 of [A-Za-z0-9_.-]; a URL is refused
    x-levergate-webhook-url  always refused (targets come from config only: no SSRF)
    x-stainless-read-timeout the client SDK's own timeout, seconds (the OpenAI and Anthropic
                             SDKs send it): `Controls.patience`; not ours, so a value that is
                             not a positive finite number is ignored, never a 400

`with_options` is the library's side of the same edge: typed arguments checked the same way.

The tenant (`x-levergate-tenant`, with auth off) is not a control: `levergate.principal` decides
it, by one rule for every route.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from levergate.config import RequestLimitsSettings
from levergate.core.controls import (
    DEFAULT_CACHE,
    DEFAULT_CONTROLS,
    NO_CACHE,
    AsyncAsk,
    CachePolicy,
    Controls,
    Priority,
)
from levergate.errors import BadRequest

PRIORITY_HEADER = "x-levergate-priority"
TIMEOUT_HEADER = "x-levergate-timeout"
FEATURE_HEADER = "x-levergate-feature"
CACHE_CONTROL_HEADER = "cache-control"
TTL_HEADER = "x-levergate-cache-ttl"
SPECULATIVE_HEADER = "x-levergate-speculative"
WORKFLOW_HEADER = "x-levergate-workflow"
ASYNC_HEADER = "x-levergate-async"
DEFER_HEADER = "x-levergate-defer"
DEADLINE_HEADER = "x-levergate-deadline"
WEBHOOK_HEADER = "x-levergate-webhook"
WEBHOOK_URL_HEADER = "x-levergate-webhook-url"
CLIENT_TIMEOUT_HEADER = "x-stainless-read-timeout"
# Every request header this module reads: a test pins that no other module reads one.
CONTROL_HEADERS = (PRIORITY_HEADER, TIMEOUT_HEADER, FEATURE_HEADER, TTL_HEADER,
                   SPECULATIVE_HEADER, WORKFLOW_HEADER, ASYNC_HEADER, DEFER_HEADER,
                   DEADLINE_HEADER, WEBHOOK_HEADER, WEBHOOK_URL_HEADER,
                   CLIENT_TIMEOUT_HEADER)  # fmt: skip
ASYNC_HEADERS = (ASYNC_HEADER, DEFER_HEADER, DEADLINE_HEADER, WEBHOOK_HEADER, WEBHOOK_URL_HEADER)
# Read on every request: the client timeout only when the tier policy asks for it.
_READ = frozenset({*CONTROL_HEADERS, CACHE_CONTROL_HEADER}) - {CLIENT_TIMEOUT_HEADER}

MAX_FEATURE_CHARS = 128  # a metrics label and a routing/cache rule key
_FEATURE = re.compile(rf"[!-~]{{1,{MAX_FEATURE_CHARS}}}")
_WORKFLOW = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_WEBHOOK = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ON = frozenset({"on", "true", "1", "yes"})
_OFF = frozenset({"off", "false", "0", "no"})
_TRUE, _FALSE = frozenset({"true", "1"}), frozenset({"false", "0"})
INVALID = "invalid_header_value"


@dataclass(frozen=True, slots=True)
class Options:
    """A library call's typed controls, as `Gateway.chat` and its siblings take them (None:
    not given). `cache=False` reads and writes no cache; a `CachePolicy` says exactly how."""

    priority: Priority | str | None = None
    timeout: float | None = None  # seconds from now
    feature: str | None = None
    cache: CachePolicy | bool | None = None
    speculative: bool | None = None
    controls: Controls | None = None


NO_OPTIONS = Options()


def invalid(header: str, must: str) -> BadRequest:
    return BadRequest(f"'{header}' {must}.", code=INVALID, param=header)


def parse_controls(
    headers: Mapping[str, str],
    *,
    now: float,
    limits: RequestLimitsSettings,
    body_feature: object = None,
    patience: bool = False,
) -> Controls:
    """The request's controls (headers lower-cased, as the edge hands them over). `now` is the
    gateway clock's time, which a timeout becomes a deadline on; `body_feature` the body's
    `metadata.feature`, used when no feature header is sent; `patience`: read the client's
    own timeout too (`tiers.client_timeout`)."""
    sent = _READ.intersection(headers)  # one pass over the headers: most send none of these
    fields: dict[str, Any] = {}
    if sent:
        fields = _fields(headers, sent, now=now, limits=limits)
    if "feature" not in fields and isinstance(body_feature, str) and body_feature:
        fields["feature"] = feature_of(body_feature, where="metadata.feature")
    if patience and (until := patience_of(headers, now=now, limits=limits)) is not None:
        fields["patience"] = until
    return Controls(**fields) if fields else DEFAULT_CONTROLS


def _fields(
    headers: Mapping[str, str], sent: frozenset[str], *, now: float, limits: RequestLimitsSettings
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if PRIORITY_HEADER in sent:
        fields["priority"] = priority_of(headers[PRIORITY_HEADER])
    if TIMEOUT_HEADER in sent:
        timeout = timeout_of(headers[TIMEOUT_HEADER], header=TIMEOUT_HEADER, limits=limits)
        fields["deadline"] = now + timeout
    if FEATURE_HEADER in sent and (feature := headers[FEATURE_HEADER]):
        fields["feature"] = feature_of(feature, where=FEATURE_HEADER)
    if CACHE_CONTROL_HEADER in sent or TTL_HEADER in sent:
        fields["cache"] = cache_policy(headers)
    if SPECULATIVE_HEADER in sent:
        fields["speculative"] = _switch(headers[SPECULATIVE_HEADER], SPECULATIVE_HEADER)
    if WORKFLOW_HEADER in sent:
        if _WORKFLOW.fullmatch(workflow := headers[WORKFLOW_HEADER]) is None:
            raise invalid(WORKFLOW_HEADER, "must be 1 to 128 of A-Z a-z 0-9 . _ : -")
        fields["workflow"] = workflow
    if not sent.isdisjoint(ASYNC_HEADERS):
        fields["run_async"] = async_ask(headers)
    return fields


def patience_of(
    headers: Mapping[str, str], *, now: float, limits: RequestLimitsSettings
) -> float | None:
    """When the client stops waiting (`x-stainless-read-timeout` from now, clamped like a
    timeout), or None: absent or not a positive finite number (not our header: never a 400)."""
    text = headers.get(CLIENT_TIMEOUT_HEADER)
    if text is None:
        return None
    seconds = _number(text)
    if not (math.isfinite(seconds) and seconds > 0):
        return None
    return now + min(seconds, limits.max_timeout_seconds)


def async_controls(headers: Mapping[str, str]) -> AsyncAsk | None:
    """The async controls, None when the request sent none (the ordinary route's one test)."""
    if not any(name in headers for name in ASYNC_HEADERS):
        return None
    return async_ask(headers)


def with_options(
    controls: Controls, *, now: float, limits: RequestLimitsSettings, options: Options
) -> Controls:
    """A library call's typed options over the controls its headers gave (`Gateway.chat(...,
    priority=, timeout=, feature=, cache=, speculative=, controls=)`), checked as the headers
    are (a 400 naming the argument): `controls` replaces them whole, the others then override
    one field each."""
    if options.controls is not None:
        controls = options.controls
        # Built by hand: its names reach metrics labels and records, so they meet the bounds too.
        if controls.feature:
            feature_of(controls.feature, where="controls.feature")
        if controls.workflow is not None and _WORKFLOW.fullmatch(controls.workflow) is None:
            raise invalid("controls.workflow", "must be 1 to 128 of A-Z a-z 0-9 . _ : -")
    if options.priority is not None:
        priority = options.priority
        if not isinstance(priority, Priority):
            priority = priority_of(priority, where="priority")
        controls = _with(controls, priority=priority)
    if options.timeout is not None:
        timeout = timeout_of(options.timeout, header="timeout", limits=limits)
        controls = _with(controls, deadline=now + timeout)
    if options.feature is not None:
        controls = _with(controls, feature=feature_of(options.feature, where="feature"))
    if options.cache is not None:
        cache = options.cache
        if isinstance(cache, bool):
            cache = DEFAULT_CACHE if cache else NO_CACHE
        controls = _with(controls, cache=cache)
    if options.speculative is not None:
        controls = _with(controls, speculative=options.speculative)
    return controls


def _with(controls: Controls, **changes: Any) -> Controls:
    return dataclasses.replace(controls, **changes)


def priority_of(text: str, *, where: str = PRIORITY_HEADER) -> Priority:
    try:
        return Priority[text.strip().upper()]
    except (KeyError, AttributeError):  # AttributeError: a library caller's non-string
        raise invalid(where, "must be interactive, default or batch") from None


def timeout_of(text: str | float, *, header: str, limits: RequestLimitsSettings) -> float:
    """Seconds a client gives its request: garbage and values no answer can meet are a 400
    (never a 504 and a warning line per request), a value beyond `max_timeout_seconds` is
    clamped to it."""
    value = _number(text)
    if not math.isfinite(value):
        raise invalid(header, "must be a finite number of seconds")
    if value < limits.min_timeout_seconds:
        raise invalid(header, f"must be at least {limits.min_timeout_seconds} seconds")
    return min(value, limits.max_timeout_seconds)


def feature_of(text: str, *, where: str) -> str:
    if not isinstance(text, str) or _FEATURE.fullmatch(text) is None:
        raise invalid(where, f"must be 1 to {MAX_FEATURE_CHARS} visible ASCII characters")
    return text


def cache_policy(headers: Mapping[str, str]) -> CachePolicy:
    lookup = store = True
    max_age: float | None = None
    for part in headers.get(CACHE_CONTROL_HEADER, "").split(","):
        name, _, value = part.strip().partition("=")
        name = name.strip().lower()
        if name == "no-cache":
            lookup = False
        elif name == "no-store":
            store = False
        elif name == "max-age":
            max_age = _seconds(value, "Cache-Control max-age", param=CACHE_CONTROL_HEADER)
    ttl = None
    if TTL_HEADER in headers:
        ttl = _seconds(headers[TTL_HEADER], TTL_HEADER, param=TTL_HEADER) or None
    policy = CachePolicy(lookup=lookup, store=store, max_age=max_age, ttl=ttl)
    return DEFAULT_CACHE if policy == DEFAULT_CACHE else policy


def async_ask(headers: Mapping[str, str]) -> AsyncAsk:
    """The async controls, each checked for its shape; whether the webhook target exists and
    whether the deadline is far enough to defer is the async service's to judge."""
    if WEBHOOK_URL_HEADER in headers:
        raise BadRequest("Webhook URLs are not accepted; name a configured target.",
                         code="webhook_url_not_allowed", param=WEBHOOK_URL_HEADER)  # fmt: skip
    asked = False
    if (flag := headers.get(ASYNC_HEADER)) is not None:
        asked = _switch(flag, ASYNC_HEADER, on=_TRUE, off=_FALSE, say="true or false")
    window = headers.get(DEFER_HEADER)
    if window is not None and window != "24h":
        raise invalid(DEFER_HEADER, 'must be "24h" (the providers\' batch window)')
    not_after = None
    if (text := headers.get(DEADLINE_HEADER)) is not None:
        if not (text.isascii() and text.isdigit()) or len(text) > 12:
            raise invalid(DEADLINE_HEADER, "must be a Unix time in seconds")
        not_after = int(text)
    webhook = headers.get(WEBHOOK_HEADER)
    if webhook is not None:
        if "/" in webhook or ":" in webhook:
            raise BadRequest(
                f"'{WEBHOOK_HEADER}' names a webhook target from the gateway's config; URLs "
                "are not accepted.",
                code="webhook_url_not_allowed",
                param=WEBHOOK_HEADER,
            )
        if _WEBHOOK.fullmatch(webhook) is None:
            raise BadRequest(f"Unknown webhook target {webhook[:64]!r}.",
                             code="unknown_webhook_target", param=WEBHOOK_HEADER)  # fmt: skip
    return AsyncAsk(asked=asked, defer=window is not None, not_after=not_after, webhook=webhook)


def _switch(
    text: str, header: str, *, on: frozenset[str] = _ON, off: frozenset[str] = _OFF,
    say: str = "on or off",
) -> bool:  # fmt: skip
    word = text.strip().lower()
    if word in on:
        return True
    if word in off:
        return False
    raise invalid(header, f"must be {say}")


def _number(text: str | float) -> float:
    if isinstance(text, bool):
        return math.nan
    if isinstance(text, int | float):
        return float(text)
    try:
        return float(text.strip().strip('"'))
    except ValueError:
        return math.nan


def _seconds(text: str, name: str, *, param: str) -> float:
    value = _number(text)
    if not (math.isfinite(value) and value >= 0):
        raise BadRequest(
            f"'{name}' must be a finite, non-negative number of seconds.",
            code=INVALID,
            param=param,
        )
    return value

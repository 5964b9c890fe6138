"""Admission of one generation request: concurrency, RPM/TPM, then faults.

A request the provider refuses leaves as a `SimError` carrying the status, OpenAI's error body
and headers (429 with `retry-after`, `retry-after-ms` and the `x-ratelimit-*` set; 500/503
with OpenAI's own messages). An admitted request gets the fault it must suffer on the wire
(hang, disconnect, malformed, slow, or none) and the `x-ratelimit-*` headers for its answer.

A fault forced with `x-sim-fault` skips the limits, so a test gets exactly that fault no
matter how many requests it already sent.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from levergate.simulator.faults import ERROR_MESSAGES, FAULT_HEADER, Fault, draw
from levergate.simulator.limits import RateLimiter, format_duration, retry_headers
from levergate.simulator.responses import SimError
from levergate.simulator.settings import SimSettings
from levergate.simulator.stats import Stats

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Request:
    key: str
    model: str
    tokens: int  # what TPM charges: prompt plus the output cap of every choice
    forced: Fault | None
    now: float


_ERRORS = frozenset({Fault.ERROR_500, Fault.ERROR_503, Fault.OVERLOADED})


def admit(
    *,
    settings: SimSettings,
    limiter: RateLimiter | None,
    stats: Stats,
    rng: random.Random,
    request: Request,
) -> tuple[Fault | None, Headers]:
    """The fault to apply (None for a clean answer) and the rate-limit headers of the answer;
    raises `SimError` for a refusal."""
    fault = request.forced
    headers: Headers = ()
    if fault is None:
        limit = settings.limits.max_concurrency
        if limit is not None and stats.in_flight >= limit:
            stats.rate_limited += 1
            raise SimError(
                429,
                f"Too many concurrent requests: at most {limit} (simulated).",
                error_type="requests",
                code="concurrency_limit_exceeded",
                headers=retry_headers(1.0),
            )
        if limiter is not None:
            verdict = limiter.admit(key=request.key, tokens=request.tokens, now=request.now)
            headers = verdict.headers
            if not verdict.admitted:
                stats.rate_limited += 1
                raise _rate_limited(
                    verdict.limited_by, verdict.retry_after, headers, request, settings
                )
        fault = draw(settings=settings.faults, rng=rng)
    if fault is None:
        return None, headers
    stats.faults[fault.value] += 1
    if fault in _ERRORS:
        status = int(fault.value)
        kind = "overloaded_error" if fault is Fault.OVERLOADED else "server_error"
        raise SimError(status, ERROR_MESSAGES[status], error_type=kind)
    if fault is Fault.RATE_LIMIT:
        stats.rate_limited += 1
        exhausted = limiter.exhausted_headers(key=request.key, now=request.now) if limiter else ()
        raise SimError(
            429,
            f"Rate limit reached for {request.model} (simulated, forced by {FAULT_HEADER}).",
            error_type="requests",
            code="rate_limit_exceeded",
            headers=exhausted + retry_headers(1.0),
        )
    return fault, headers


def _rate_limited(
    limited_by: str,
    retry_after: float,
    headers: Headers,
    request: Request,
    settings: SimSettings,
) -> SimError:
    """OpenAI's 429: error `type` is "requests" or "tokens", code `rate_limit_exceeded`. A
    request larger than the whole TPM limit can never succeed, so it gets no Retry-After."""
    by_requests = limited_by == "requests"
    per_minute = "RPM" if by_requests else "TPM"
    limit = settings.limits.rpm if by_requests else settings.limits.tpm
    requested = 1 if by_requests else request.tokens
    where = f"{request.model} (simulated) on {limited_by} per min ({per_minute})"
    if math.isinf(retry_after):
        message = f"Request too large for {where}: Limit {limit}, Requested {requested}."
        return SimError(
            429, message, error_type=limited_by, code="rate_limit_exceeded", headers=headers
        )
    message = (
        f"Rate limit reached for {where}: Limit {limit}, Requested {requested}. "
        f"Please try again in {format_duration(retry_after)}."
    )
    return SimError(
        429,
        message,
        error_type=limited_by,
        code="rate_limit_exceeded",
        headers=headers + retry_headers(retry_after),
    )

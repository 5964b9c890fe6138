"""Provider-style rate limits: requests and tokens per minute, per API key.

Each limit is a sliding-window log (`SlidingWindow`): admissions are remembered with their time
and cost, and a request is admitted only if the costs still inside the window plus its own stay
within the limit. That is exact for every window, unlike fixed per-minute counters (which admit
up to twice the limit across a minute boundary) or a refilling bucket (which admits a full
burst and then the refill inside the same minute). Admissions closer together than `quantum`
are merged into one entry stamped with the *later* time, so memory stays bounded
(window / quantum entries) and the error only ever errs on the strict side.

Time is passed in (`now`), never read here: the math is pure and property-tested.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from levergate.simulator.settings import LimitSettings

_MAX_KEYS = 10_000  # idle keys are forgotten beyond this, so unknown keys cannot grow memory
# Waits are rounded up by this much, so a client that sleeps exactly the advertised time is not
# refused again by float rounding (now + wait landing an ulp before the entry expires).
_SLACK = 1e-6


class SlidingWindow:
    __slots__ = ("_costs", "_group_start", "_times", "_used", "limit", "quantum", "window")

    def __init__(self, *, limit: int, window: float = 60.0, quantum: float = 0.01) -> None:
        self.limit = limit
        self.window = window
        self.quantum = quantum
        self._times: deque[float] = deque()
        self._costs: deque[int] = deque()
        self._used = 0
        self._group_start = -math.inf

    def _expire(self, now: float) -> None:
        horizon = now - self.window
        times, costs = self._times, self._costs
        while times and times[0] <= horizon:
            times.popleft()
            self._used -= costs.popleft()

    def used(self, now: float) -> int:
        self._expire(now)
        return self._used

    def remaining(self, now: float) -> int:
        return max(0, self.limit - self.used(now))

    def wait_for(self, cost: int, now: float) -> float:
        """Seconds until `cost` fits (0 when it fits now, inf when it never can)."""
        if cost > self.limit:
            return math.inf
        excess = self.used(now) + cost - self.limit
        if excess <= 0:
            return 0.0
        freed = 0
        for stamp, spent in zip(self._times, self._costs, strict=True):
            freed += spent
            if freed >= excess:
                return max(0.0, stamp + self.window - now) + _SLACK
        return self.window  # unreachable while the log is consistent

    def commit(self, cost: int, now: float) -> None:
        self._expire(now)
        if self._times and now - self._group_start < self.quantum:
            self._times[-1] = now
            self._costs[-1] += cost
        else:
            self._times.append(now)
            self._costs.append(cost)
            self._group_start = now
        self._used += cost

    def reset_after(self, now: float) -> float:
        """Seconds until the window is back to its full limit (OpenAI's `x-ratelimit-reset-*`)."""
        self._expire(now)
        return max(0.0, self._times[-1] + self.window - now) if self._times else 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one admission. `retry_after` is 0 when admitted and inf when the request
    can never fit (its tokens exceed the TPM limit)."""

    admitted: bool
    retry_after: float
    limited_by: str  # "requests" | "tokens" | ""
    headers: tuple[tuple[str, str], ...]


class RateLimiter:
    """RPM and TPM windows per key; a request is committed to both or to neither."""

    def __init__(self, *, settings: LimitSettings) -> None:
        self._settings = settings
        self._keys: dict[str, tuple[SlidingWindow | None, SlidingWindow | None]] = {}

    def _windows(self, key: str, now: float) -> tuple[SlidingWindow | None, SlidingWindow | None]:
        windows = self._keys.get(key)
        if windows is None:
            if len(self._keys) >= _MAX_KEYS:
                self._forget_idle(now)
            s = self._settings
            windows = (
                None if s.rpm is None else SlidingWindow(limit=s.rpm, window=s.window_seconds),
                None if s.tpm is None else SlidingWindow(limit=s.tpm, window=s.window_seconds),
            )
            self._keys[key] = windows
        return windows

    def _forget_idle(self, now: float) -> None:
        for key, pair in list(self._keys.items()):
            if all(w is None or w.used(now) == 0 for w in pair):
                del self._keys[key]

    def admit(self, *, key: str, tokens: int, now: float) -> Verdict:
        requests, token_window = self._windows(key, now)
        wait_r = requests.wait_for(1, now) if requests else 0.0
        wait_t = token_window.wait_for(tokens, now) if token_window else 0.0
        admitted = wait_r == 0 and wait_t == 0
        if admitted:
            if requests:
                requests.commit(1, now)
            if token_window:
                token_window.commit(tokens, now)
        limited_by = "" if admitted else ("tokens" if wait_t >= wait_r else "requests")
        return Verdict(
            admitted=admitted,
            retry_after=max(wait_r, wait_t),
            limited_by=limited_by,
            headers=_headers(requests, token_window, now),
        )

    def exhausted_headers(self, *, key: str, now: float) -> tuple[tuple[str, str], ...]:
        """Headers for a forced 429: the configured limits with nothing remaining."""
        requests, token_window = self._windows(key, now)
        pairs = _headers(requests, token_window, now)
        return tuple(
            (n, "0") if n.startswith("x-ratelimit-remaining") else (n, v) for n, v in pairs
        )


def _headers(
    requests: SlidingWindow | None, tokens: SlidingWindow | None, now: float
) -> tuple[tuple[str, str], ...]:
    headers: list[tuple[str, str]] = []
    for suffix, window in (("requests", requests), ("tokens", tokens)):
        if window is not None:
            headers.append((f"x-ratelimit-limit-{suffix}", str(window.limit)))
            headers.append((f"x-ratelimit-remaining-{suffix}", str(window.remaining(now))))
            headers.append(
                (f"x-ratelimit-reset-{suffix}", format_duration(window.reset_after(now)))
            )
    return tuple(headers)


def retry_headers(seconds: float) -> tuple[tuple[str, str], ...]:
    """`Retry-After` in whole seconds (rounded up, at least 1) and the precise `retry-after-ms`."""
    seconds = round(seconds, 5)  # drop the slack added to waits before rounding up
    return (
        ("retry-after", str(max(1, math.ceil(seconds)))),
        ("retry-after-ms", str(max(1, math.ceil(round(seconds * 1000, 2))))),
    )


def format_duration(seconds: float) -> str:
    """OpenAI's reset format, Go-style durations: `120ms`, `1s`, `8.64s`, `6m0s`, `1h2m3s`."""
    seconds = round(seconds, 5)
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    millis = math.ceil(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs = f"{millis / 1000:.3f}".rstrip("0").rstrip(".")
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"

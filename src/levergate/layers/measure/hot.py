"""Metric updates on the request path at the cost of an addition (issue 22).

prometheus_client makes each update a chain of Python calls (`Counter.inc` checks the child is
observable through two more calls, then `MutexValue.inc` takes a lock; a histogram's `observe`
walks its bounds one by one): a default request's dozen updates were 59 calls, ~8% of the
gateway's calls per request. The values those updates write are read only by a scrape.

`counter`, `gauge` and `histogram` take a bound child (`metric.labels(...)`, or an unlabelled
metric) and return what the request path updates instead: in a process of its own, the child's
value objects are swapped for plain floats (`_Plain`) that the returned handle adds to, and
prometheus_client still reads them at a scrape (`get()`), so /metrics is the same text. A
float the event loop alone writes needs no lock: a scrape reads it from a worker thread
(`Telemetry.exposition`) and sees it before or after an addition, never torn. Only children
written on the event loop may be given here; a metric also written from another thread keeps
its lock.

Under `PROMETHEUS_MULTIPROC_DIR` (`levergate serve --workers N`) the values are
prometheus_client's memory-mapped files, which other processes read: the handle is then the
child itself, unchanged. Anything but prometheus_client's own `MutexValue` is left alone the same
way, so a version that changes its internals falls back to the slow path rather than breaking
(tests/unit/layers/measure/test_hot.py pins the exposition against the public API's).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Protocol

from prometheus_client.values import MutexValue

__all__ = ["Adds", "Observes", "counter", "gauge", "histogram"]


class Adds(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Observes(Protocol):
    def observe(self, amount: float) -> None: ...


class _Plain:
    """A child's value as a plain float (`MutexValue`'s interface, no lock)."""

    __slots__ = ("_exemplar", "_value")
    _multiprocess = False

    def __init__(self, value: float) -> None:
        self._value = value
        self._exemplar: Any = None

    def inc(self, amount: float = 1) -> None:
        self._value += amount

    def set(self, value: float, timestamp: float | None = None) -> None:
        del timestamp
        self._value = value

    def set_exemplar(self, exemplar: Any) -> None:
        self._exemplar = exemplar

    def get(self) -> float:
        return self._value

    def get_exemplar(self) -> Any:
        return self._exemplar


class _CounterValue(_Plain):
    """A counter's value: refuses a negative amount as `Counter.inc` does."""

    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self._value += amount


def _plain(value: Any, kind: type[_Plain] = _Plain) -> _Plain | None:
    """`value` as a plain float (itself if it is one already: a child handed here twice), or
    None when it is neither that nor a lock-guarded one in this process."""
    if isinstance(value, _Plain):
        return value
    if type(value) is not MutexValue:
        return None
    locked: Any = value  # prometheus_client's own methods are untyped
    plain = kind(locked.get())
    plain.set_exemplar(locked.get_exemplar())
    return plain


def counter(child: Any) -> Adds:
    """What to `inc(amount)` for a counter's child (amounts of at least 0)."""
    plain = _plain(child._value, _CounterValue)
    if plain is None:
        return child  # type: ignore[no-any-return]
    child._value = plain
    return plain


def gauge(child: Any) -> Adds:
    """What to `inc(amount)` for a gauge's child (`inc(-1)` to decrement)."""
    plain = _plain(child._value)
    if plain is None:
        return child  # type: ignore[no-any-return]
    child._value = plain
    return plain


class _Histogram:
    """A histogram child's `observe`: the sum and the one bucket the amount falls in (the
    scrape accumulates the buckets, as prometheus_client's does)."""

    __slots__ = ("_bounds", "_buckets", "_sum")

    def __init__(self, bounds: list[float], total: _Plain, buckets: list[_Plain]) -> None:
        self._bounds = bounds
        self._sum = total
        self._buckets = buckets

    def observe(self, amount: float) -> None:
        self._sum._value += amount
        # The first bound at or above the amount (+Inf is the last); NaN falls in none.
        at = bisect_left(self._bounds, amount)
        if amount <= self._bounds[at]:
            self._buckets[at]._value += 1


def histogram(child: Any) -> Observes:
    """What to `observe(amount)` for a histogram's child."""
    total = _plain(child._sum)
    buckets = [_plain(bucket) for bucket in child._buckets]
    if total is None or any(bucket is None for bucket in buckets):
        return child  # type: ignore[no-any-return]
    child._sum = total
    plain = [bucket for bucket in buckets if bucket is not None]
    child._buckets[:] = plain
    return _Histogram(list(child._upper_bounds), total, plain)

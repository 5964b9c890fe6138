"""Request records for the request log's tests: real `RequestRecord`s, built directly."""

from __future__ import annotations

from typing import Any

from levergate.core.call import CacheOutcome, CacheResult, Note, RouteDecision
from levergate.layers.measure.record import RequestRecord, Side, Timings, Tokens
from levergate.policies.pricing import Lever
from levergate.requestlog.row import row_of


def record(n: int = 0, **changes: Any) -> RequestRecord:
    base = RequestRecord(
        request_id=f"req-{n}", kind="chat", tenant=f"t{n % 3}", feature=f"f{n % 2}",
        model="auto" if n % 4 == 0 else "fast", alias="fast", upstream="sim",
        upstream_model="fast-1", outcome="ok" if n % 5 else "rate_limited",
        status=200 if n % 5 else 429, error=None if n % 5 else "RateLimited",
        timings=Timings(total=0.01 * (n % 50 + 1), upstream=0.008, overhead=0.001,
                        ttft=0.005 if n % 2 else None),
        tokens=Tokens(100 + n, 20, 0, 10), cost_usd=0.001 * (n % 7),
        savings={Lever.EXACT: 0.002} if n % 3 == 0 else {},
        key_id=f"key-{n % 2}",
    )  # fmt: skip
    return base._replace(**changes)


def rich_record() -> RequestRecord:
    """Every optional part set: a route decision, side spends, notes, a cache result."""
    return record(
        1, decision=RouteDecision("learned", "auto", "fast", "smart", "score 0.2", 0.2),
        side=(Side("fast", "cascade", 0.0005),), notes=(Note("trim", "kept 3 turns"),),
        cache=CacheResult("exact", CacheOutcome.MISS), escalations=1,
        escalation_reasons=("mean_logprob",), savings={Lever.ROUTE: 0.004, Lever.TRIM: -0.001},
    )  # fmt: skip


def rows(count: int, *, start: float = 1_000_000.0) -> list[tuple[Any, ...]]:
    """`count` rows, one a second from `start`."""
    return [row_of(start + n, record(n)) for n in range(count)]

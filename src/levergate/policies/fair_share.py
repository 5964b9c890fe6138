"""Max-min fair shares of free slots across tenants: the batch runner's line scheduler
(batch/runner.py) asks this how many of its free line slots each tenant with waiting lines
may claim, so one tenant's 9,000 queued lines no longer delay another tenant's single line.

Water-filling: each free slot goes, one at a time, to the tenant with the fewest lines in
flight, ties broken by the order of `waiting` (the caller rotates it every round, which makes
equal tenants take turns: round-robin), never past `cap` lines in flight for one tenant.
Pure and deterministic; the invariants are property-tested (tests/properties/).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence


def shares(
    *, free: int, waiting: Sequence[str], inflight: Mapping[str, int], cap: int
) -> dict[str, int]:
    """Slots per tenant (only tenants given at least one), summing to at most `free`."""
    heap = [
        (inflight.get(tenant, 0), turn, tenant)
        for turn, tenant in enumerate(dict.fromkeys(waiting))
        if inflight.get(tenant, 0) < cap
    ]
    heapq.heapify(heap)
    given: dict[str, int] = {}
    left = free
    while left > 0 and heap:
        held, turn, tenant = heapq.heappop(heap)
        given[tenant] = given.get(tenant, 0) + 1
        left -= 1
        if held + 1 < cap:
            heapq.heappush(heap, (held + 1, turn, tenant))
    return given


def rotated(items: Sequence[str], turn: int) -> list[str]:
    """`items` started at position `turn` (mod its length): whose tie it is this round."""
    if not items:
        return []
    at = turn % len(items)
    return [*items[at:], *items[:at]]


def line_slots(*, concurrency: int, in_flight: int, interactive: int, share: float) -> int:
    """Lines the batch runner may claim now: up to `concurrency` in flight, and while client
    requests are in flight (`interactive`), up to `share` of it (at least one), so interactive
    traffic comes first on the loop they share (core/interactive.py). Lines already in flight
    past the smaller bound run to their end: nothing is taken back, no more are claimed."""
    bound = concurrency if interactive <= 0 else max(1, int(concurrency * share))
    return max(0, bound - in_flight)

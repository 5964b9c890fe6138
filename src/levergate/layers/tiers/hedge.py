"""A hedged attempt (the Tiers layer's): when an attempt at a slow tier has overrun its own
estimate and the deadline leaves just the time a faster tier needs, that tier is asked too and
the first answer wins ("hedged requests", Dean and Barroso, The Tail at Scale). The loser is
cancelled — a stream it already began is closed — so nothing outlives the call; an attempt that
fails leaves the other to answer. A stream counts as answered at its first event.

Racing, not giving up: an attempt that overran its estimate is often about to answer, and one
started from scratch at a faster tier may still be slower than that.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable

from levergate.core.clock import Clock, timeout
from levergate.core.reply import Completed, Reply

Attempt = Callable[[], Awaitable[Reply]]


async def primed(attempt: Attempt) -> Reply:
    """The attempt's reply, a stream with its first event pulled (so it has answered)."""
    reply = await attempt()
    return reply if isinstance(reply, Completed) else await reply.prime()


class Won(enum.Enum):
    ALONE = "alone"  # the first answered in time: the second was never asked
    FIRST = "first"  # both ran, the first answered first
    SECOND = "second"


async def hedged(
    first: Attempt, second: Attempt, *, after: float, clock: Clock
) -> tuple[Reply, Won]:
    """`first`'s reply, or — once `after` seconds pass without it — the first reply of `first`
    and `second`, and which it was."""
    one = asyncio.ensure_future(primed(first))
    attempts = [one]
    won: asyncio.Future[Reply] | None = None
    try:
        try:
            async with timeout(clock, after):
                reply = await asyncio.shield(one)
                won = one
                return reply, Won.ALONE
        except TimeoutError:
            pass
        two = asyncio.ensure_future(primed(second))
        attempts.append(two)
        won = await _first_of(one, two)
        return won.result(), Won.SECOND if won is two else Won.FIRST
    finally:
        await _settle([a for a in attempts if a is not won])


async def _first_of(
    one: asyncio.Future[Reply], two: asyncio.Future[Reply]
) -> asyncio.Future[Reply]:
    """The attempt that answered first (the first one when both did at once); the last
    failure when neither answers."""
    pending: set[asyncio.Future[Reply]] = {one, two}
    failure: BaseException | None = None
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for finished in (one, two):
            if finished not in done:
                continue
            if finished.exception() is None:
                return finished
            failure = finished.exception()
    if failure is None:  # pragma: no cover - asyncio.wait returns only when one is done
        raise RuntimeError("neither attempt finished")
    raise failure


async def _settle(losers: list[asyncio.Future[Reply]]) -> None:
    """Cancel the attempts still running; close a stream nobody took."""
    for attempt in losers:
        if not attempt.done():
            attempt.cancel()
    outcomes = await asyncio.gather(*losers, return_exceptions=True)
    for outcome in outcomes:  # a cancelled or failed loser is settled, not raised
        if not isinstance(outcome, BaseException) and not isinstance(outcome, Completed):
            await outcome.aclose()

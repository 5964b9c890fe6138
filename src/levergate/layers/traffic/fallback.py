"""Fallback: when a model alias fails, the next alias in its list answers instead.

FRONT, right above Dispatch (under routing and the caches): a fallback is another alias with
its own full stack — its own retries, balancing and limits — so "gpt-4o, else claude, else the
local model" is just three aliases in order. It acts only on the failures listed in
`traffic.fallback_on` (the provider's 429 once retries gave up, our own capacity shedding,
5xx and unreachable endpoints, timeouts), and a request too long for the model's context (the
provider said so, or Trim found the last turn alone over the window) goes
to `context_fallbacks` (larger-context models) whatever that list says. Like retries, only
before the first streamed byte: the first event is pulled before the stream is handed up.

A deadline that has passed is final: no fallback would have time to answer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from levergate.config import ModelSettings
from levergate.core.call import Call
from levergate.core.reply import Completed, Reply
from levergate.core.service import Layer, Service
from levergate.errors import (
    BadRequest,
    LevergateError,
    Overloaded,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from levergate.layers.traffic.metrics import TrafficMetrics

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

CONTEXT_LENGTH = "context_length"


class Fallback:
    @classmethod
    def layer(
        cls, models: Sequence[ModelSettings], *, on: Collection[str], shared: Shared
    ) -> Layer | None:
        """None when no alias has a fallback. `on`: `traffic.fallback_on`."""
        if not any(m.fallbacks or m.context_fallbacks for m in models):
            return None
        return partial(
            cls, chains={m.name: m.fallbacks for m in models},
            context_chains={m.name: m.context_fallbacks for m in models}, on=on,
            metrics=shared.traffic.metrics,
        )  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        chains: Mapping[str, Sequence[str]],
        context_chains: Mapping[str, Sequence[str]],
        on: Collection[str],
        metrics: TrafficMetrics,
    ) -> None:
        self._inner = inner
        self._chains = {k: tuple(v) for k, v in chains.items() if v}
        self._context = {k: tuple(v) for k, v in context_chains.items() if v}
        self._on = frozenset(on)
        self._metrics = metrics

    async def __call__(self, call: Call) -> Reply:
        model = call.model
        general = list(self._chains.get(model, ()))
        context = list(self._context.get(model, ()))
        if not general and not context:
            return await self._inner(call)
        current = call
        while True:
            try:
                reply = await self._inner(current)
                return reply if isinstance(reply, Completed) else await reply.prime()
            except LevergateError as exc:
                kind = failure_kind(exc)
                if kind == CONTEXT_LENGTH and context:
                    alias = context.pop(0)
                elif kind in self._on and general:
                    alias = general.pop(0)
                else:
                    # After a fallback, the client's own retry would repeat the whole chain.
                    exc.retried = exc.retried or current is not call
                    raise
            self._metrics.fallbacks.labels(model, alias).inc()
            call.ctx.trace.fallback = alias
            current = call.with_body(model=alias)


def failure_kind(exc: LevergateError) -> str | None:
    """Which `fallback_on` class a failure belongs to (None: never falls back)."""
    if isinstance(exc, UpstreamRejected):
        if exc.upstream_status == 429:
            return "rate_limited"
        return CONTEXT_LENGTH if _is_context_length(exc) else None
    if isinstance(exc, BadRequest) and exc.code == "context_length_exceeded":
        # Trim's own refusal (the last turn alone does not fit this alias's window): a
        # larger-context alias may take it, as it would the provider's.
        return CONTEXT_LENGTH
    if isinstance(exc, UpstreamTimeout):
        return None if exc.code == "deadline_exceeded" else "timeout"
    if isinstance(exc, UpstreamUnavailable):
        return "unavailable"
    if isinstance(exc, Overloaded):
        return "overloaded"
    return None


def _is_context_length(exc: UpstreamRejected) -> bool:
    if exc.code == "context_length_exceeded":
        return True
    text = exc.message.lower()
    return exc.upstream_status in {400, 413, 422} and (
        "context length" in text or "context window" in text or "maximum context" in text
    )

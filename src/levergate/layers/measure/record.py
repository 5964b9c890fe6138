"""`RequestRecord`: one finished request as a value, and the `Sink`s it is handed to.

`Measure` (the outermost layer) builds one record per request once the answer has gone out
(the next loop turn for a whole answer, the turn after a stream closed) and hands it to every
sink in order. Prometheus (`layers.measure.prometheus`) is the first sink; a request log, a
dashboard and a cost ledger are sinks too: each reads the same record, none reaches back into
the layers. A sink must be quick (it runs on the event loop, after the answer): one that needs
I/O queues the record and writes it from its own job.

The record and its parts are `NamedTuple`s: immutable values like frozen dataclasses, built three
times faster (a frozen dataclass sets each field through `object.__setattr__`; one record per
request made that a measurable share of the gateway's own time), and `_asdict()` gives a
request log its row.

Money is in US dollars, at the price of the alias that answered (a fallback's, not the one
asked for), from its four token buckets (`policies.pricing.Tokens`), plus the side spends
(a cascade's cheap attempt, summaries, judges) at their own aliases' prices. `savings` says
what each lever saved against its stated counterfactual (`policies.pricing`'s docstring; a
value may be negative: an escalated cascade, a prompt-cache write). A cache hit spends nothing
and saves what the answer cost when it was generated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol

from levergate.core.call import CacheResult, Kind, Note
from levergate.policies.pricing import NO_SAVINGS, Side, Tokens

__all__ = ["CANCELLED", "NO_SAVINGS", "OK", "RequestRecord", "Side", "Sink", "Timings", "Tokens"]

OK = "ok"
CANCELLED = "cancelled"  # the client went away (or the server shut down) before the end


class Timings(NamedTuple):
    """Seconds. `overhead` is the gateway's own time: total minus the upstream wait (and, for a
    stream, minus the time the client took to accept each chunk)."""

    total: float
    upstream: float
    overhead: float
    ttft: float | None = None  # to the first generated token of a stream
    inter_token: float | None = None  # the mean gap between generated chunks of a stream


class RequestRecord(NamedTuple):
    request_id: str
    route: Kind
    # The tenant Authenticate established; None for a request refused before (bad key).
    tenant: str | None
    feature: str
    model: str  # the alias the client asked for
    # What answered: the alias (a fallback's when one answered; "" for a cache hit), and the
    # endpoint and the model name it was sent under ("" when no endpoint was reached).
    alias: str
    upstream: str
    upstream_model: str
    outcome: str  # "ok", "cancelled", or the error's type ("upstream_error", ...)
    status: int  # the HTTP status the client got (499 for a request it abandoned)
    error: str | None  # the exception class, for anything but "ok"
    timings: Timings
    tokens: Tokens
    cost_usd: float  # the answer and the side spends
    cache: CacheResult | None = None
    attempts: int = 0
    retries: int = 0
    fallback: str | None = None
    failed_endpoints: frozenset[str] = frozenset()
    # What each lever saved this request, in dollars, by lever: "exact", "semantic",
    # "coalesced", "route", "trim", "prompt_cache", "batch" (negative: it cost more).
    savings: Mapping[str, float] = NO_SAVINGS
    notes: tuple[Note, ...] = ()
    # The gateway API key that made the request (its id, never the key), for budgets.
    key_id: str | None = None
    # Spends beside the answer, priced (their dollars are inside `cost_usd`).
    side: tuple[Side, ...] = ()
    batch: bool = False  # priced at the provider's batch discount
    # Prompt tokens the prompt-cache optimizer expected the provider to read from its cache
    # (`trace.expected_cached`), beside `tokens.cached_read`, what it did read.
    expected_cached: int = 0

    @property
    def authenticated(self) -> bool:
        return self.tenant is not None

    @property
    def answered_model(self) -> str:
        """The alias whose price this request was charged at."""
        return self.alias or self.model


class Sink(Protocol):
    """Where finished requests go. Called on the event loop after the answer went out; an
    exception is logged once and counted by `Measure`, never seen by the request."""

    def emit(self, record: RequestRecord) -> None: ...

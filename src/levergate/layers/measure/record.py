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
and saves what the answer cost when it was generated, at the price of the alias that generated
it (kept in the entry: a route's "auto" has no price of its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

from levergate.core.call import BatchShare, CacheResult, Kind, Note, RouteDecision
from levergate.core.controls import Priority
from levergate.policies.pricing import NO_SAVINGS, Lever, Side, Tokens
from levergate.policies.tiers import Tier, TierDecision

if TYPE_CHECKING:
    from levergate.core.call import Call
    from levergate.policies.pricing import Bill

__all__ = [
    "CANCELLED", "NO_SAVINGS", "OK", "SCHEMA", "Lever", "RequestRecord", "Side", "Sink",
    "Timings", "Tokens",
]  # fmt: skip

OK = "ok"
CANCELLED = "cancelled"  # the client went away (or the server shut down) before the end
# The record's shape, for readers that store it (a request log row says which it was written
# by). 2: `route` (which held the request kind) became `kind`; the route decision, escalation
# reasons, trimmed tokens, micro-batch, priority, deadline, queue wait, workflow, tier and
# origin were added; savings are keyed by `Lever`. 3: `tier` may be flex or priority, priced by
# the answer's `service_tier`; `tier_assumed` and `tier_decision` were added. 4: the request
# log keeps each request's replay features beside it (requestlog/features.py: fingerprint,
# prefix digests, deadlines), which `levergate analyze` reads; rows of 3 have none.
SCHEMA = 4
NONE: frozenset[str] = frozenset()
# Read once: a member read from its class costs ~900 instructions on CPython 3.11, its `.value`
# (a Python property) ~1,700 (callgrind), its `_value_` an attribute read; a record is built
# for every request.
_BATCH, _STANDARD = Tier.BATCH.value, Tier.STANDARD.value
# A record's tuple made at once: `cls(...)` goes through the generated `__new__`, a Python frame
# that copies its 39 arguments into the same tuple (~85 bytecodes a request).
_new = tuple.__new__


class Timings(NamedTuple):
    """Seconds. `overhead` is the gateway's own time: total minus the upstream wait (and, for a
    stream, minus the time the client took to accept each chunk)."""

    total: float
    upstream: float
    overhead: float
    ttft: float | None = None  # to the first generated token of a stream
    inter_token: float | None = None  # the mean gap between generated chunks of a stream


class RequestRecord(NamedTuple):
    # The fields' order is tracing's (otel/spans.py reads runs of it by slices, a copy in C:
    # `itemgetter`s of its 27 fields were ~2,500 instructions a request): what a request's span
    # writes of its own, what its kept attribute block is keyed by (kind ... workflow), the
    # queue wait, the levers (savings ... trimmed_input). Read by position too: `of` (every
    # field), requestlog/row.py (every field), `PrometheusSink.emit` (the first 14),
    # `LedgerSink.emit` (5); tests/unit/layers/measure/test_record.py holds those.
    request_id: str
    timings: Timings
    tokens: Tokens
    cost_usd: float  # the answer and the side spends
    kind: Kind  # what was asked: chat, completion, embedding, response
    model: str  # the alias the client asked for
    feature: str
    outcome: str  # "ok", "cancelled", or the error's type ("upstream_error", ...)
    status: int  # the HTTP status the client got (499 for a request it abandoned)
    error: str | None  # the exception class, for anything but "ok"
    # What answered: the alias (a fallback's when one answered; "" for a cache hit), and the
    # endpoint and the model name it was sent under ("" when no endpoint was reached).
    upstream_model: str
    alias: str
    # The tenant Authenticate established; None for a request refused before (bad key).
    tenant: str | None
    upstream: str
    attempts: int = 0
    retries: int = 0
    # The price tier it was served at (policies/tiers.py): "standard", "flex", "priority",
    # "batch" — what the answer's `service_tier` said, or (`tier_assumed`) the tier asked for
    # when the provider said nothing.
    tier: str = Tier.STANDARD.value
    priority: Priority = Priority.DEFAULT
    # How the request came: "request" (HTTP or in-process), "batch" (a Batch API line),
    # "deferred" (a line answered by a provider's batch API), "async" (an async request).
    origin: str = "request"
    fallback: str | None = None
    workflow: str | None = None  # the workflow this call is a step of (`controls.workflow`)
    queued_seconds: float = 0.0  # waited in the gateway's queues (admission, limits)
    # What each lever saved this request, in dollars (negative: it cost more).
    savings: Mapping[Lever, float] = NO_SAVINGS
    cache: CacheResult | None = None
    # What Route or Cascade decided: which rule or router score chose which alias, against
    # which default (None: the alias asked for was served as it is).
    decision: RouteDecision | None = None
    escalations: int = 0  # cascade steps taken beyond the first model
    trimmed_input: int = 0  # prompt tokens Trim did not send
    escalation_reasons: tuple[str, ...] = ()  # why each step escalated, in order
    failed_endpoints: frozenset[str] = frozenset()
    notes: tuple[Note, ...] = ()
    # The gateway API key that made the request (its id, never the key), for budgets.
    key_id: str | None = None
    # Spends beside the answer, priced (their dollars are inside `cost_usd`).
    side: tuple[Side, ...] = ()
    batch: bool = False  # priced at the provider's batch discount
    # Prompt tokens the prompt-cache optimizer expected the provider to read from its cache
    # (`trace.expected_cached`), beside `tokens.cached_read`, what it did read.
    expected_cached: int = 0
    microbatch: BatchShare | None = None  # the micro-batch its upstream call was part of
    # The client's deadline, absolute on the gateway's clock (None: none asked).
    deadline: float | None = None
    schema: int = SCHEMA
    tier_assumed: bool = False
    # How the tier was decided: the client's `service_tier`, or the deadline policy's choice
    # and the refusals it re-decided after (None: nothing was decided, the provider's default).
    tier_decision: TierDecision | None = None

    @classmethod
    def of(
        cls,
        call: Call,
        *,
        outcome: str,
        status: int,
        error: str | None,
        timings: Timings,
        tokens: Tokens,
        bill: Bill,
        tier: Tier | None = None,
        tier_assumed: bool = False,
    ) -> RequestRecord:
        """The one constructor: the record of `call` from its trace (what the layers decided)
        and its controls (`ctx.controls`: feature, priority, deadline, workflow), with what was
        measured and priced of its answer (`tier`: the tier it was priced at)."""
        ctx = call.ctx
        trace, controls = ctx.trace, ctx.controls
        cost_usd, _, side, savings = bill  # unpacked: a `Bill` field read by name is slow
        # Every field, in order (a test holds it to `_fields`): `tuple.__new__` checks no count.
        return _new(cls, (
            ctx.request_id, timings, tokens, cost_usd, call.kind, call.model, controls.feature,
            outcome, status, error, trace.upstream_model, trace.alias, trace.tenant,
            trace.upstream, trace.attempts, trace.retries,
            tier._value_ if tier else _BATCH if trace.batch else _STANDARD, controls.priority,
            trace.origin, trace.fallback, controls.workflow, trace.queued_seconds, savings,
            trace.cache, trace.route, trace.escalations, trace.trimmed_input,
            tuple(trace.escalation_reasons) if trace.escalation_reasons else (),
            frozenset(trace.failed_endpoints) if trace.failed_endpoints else NONE,
            tuple(trace.notes) if trace.notes else (), trace.key_id, side, trace.batch,
            trace.expected_cached, trace.microbatch, controls.deadline, SCHEMA, tier_assumed,
            trace.tier_decision,
        ))  # fmt: skip

    @property
    def authenticated(self) -> bool:
        return self.tenant is not None

    @property
    def answered_model(self) -> str:
        """The alias whose price this request was charged at (for one served by a cache or
        shared with another in flight, that of the alias which answered it first)."""
        if self.alias:
            return self.alias
        cache = self.cache
        return cache.alias if cache is not None and cache.alias else self.model


class Sink(Protocol):
    """Where finished requests go. Called on the event loop after the answer went out; an
    exception is logged once and counted by `Measure`, never seen by the request."""

    def emit(self, record: RequestRecord) -> None: ...

"""`Call`: the request as a value. Layers derive new calls; they never mutate one.

The body is the OpenAI-shaped JSON object the client sent (or the library built). It is typed
`Mapping` so nothing writes into it; `Call.with_body` makes a shallow copy with changes.

`Trace` is the one mutable thing a call carries: the call's record, shared by every call derived
from it. Layers write typed facts into it (who the tenant is, which alias / upstream / upstream
model answered, the cache outcome, attempts and retries, endpoints that failed, the provider's
quota headroom, the fallback alias) and the layers above read them: the measurement layer
learns what happened below it, the caches learn that another model answered, the balancer
steers a retry away from an endpoint that failed it, without any layer returning extra values
or reading a string another layer wrote. A new lever adds a field here (the route decision,
escalations, trimmed tokens and side spends too); `notes` holds free-form remarks for logs
only — nothing decides on a note.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from levergate.core.controls import ANONYMOUS, DEFAULT_CONTROLS, Controls, Principal
from levergate.core.quota import Quota
from levergate.core.tokenizer import TokenSource
from levergate.policies.fingerprint import canonical_body_bytes

_new_object = object.__new__

if TYPE_CHECKING:
    import asyncio

    from levergate.core.spans import Spans
    from levergate.policies.tiers import Tier, TierDecision
    from levergate.stores.keys import KeyRecord

# "response": an OpenAI Responses API request passed through to an upstream that serves
# `/v1/responses` itself (layers/responses.py); translated ones become "chat" calls.
Kind = Literal["chat", "completion", "embedding", "response"]


class CacheOutcome(enum.StrEnum):
    HIT = "hit"
    MISS = "miss"
    # Shared the answer of an identical request in flight: nothing was spent for this one.
    COALESCED = "coalesced"


# Read once: an enum member read from its class goes through the metaclass's `__getattr__`
# hook on CPython 3.11 (~800 instructions), and `free` is asked several times a request.
_MISS = CacheOutcome.MISS
# A plain OpenAI call's `Context.extensions` (one value: `new_context` sets the same).
_NO_EXTENSIONS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class CacheResult:
    """What a cache made of the request. `saved_*` are the tokens the answer it served cost
    when it was first generated (what this request would have spent without the cache)."""

    cache: str  # which cache: "exact", "semantic"
    outcome: CacheOutcome
    saved_input: int = 0  # the whole prompt, its cached parts included
    saved_output: int = 0
    # Of `saved_input`: read from and written to the provider's prompt cache (of the writes,
    # those with a 1-hour TTL), so the ledger prices the hit exactly as the miss was priced.
    saved_cached: int = 0
    saved_written: int = 0
    saved_written_1h: int = 0
    # What answered the served answer first: the alias Dispatch reached and the model name it
    # was sent under (`Trace.alias`, `Trace.upstream_model` of the request that produced it).
    # The ledger prices the hit at them, not at the alias asked for, which may be a route's or
    # a cascade's with no price. "": not known (an entry written before they were kept).
    alias: str = ""
    upstream_model: str = ""

    @property
    def free(self) -> bool:
        """Answered without spending anything upstream for this request."""
        return self.outcome is not _MISS


@dataclass(frozen=True, slots=True)
class Note:
    """A free-form remark a layer leaves for logs and the request log; never read to decide."""

    layer: str
    text: str


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """What a router or a cascade chose, and the counterfactual the ledger prices it against:
    `default` is the alias that would have answered without it (the strong model)."""

    router: str  # "rules", "learned", "cascade"
    asked: str  # the alias the client named ("auto", "cascade:small>large", ...)
    chosen: str  # the alias the request went to (for a cascade, the one that finally answered)
    default: str
    reason: str = ""  # the rule that matched, or the score against the threshold
    score: float | None = None


@dataclass(frozen=True, slots=True)
class Spend:
    """Tokens paid for that are not in the answer the client got: a cascade's cheap answer
    before it escalated, a summary of dropped history, a judge call. The ledger adds them to
    the request's cost at `alias`'s price."""

    alias: str
    purpose: str  # "cascade", "summary", "judge"
    input_uncached: int = 0
    cached_read: int = 0
    cache_write: int = 0
    output: int = 0


@dataclass(frozen=True, slots=True)
class BatchShare:
    """The request rode in a micro-batch (layers/microbatch.py): one upstream call carried
    `requests` requests and `inputs` inputs. `prorated`: the request's usage is its share of
    the batch's, split in proportion to its inputs' size, not a count of its own tokens."""

    requests: int
    inputs: int
    prorated: bool


@dataclass(slots=True)
class Trace:
    """The call's record (see the module docstring). Times are `time.perf_counter()` seconds."""

    started: float = field(default_factory=time.perf_counter)
    # The tenant Authenticate established; None until then, and for a request refused there.
    tenant: str | None = None
    # The gateway key's id (never the key) Authenticate resolved; what its budget is charged by.
    key_id: str | None = None
    # What answered: the alias Dispatch routed to last (a fallback's, when one answered), and
    # the endpoint and model name the last attempt went to.
    alias: str = ""
    upstream: str = ""
    upstream_model: str = ""
    # Seconds spent blocked on upstream I/O (connect, send, waiting for and reading bytes).
    upstream_seconds: float = 0.0
    attempts: int = 0  # upstream attempts made (every endpoint call counts)
    retries: int = 0  # of which Retry started after a failure
    # Endpoints that failed this request already: the balancer steers the next attempt away.
    failed_endpoints: set[str] = field(default_factory=set)
    # The provider's rate-limit headroom as the last attempt's answer stated it (None: not sent).
    quota: Quota | None = None
    # Dollars left of the gateway key's tighter budget (daily or monthly) when Authenticate
    # admitted the request, before its own cost (None: no budget, or the spend store was down).
    budget_left: float | None = None
    cache: CacheResult | None = None
    # The alias Fallback moved to when the one asked for failed; None when it answered itself.
    fallback: str | None = None
    # What Route or Cascade decided (None: the alias asked for was served as it is).
    route: RouteDecision | None = None
    escalations: int = 0  # cascade steps taken beyond the first model
    escalation_reasons: list[str] = field(default_factory=list)  # why each step escalated
    # Prompt tokens Trim did not send (counted with the target model's tokenizer).
    trimmed_input: int = 0
    # How `trimmed_input` was counted: COUNTED, or ESTIMATED when the model's tokenizer is not
    # known here or the prompt had parts (images, files) whose size is a guess.
    trimmed_how: TokenSource | None = None
    side_spend: list[Spend] = field(default_factory=list)
    # A cascade's last step failed, so an earlier step's (rejected) answer was returned instead.
    cascade_fallback: bool = False
    # Prompt tokens the prompt-cache optimizer expects the provider to read from its cache.
    expected_cached: int = 0
    # Answered through a provider's batch API, at its discount (the batch lever sets it).
    batch: bool = False
    # The service tier the last attempt asked the provider for (None: it asked none, so the
    # provider's default), and how it was chosen (layers/tiers/: explicit or by the deadline).
    tier: Tier | None = None
    tier_decision: TierDecision | None = None
    # The micro-batch this request's upstream call was part of (None: it went alone).
    microbatch: BatchShare | None = None
    # Seconds the request waited in the gateway's own queues (tenant admission, endpoint limits).
    queued_seconds: float = 0.0
    # How the request came (the record's `origin`): "request" for HTTP and in-process calls;
    # the Batch API sets "batch", "deferred" or "async" for the requests it runs or records.
    origin: str = "request"
    notes: list[Note] = field(default_factory=list)
    # The W3C trace context and upstream attempts, only while tracing is on (core/spans.py).
    spans: Spans | None = None
    # A body and its canonical bytes, the last `Call.canonical_bytes` computed (the body held:
    # a call reads them only for that very object, which a body's immutability makes right).
    canonical: tuple[Mapping[str, Any], bytes] | None = None
    # Not a fact: the event loop the request is served on, when the edge knows it (`levergate
    # serve`'s connection). Measure defers the record to it without asking asyncio, whose
    # `get_running_loop()` is a `getpid` system call on CPython 3.11 (`hit_syscalls.md`).
    # None: Measure asks.
    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False, compare=False)

    @classmethod
    def fresh(cls) -> Trace:
        """`Trace()`, as every request's edge makes one: each field at its default, without the
        generated `__init__`'s 30 parameters and its four factory calls (135 bytecodes, ~2,500
        instructions a request at the edge; this is ~100 bytecodes). A test holds it equal to
        `Trace()` field by field, so a field added above and not here fails there."""
        trace = _new_object(cls)
        trace.started = time.perf_counter()
        trace.tenant = trace.key_id = None
        trace.alias = trace.upstream = trace.upstream_model = ""
        trace.upstream_seconds = trace.queued_seconds = 0.0
        trace.attempts = trace.retries = trace.escalations = 0
        trace.trimmed_input = trace.expected_cached = 0
        trace.failed_endpoints = set()
        trace.escalation_reasons = []
        trace.side_spend = []
        trace.notes = []
        trace.quota = trace.budget_left = trace.cache = trace.fallback = trace.route = None
        trace.trimmed_how = trace.tier = trace.tier_decision = trace.microbatch = None
        trace.spans = trace.canonical = trace.loop = None
        trace.cascade_fallback = trace.batch = False
        trace.origin = "request"
        return trace

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def note(self, *, layer: str, text: str) -> None:
        self.notes.append(Note(layer, text))


@dataclass(frozen=True, slots=True)
class Context:
    """Everything about a call that is not the body. Set at the edge, read by layers."""

    request_id: str
    # Who the call is for; Authenticate decides it (levergate/principal.py: `identify`).
    principal: Principal = ANONYMOUS
    # What the caller asked of this call (priority, deadline, feature, cache policy, ...),
    # parsed once at the edge (levergate/control_headers.py) or given by a library call.
    controls: Controls = DEFAULT_CONTROLS
    # Incoming request headers, lower-cased, for pass-through only (and the key Authenticate
    # checks): no layer reads a control from them. Empty for library calls without headers.
    headers: Mapping[str, str] = field(default_factory=dict)
    trace: Trace = field(default_factory=Trace)
    # A gateway key already established in-process (a batch line runs as the key that made
    # its batch); Authenticate then checks it instead of an `authorization` header. Never set
    # from a request: only code inside the gateway builds a Context.
    key: KeyRecord | None = None
    # Features of another protocol the body carries beyond the OpenAI API (Anthropic's
    # cache_control, thinking, document blocks...: protocol/anthropic/extensions.py). Empty for
    # plain OpenAI calls; an OpenAI-compatible upstream checks it with one attribute test.
    extensions: frozenset[str] = _NO_EXTENSIONS


@dataclass(frozen=True, slots=True)
class Call:
    kind: Kind
    body: Mapping[str, Any]
    ctx: Context
    # The JSON bytes `body` was parsed from, while the body is unchanged: an upstream can send
    # them as they are instead of serialising the body again (long prompts make that matter).
    raw: bytes | None = None
    # `model`, once read: five layers read it a request (a new Call, by `with_body` or
    # `dataclasses.replace`, starts without it, so a changed body is read afresh).
    _model: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def model(self) -> str:
        model = self._model
        if model is None:
            named = self.body.get("model")
            model = named if isinstance(named, str) else ""
            _set_model(self, model)
        return model

    def canonical_bytes(self) -> bytes:
        """The body's canonical bytes (policies/fingerprint.py `canonical_body_bytes`), computed
        once per body and kept on the trace (`Trace.canonical`), so every call derived from this
        one with the same body object reads them: the exact cache's key and the request log's
        replay fingerprint are both digests of them (~16k instructions for a short chat prompt,
        callgrind). TypeError for a body that is not JSON (a library caller's objects)."""
        trace = self.ctx.trace
        known = trace.canonical
        if known is not None and known[0] is self.body:
            return known[1]
        found = canonical_body_bytes(self.body)
        trace.canonical = (self.body, found)
        return found

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def wants_usage_chunk(self) -> bool:
        """Whether the client asked for the final usage chunk of a stream."""
        options = self.body.get("stream_options")  # a parsed JSON body: a dict, if anything
        return isinstance(options, dict) and options.get("include_usage") is True

    # `dataclasses.replace(self, ...)` each, through `new_call` and `_context_with` (below):
    # replace's walk of the fields and the generated `__init__`s (callgrind, a derived call in
    # a loop of them: `with_body` 19.8k -> 7.4k instructions, `with_ctx` 46.0k -> 18.9k). A new
    # call's `model` is read afresh, as replace's would be.
    def with_body(self, **changes: Any) -> Call:
        return new_call(self.kind, {**self.body, **changes}, self.ctx, None)

    def with_ctx(self, **changes: Any) -> Call:
        return new_call(self.kind, self.body, _context_with(self.ctx, changes), self.raw)

    def with_controls(self, **changes: Any) -> Call:
        controls = dataclasses.replace(self.ctx.controls, **changes)
        ctx = _context_with(self.ctx, {"controls": controls})
        return new_call(self.kind, self.body, ctx, self.raw)


# A request's `Context` and `Call`, built on every request (`Gateway.make_call`) without the
# generated `__init__` of a frozen dataclass, which sets each field through
# `object.__setattr__`: ~560 instructions a field (callgrind: 13 a hit, 7.3k instructions). The
# slots' own setters (a member descriptor's `__set__`, bound once) set the same fields at about
# half the cost; the instances are the same frozen values. A test holds each equal to its
# constructor field by field, so a field added to the class and not here fails there.
_CONTEXT_SETTERS = [Context.__dict__[f.name].__set__ for f in dataclasses.fields(Context)]
(_set_request_id, _set_principal, _set_controls, _set_headers, _set_trace, _set_key,
 _set_extensions) = _CONTEXT_SETTERS  # fmt: skip
_set_kind, _set_body, _set_ctx, _set_raw, _set_model = (
    Call.__dict__[f.name].__set__ for f in dataclasses.fields(Call)
)


def new_context(request_id: str, principal: Principal, controls: Controls,
                headers: Mapping[str, str], trace: Trace, /) -> Context:  # fmt: skip
    """`Context(request_id, principal, controls, headers, trace)`."""
    ctx = _new_object(Context)
    _set_request_id(ctx, request_id)
    _set_principal(ctx, principal)
    _set_controls(ctx, controls)
    _set_headers(ctx, headers)
    _set_trace(ctx, trace)
    _set_key(ctx, None)
    _set_extensions(ctx, _NO_EXTENSIONS)
    return ctx


_CONTEXT_FIELDS = tuple(
    (f.name, setter)
    for f, setter in zip(dataclasses.fields(Context), _CONTEXT_SETTERS, strict=True)
)
_CONTEXT_NAMES = frozenset(name for name, _ in _CONTEXT_FIELDS)


def _context_with(ctx: Context, changes: Mapping[str, Any]) -> Context:
    """`dataclasses.replace(ctx, **changes)`: a `TypeError` for a name that is no field."""
    if not changes.keys() <= _CONTEXT_NAMES:
        unknown = sorted(changes.keys() - _CONTEXT_NAMES)
        raise TypeError(f"Context has no field(s) {', '.join(unknown)}")
    made = _new_object(Context)
    for name, put in _CONTEXT_FIELDS:
        put(made, changes[name] if name in changes else getattr(ctx, name))
    return made


def new_call(kind: Kind, body: Mapping[str, Any], ctx: Context, raw: bytes | None, /) -> Call:
    """`Call(kind, body, ctx, raw)`."""
    call = _new_object(Call)
    _set_kind(call, kind)
    _set_body(call, body)
    _set_ctx(call, ctx)
    _set_raw(call, raw)
    _set_model(call, None)
    return call

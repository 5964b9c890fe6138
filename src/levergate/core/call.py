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

from levergate.core.quota import Quota
from levergate.core.tokenizer import TokenSource

if TYPE_CHECKING:
    from levergate.stores.keys import KeyRecord

# "response": an OpenAI Responses API request passed through to an upstream that serves
# `/v1/responses` itself (layers/responses.py); translated ones become "chat" calls.
Kind = Literal["chat", "completion", "embedding", "response"]


class Priority(enum.IntEnum):
    """Lower value is served first."""

    INTERACTIVE = 0
    DEFAULT = 1
    BATCH = 2

    @classmethod
    def parse(cls, text: str | None) -> Priority:
        if not text:
            return cls.DEFAULT
        try:
            return cls[text.strip().upper()]
        except KeyError:
            return cls.DEFAULT


class CacheOutcome(enum.StrEnum):
    HIT = "hit"
    MISS = "miss"
    # Shared the answer of an identical request in flight: nothing was spent for this one.
    COALESCED = "coalesced"


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

    @property
    def free(self) -> bool:
        """Answered without spending anything upstream for this request."""
        return self.outcome is not CacheOutcome.MISS


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
    cache: CacheResult | None = None
    # The alias Fallback moved to when the one asked for failed; None when it answered itself.
    fallback: str | None = None
    # What Route or Cascade decided (None: the alias asked for was served as it is).
    route: RouteDecision | None = None
    escalations: int = 0  # cascade steps taken beyond the first model
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
    # The micro-batch this request's upstream call was part of (None: it went alone).
    microbatch: BatchShare | None = None
    notes: list[Note] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def note(self, *, layer: str, text: str) -> None:
        self.notes.append(Note(layer, text))


@dataclass(frozen=True, slots=True)
class Context:
    """Everything about a call that is not the body. Set at the edge, read by layers."""

    request_id: str
    tenant: str = "default"
    priority: Priority = Priority.DEFAULT
    deadline: float | None = None  # absolute seconds on the gateway's clock, or None for none
    feature: str = ""
    # Incoming request headers, lower-cased; layers read their controls here
    # (cache-control, x-levergate-*). Empty for library calls without headers.
    headers: Mapping[str, str] = field(default_factory=dict)
    trace: Trace = field(default_factory=Trace)
    # A gateway key already established in-process (a batch line runs as the key that made
    # its batch); Authenticate then checks it instead of an `authorization` header. Never set
    # from a request: only code inside the gateway builds a Context.
    key: KeyRecord | None = None
    # Features of another protocol the body carries beyond the OpenAI API (Anthropic's
    # cache_control, thinking, document blocks...: protocol/extensions.py). Empty for plain
    # OpenAI calls; an OpenAI-compatible upstream checks it with one attribute test.
    extensions: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Call:
    kind: Kind
    body: Mapping[str, Any]
    ctx: Context
    # The JSON bytes `body` was parsed from, while the body is unchanged: an upstream can send
    # them as they are instead of serialising the body again (long prompts make that matter).
    raw: bytes | None = None

    @property
    def model(self) -> str:
        model = self.body.get("model")
        return model if isinstance(model, str) else ""

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def wants_usage_chunk(self) -> bool:
        """Whether the client asked for the final usage chunk of a stream."""
        options = self.body.get("stream_options")
        return isinstance(options, Mapping) and options.get("include_usage") is True

    def with_body(self, **changes: Any) -> Call:
        return dataclasses.replace(self, body={**self.body, **changes}, raw=None)

    def with_ctx(self, **changes: Any) -> Call:
        return dataclasses.replace(self, ctx=dataclasses.replace(self.ctx, **changes))

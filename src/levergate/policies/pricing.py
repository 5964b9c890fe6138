"""Pricing: a provider's usage block into four token buckets, the buckets into dollars, and what
each lever saved. Pure functions of values; `layers.measure.ledger` feeds them from the call's
`Trace` and the catalog's `Rates`.

## Usage conventions (the most common cost-tracking bug is mixing them)
- OpenAI chat / completions / embeddings: `prompt_tokens` INCLUDES
  `prompt_tokens_details.cached_tokens` and the cache writes newer models report
  (`prompt_tokens_details.cache_write_tokens`). The Anthropic upstream translates its usage into
  this shape (`prompt_tokens = input + cache_read + cache_creation`, `cached_tokens =
  cache_read`) and keeps `cache_creation_input_tokens` and the `cache_creation` TTL split
  beside it, so one parser reads both.
- OpenAI Responses: `input_tokens` INCLUDES `input_tokens_details.cached_tokens`.
- Anthropic Messages: `input_tokens` EXCLUDES `cache_read_input_tokens` and
  `cache_creation_input_tokens`; `cache_creation.ephemeral_5m_input_tokens` /
  `ephemeral_1h_input_tokens` split the writes by TTL (1-hour writes cost 2x input, 5-minute
  ones 1.25x).
`from_usage` tells them apart by their keys: `prompt_tokens` is OpenAI chat; `total_tokens` or
`input_tokens_details` is Responses; otherwise `input_tokens` is Anthropic. (A bare
`{input_tokens, output_tokens}` reads the same in both.)

## Savings: the counterfactual of each lever (dollars; negative values are kept)
- `exact` / `semantic` cache hit: what the request would have cost = the cost of the answer it
  served when it was generated (its four buckets at the asked alias's rates). So a full hit
  saves exactly what the miss that filled it cost.
- `coalesced`: the cost of the shared answer, which this request did not pay again.
- `route` (router or cascade; `trace.route.default` is the model that would have answered):
  the default model's rates on the same four buckets minus what was paid — the answer plus the
  cascade's and judges' side spends. An escalated cascade therefore saves a NEGATIVE amount
  (the cheap attempt was wasted): it is reported as is, never clamped, so the sum over requests
  is the true net. The token counts are the answering model's: an estimate for the default.
- `trim`: the prompt tokens Trim did not send at the answering model's uncached input rate,
  minus the summaries' side spend.
- `prompt_cache` (provider prompt caches): `cached_read x (input - cache_read)` NET of the write
  premium `cache_write x (write rate - input)` (5-minute and 1-hour writes at their own rates).
  A request that only wrote to the cache saves a negative amount; the reads that follow pay it
  back.
- `batch` (provider batch APIs): full price minus the discounted price. Every other lever is
  priced at the rates actually paid (discounted when batched), so levers never double count.
- `tier` (service tiers, policies/tiers.py): the standard tier's price of the same tokens minus
  the price of the tier that served (the answer's own `service_tier`): half for flex, negative
  for priority. A routed request's `route` saving is then the difference at standard rates,
  so route and tier add up to the whole difference without counting it twice.
Negative savings cannot go into a Prometheus counter: `/metrics` puts the positive parts in
`levergate_savings_usd_total` and the magnitudes of the negative ones in
`levergate_overspend_usd_total`; their difference is the net.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from levergate.core.call import Spend
from levergate.core.tokenizer import USAGE_SOURCE, TokenSource


class Lever(enum.StrEnum):
    """A lever whose savings a record states (the key of `Bill.savings`; a `StrEnum`, so the
    metrics label and a request log column are its value)."""

    EXACT = "exact"  # the exact cache (`CacheResult.cache` names the cache that served)
    SEMANTIC = "semantic"
    EMBEDDINGS = "embeddings"  # the embeddings cache, each input alone
    COALESCED = "coalesced"
    ROUTE = "route"  # a router or a cascade
    TRIM = "trim"
    PROMPT_CACHE = "prompt_cache"
    BATCH = "batch"
    TIER = "tier"  # a service tier other than standard (flex saves, priority costs)


PER = 1e6  # prices are US dollars per million tokens
NO_SAVINGS: Mapping[Lever, float] = MappingProxyType({})
SIDE_FOR_LEVER = {"cascade": Lever.ROUTE, "judge": Lever.ROUTE, "summary": Lever.TRIM}


class Tokens(NamedTuple):
    """Tokens spent, in four buckets that are priced apart. `input_uncached + cached_read +
    cache_write` is the prompt; `cache_write_1h` is the part of `cache_write` written with a
    1-hour TTL (priced at its own rate). `output_source` says whether the upstream reported
    `output` or it was counted (or estimated) here because the upstream sent no usage."""

    input_uncached: int = 0
    cached_read: int = 0
    cache_write: int = 0
    output: int = 0
    output_source: TokenSource = TokenSource.NONE
    cache_write_1h: int = 0

    @property
    def input(self) -> int:
        """The prompt, cached parts included (the OpenAI convention for `prompt_tokens`)."""
        return self.input_uncached + self.cached_read + self.cache_write


class Rates(NamedTuple):
    """US dollars per million tokens, every bucket resolved (the catalog fills the defaults:
    cache reads and writes at the input price when a provider has no discount or premium)."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0  # 5-minute writes (Anthropic's default TTL), and OpenAI's
    cache_write_1h: float = 0.0
    batch_discount: float = 0.0  # the share off every bucket through a provider batch API

    def batched(self) -> Rates:
        keep = 1.0 - self.batch_discount
        return Rates(
            self.input * keep,
            self.output * keep,
            self.cache_read * keep,
            self.cache_write * keep,
            self.cache_write_1h * keep,
            0.0,
        )


FREE = Rates()
# Read once: a member read from its class costs ~900 instructions on CPython 3.11 (callgrind).
_REPORTED, _NONE = TokenSource.REPORTED, TokenSource.NONE


def _int(value: Any) -> int:
    # `type() is int` leaves out booleans (JSON true is not a count); usage comes from JSON.
    return value if type(value) is int and value > 0 else 0


def _detail(usage: Mapping[str, Any], block: str, key: str) -> int:
    details = usage.get(block)
    return _int(details.get(key)) if isinstance(details, dict) else 0


def _split_1h(usage: Mapping[str, Any], written: int) -> int:
    """The 1-hour part of the cache writes (Anthropic's `cache_creation` split), within them."""
    if not written:
        return 0
    return min(written, _detail(usage, "cache_creation", "ephemeral_1h_input_tokens"))


def _source(value: Any) -> TokenSource:
    return _REPORTED if type(value) is int else _NONE


def from_openai_chat(usage: Mapping[str, Any]) -> Tokens:
    """OpenAI chat/completions/embeddings usage (and the Anthropic upstream's translation)."""
    # `_int` and `_source` inline (and `_split_1h` only with writes): every priced whole answer
    # and stream reads its usage here, and each call was a Python frame (issue 22).
    prompt = usage.get("prompt_tokens")
    prompt = prompt if type(prompt) is int and prompt > 0 else 0
    details = usage.get("prompt_tokens_details")
    cached = written = 0
    if isinstance(details, dict):
        cached = _int(details.get("cached_tokens"))
        written = _int(details.get("cache_write_tokens"))
    if not written and "cache_creation_input_tokens" in usage:
        written = _int(usage["cache_creation_input_tokens"])
    # Inside prompt_tokens by this convention: never more than it (a lying upstream included).
    cached = min(cached, prompt)
    written = min(written, prompt - cached)
    completion = usage.get("completion_tokens")
    if type(completion) is int:
        output, source = max(0, completion), _REPORTED
    else:
        output, source = 0, _NONE
    return Tokens(
        prompt - cached - written,
        cached,
        written,
        output,
        source,
        _split_1h(usage, written) if written else 0,
    )


def from_openai_responses(usage: Mapping[str, Any]) -> Tokens:
    """OpenAI Responses API usage: `input_tokens` includes its cached part."""
    prompt = _int(usage.get("input_tokens"))
    cached = min(_detail(usage, "input_tokens_details", "cached_tokens"), prompt)
    output = usage.get("output_tokens")
    return Tokens(prompt - cached, cached, 0, _int(output), _source(output))


def from_anthropic(usage: Mapping[str, Any]) -> Tokens:
    """Anthropic Messages usage: `input_tokens` excludes cache reads and writes."""
    written = _int(usage.get("cache_creation_input_tokens"))
    output = usage.get("output_tokens")
    return Tokens(
        _int(usage.get("input_tokens")),
        _int(usage.get("cache_read_input_tokens")),
        written,
        _int(output),
        _source(output),
        _split_1h(usage, written),
    )


def from_usage(usage: Mapping[str, Any] | None) -> Tokens:
    """Any provider's usage block, its convention told by its keys (module docstring). A block
    levergate filled itself says so (`USAGE_SOURCE`), and the output keeps that source."""
    if not usage:
        return Tokens()
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        tokens = from_openai_chat(usage)
    elif "total_tokens" in usage or "input_tokens_details" in usage:
        tokens = from_openai_responses(usage)
    else:
        tokens = from_anthropic(usage)
    filled = usage.get(USAGE_SOURCE)
    if tokens.output_source is _REPORTED and filled in _FILLED:
        return tokens._replace(output_source=TokenSource(filled))
    return tokens


_FILLED = frozenset({TokenSource.COUNTED.value, TokenSource.ESTIMATED.value})


def spent(alias: str, purpose: str, usage: Mapping[str, Any] | None) -> Spend:
    """A call paid for outside the client's answer (a cascade attempt, a summary, a judge, a
    shadow), its usage read in the provider's own convention, as the ledger reads an answer."""
    t = from_usage(usage)
    return Spend(alias, purpose, input_uncached=t.input_uncached, cached_read=t.cached_read,
                 cache_write=t.cache_write, output=t.output)  # fmt: skip


def cost(tokens: Tokens, rates: Rates) -> float:
    """Dollars for `tokens` at `rates` (pass `rates.batched()` for a batched request)."""
    # Unpacked once: a `NamedTuple` field read by name is an unspecialised look-up on CPython
    # 3.11 (~100 instructions), and every priced request comes here (issue 22).
    uncached, cached, written, output, _, written_1h = tokens
    per_input, per_output, per_read, per_write, per_write_1h, _ = rates
    return (
        uncached * per_input
        + cached * per_read
        + (written - written_1h) * per_write
        + written_1h * per_write_1h
        + output * per_output
    ) / PER


def prompt_cache_saving(tokens: Tokens, rates: Rates) -> float:
    """Reads at the uncached price minus their price, net of the writes' premium."""
    write_5m = tokens.cache_write - tokens.cache_write_1h
    return (
        tokens.cached_read * (rates.input - rates.cache_read)
        - write_5m * (rates.cache_write - rates.input)
        - tokens.cache_write_1h * (rates.cache_write_1h - rates.input)
    ) / PER


class Side(NamedTuple):
    """A side spend, priced: who spent it, on what, and its dollars."""

    alias: str
    purpose: str
    usd: float


class Bill(NamedTuple):
    """A request's cost and savings. `cost_usd` includes the side spends; `answer_usd` is the
    answer alone."""

    cost_usd: float
    answer_usd: float
    side: tuple[Side, ...]
    savings: Mapping[Lever, float]


def bill(
    *,
    tokens: Tokens,
    rates: Rates,
    batch: bool = False,
    default: Rates | None = None,
    trimmed: int = 0,
    side: tuple[Side, ...] = (),
    tier: Rates | None = None,
) -> Bill:
    """Price an answered request and attribute its savings (module docstring): `default` is the
    rates of the model a router or cascade replaced (None: no routing), `trimmed` the prompt
    tokens Trim removed, `side` the priced side spends, `tier` the rates of the service tier
    that served it when not standard."""
    paid = tier if tier is not None else rates
    if batch and rates.batch_discount:
        paid = rates.batched()
    answer = cost(tokens, paid)
    if not (side or trimmed or default is not None or paid is not rates):
        # The common request: no lever but perhaps the provider's prompt cache.
        _, cached, written, _, _, _ = tokens
        if not (cached or written):
            return Bill(answer, answer, (), NO_SAVINGS)
        saved = prompt_cache_saving(tokens, paid)
        return Bill(answer, answer, (), {Lever.PROMPT_CACHE: saved} if saved else NO_SAVINGS)
    side_usd = {Lever.ROUTE: 0.0, Lever.TRIM: 0.0}
    for spend in side:
        lever = SIDE_FOR_LEVER.get(spend.purpose)
        if lever is not None:
            side_usd[lever] += spend.usd
    savings: dict[Lever, float] = {}
    if paid is not rates:
        savings[Lever.TIER if paid is tier else Lever.BATCH] = cost(tokens, rates) - answer
    if tokens.cached_read or tokens.cache_write:
        savings[Lever.PROMPT_CACHE] = prompt_cache_saving(tokens, paid)
    if trimmed > 0 or side_usd[Lever.TRIM]:
        savings[Lever.TRIM] = trimmed * paid.input / PER - side_usd[Lever.TRIM]
    if default is not None:
        if paid is tier:  # compared at standard: the tier's difference is the tier lever's
            savings[Lever.ROUTE] = cost(tokens, default) - cost(tokens, rates)
            savings[Lever.ROUTE] -= side_usd[Lever.ROUTE]
        else:
            default_paid = default.batched() if batch and default.batch_discount else default
            savings[Lever.ROUTE] = cost(tokens, default_paid) - answer - side_usd[Lever.ROUTE]
    total = answer + sum(spend.usd for spend in side)
    return Bill(total, answer, side, {k: v for k, v in savings.items() if v})

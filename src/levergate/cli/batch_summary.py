"""The closing summary of `levergate batch run`: counts, tokens, cost and savings by lever.

Pure: it reads result lines (OpenAI's batch output shape) and the model prices of a levergate
config, and says nothing it cannot back. Cost comes from the usage each answer reports, priced
at the alias each input line asked for (`models[].price`; a `*` alias prices every model it
catches) — the same prices the gateway charges at. It covers every line of the batch, however
many runs (or gateway processes) it took, because it is read from the results, not from the
run that happens to be watching.

Savings by lever come from two places (and a cache hit's answer still carries the usage of
the answer it replays, so what the gateway's levers saved comes off the cost):
- `prompt_cache`: the provider's cached input tokens (`usage.prompt_tokens_details.
  cached_tokens`) at the difference between the input and cached-input prices — from the
  results, so for every line;
- the gateway's own levers (exact / semantic cache, coalescing, ...) from the finished-request
  records the in-process gateway produced while this CLI ran it (`Tally.add_record`): a line
  answered by an earlier, killed run is not counted there. Over `--url` the gateway does not
  return per-line savings, so that part is absent and the summary says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from levergate.config import Model

WILDCARD = "*"


@dataclass(slots=True)
class Usage:
    requests: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0


@dataclass(slots=True)
class Tally:
    """What the results and the gateway's records add up to; built line by line."""

    ok: int = 0
    failed: int = 0
    by_model: dict[str, Usage] = field(default_factory=lambda: defaultdict(Usage))
    unpriced: set[str] = field(default_factory=set)
    # From the in-process gateway's records of this run: dollars per lever, and their cost.
    lever_savings: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    records: int = 0

    def add_result(self, line: bytes, *, model: str | None) -> None:
        """One output-file line; `model` is what its input line asked for."""
        data = orjson.loads(line)
        response = data.get("response") or {}
        body = response.get("body") if isinstance(response, dict) else None
        status = response.get("status_code", 0) if isinstance(response, dict) else 0
        if data.get("error") is None and isinstance(status, int) and 200 <= status < 300:
            self.ok += 1
        else:
            self.failed += 1
        usage = body.get("usage") if isinstance(body, dict) else None
        if not isinstance(usage, dict):
            return
        name = model or (body.get("model") if isinstance(body, dict) else None) or "?"
        bucket = self.by_model[str(name)]
        bucket.requests += 1
        bucket.prompt += _int(usage.get("prompt_tokens"))
        bucket.completion += _int(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            bucket.cached += _int(details.get("cached_tokens"))

    def add_record(self, savings: Mapping[str, float]) -> None:
        self.records += 1
        for lever, dollars in savings.items():
            self.lever_savings[lever] += dollars


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def price_of(model: str, models: Mapping[str, Model]) -> Model | None:
    return models.get(model) or models.get(WILDCARD)


@dataclass(frozen=True, slots=True)
class Money:
    cost: float  # what was spent: `usage_cost` less what the gateway's levers answered free
    usage_cost: float  # every result's usage at its alias's price (cached input at its price)
    savings: dict[str, float]
    priced: bool  # False: no prices known (over --url without --prices)
    unpriced: tuple[str, ...]  # models no alias prices


def money(tally: Tally, models: Mapping[str, Model] | None) -> Money:
    if models is None:
        return Money(0.0, 0.0, dict(tally.lever_savings), priced=False, unpriced=())
    cost, cache_saved, unpriced = 0.0, 0.0, []
    for name, usage in tally.by_model.items():
        alias = price_of(name, models)
        if alias is None:
            unpriced.append(name)
            continue
        price = alias.price
        cost += price.cost(usage.prompt, usage.completion, usage.cached)
        full = price.cost(usage.prompt, usage.completion, 0)
        cache_saved += full - price.cost(usage.prompt, usage.completion, usage.cached)
    # A cache hit's answer carries the usage of the answer it replays, which nobody paid for
    # this time: what the gateway's levers saved comes off (prompt caching is in `cost` already).
    spent = max(0.0, cost - sum(tally.lever_savings.values()))
    savings = dict(tally.lever_savings)
    if cache_saved > 0:
        savings["prompt_cache"] = savings.get("prompt_cache", 0.0) + cache_saved
    return Money(spent, cost, savings, priced=True, unpriced=tuple(sorted(unpriced)))


def render(
    tally: Tally,
    worth: Money,
    *,
    status: str,
    output: str,
    errors: str | None,
    in_process: bool,
) -> list[str]:
    """The summary as lines of plain text (the CLI prints them; tests read them)."""
    tokens = list(tally.by_model.values())
    prompt = sum(u.prompt for u in tokens)
    completion = sum(u.completion for u in tokens)
    cached = sum(u.cached for u in tokens)
    lines = [
        f"batch {status}: {tally.ok} completed, {tally.failed} failed",
        f"tokens: {prompt} prompt ({cached} cached), {completion} completion",
    ]
    if worth.priced:
        less = worth.usage_cost - worth.cost
        lines.append(
            f"cost: ${worth.cost:.6f} (usage priced at the config's model prices"
            + (f", less ${less:.6f} answered by the gateway's caches)" if less > 0 else ")")
        )
        if worth.unpriced:
            lines.append(f"  not priced (no alias matches): {', '.join(worth.unpriced)}")
    else:
        lines.append("cost: not priced (pass --prices CONFIG.yaml to price the usage)")
    if worth.savings:
        for lever, dollars in sorted(worth.savings.items()):
            lines.append(f"saved by {lever}: ${dollars:.6f}")
    else:
        lines.append("savings: none recorded")
    if in_process:
        lines.append(f"  (gateway levers: from {tally.records} requests this run handled)")
    else:
        lines.append(
            "  (over --url the gateway's own levers are not reported: a cache hit's usage is "
            "counted as paid)"
        )
    lines.append(f"output: {output}")
    lines.append(f"errors: {errors}" if errors else "errors: none")
    return lines

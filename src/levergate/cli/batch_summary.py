"""The closing summary of `levergate batch run`: counts, tokens, cost and savings by lever.

Pure: it reads result lines (OpenAI's batch output shape) and the model catalog of a
levergate config, and says nothing it cannot back. Cost comes from the usage each answer
reports, read and priced by the ledger (`policies/pricing.py`: each provider's convention, four
token buckets) at the alias each input line asked for (`catalog.rates`: the alias's price, its
catalog entry, or behind `*` the entry of the model name) — what the gateway charges. It covers
every line of the batch, however many runs (or gateway processes) it took, because it is read
from the results, not from the run that happens to be watching.

Savings by lever come from two places (and a cache hit's answer still carries the usage of
the answer it replays, so what the gateway's levers saved comes off the cost):
- `prompt_cache`: the provider's cache reads at the difference between the input and
  cache-read prices, net of the writes' premium (the ledger's rule) — from the results, so for
  every line;
- the gateway's own levers (exact / semantic cache, coalescing, ...) from the finished-request
  records the in-process gateway produced while this CLI ran it (`Tally.add_record`): a line
  answered by an earlier, killed run is not counted there. Over `--url` the gateway does not
  return per-line savings, so that part is absent and the summary says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from levergate.core.json_bound import parse_json
from levergate.policies.pricing import Lever, Tokens, cost, from_usage, prompt_cache_saving

if TYPE_CHECKING:
    from levergate.catalog import Catalog


@dataclass(slots=True)
class Usage:
    """One model's results: how many, and their tokens in the ledger's buckets, summed."""

    requests: int = 0
    tokens: Tokens = field(default_factory=Tokens)

    def add(self, t: Tokens) -> None:
        self.requests += 1
        s = self.tokens
        self.tokens = Tokens(
            s.input_uncached + t.input_uncached, s.cached_read + t.cached_read,
            s.cache_write + t.cache_write, s.output + t.output, t.output_source,
            s.cache_write_1h + t.cache_write_1h,
        )  # fmt: skip


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
        data = parse_json(line)
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
        self.by_model[str(name)].add(from_usage(usage))

    def add_record(self, savings: Mapping[Lever, float]) -> None:
        self.records += 1
        for lever, dollars in savings.items():
            self.lever_savings[lever] += dollars


@dataclass(frozen=True, slots=True)
class Money:
    cost: float  # what was spent: `usage_cost` less what the gateway's levers answered free
    usage_cost: float  # every result's usage at its alias's rates (each bucket at its price)
    savings: dict[str, float]
    priced: bool  # False: no prices known (over --url without --prices)
    unpriced: tuple[str, ...]  # models no alias prices


def money(tally: Tally, catalog: Catalog | None) -> Money:
    if catalog is None:
        return Money(0.0, 0.0, dict(tally.lever_savings), priced=False, unpriced=())
    spent, cache_saved, unpriced = 0.0, 0.0, []
    for name, usage in tally.by_model.items():
        if not catalog.spec(name).priced:
            unpriced.append(name)
            continue
        rates = catalog.rates(name, name)
        spent += cost(usage.tokens, rates)
        cache_saved += prompt_cache_saving(usage.tokens, rates)
    # A cache hit's answer carries the usage of the answer it replays, which nobody paid for
    # this time: what the gateway's levers saved comes off (prompt caching is in `cost` already).
    paid = max(0.0, spent - sum(tally.lever_savings.values()))
    savings = dict(tally.lever_savings)
    if cache_saved:
        savings["prompt_cache"] = savings.get("prompt_cache", 0.0) + cache_saved
    return Money(paid, spent, savings, priced=True, unpriced=tuple(sorted(unpriced)))


def render(summary: dict[str, Any]) -> list[str]:
    """The summary (`document`) as lines of plain text (the CLI prints them; tests read them)."""
    tokens, done, failed = summary["tokens"], summary["completed"], summary["failed"]
    prompt, cached, completion = tokens["prompt"], tokens["cached"], tokens["completion"]
    lines = [
        f"batch {summary['status']}: {done} completed, {failed} failed",
        f"tokens: {prompt} prompt ({cached} cached), {completion} completion",
    ]
    builtin = summary["priced_by"] == "builtin_catalog"
    if summary["cost_usd"] is not None:
        cost = summary["cost_usd"]
        less = summary["usage_cost_usd"] - cost
        source = "the built-in catalog" if builtin else "the config's catalog"
        lines.append(
            f"cost: ${cost:.6f} (usage priced by the ledger at {source}"
            + (f", less ${less:.6f} answered by the gateway's caches)" if less > 0 else ")")
        )
        if summary["unpriced_models"]:
            why = "not in the built-in catalog" if builtin else "no alias matches"
            lines.append(f"  not priced ({why}): {', '.join(summary['unpriced_models'])}")
        if builtin:
            lines.append("  (by the model each line names; --prices CONFIG.yaml prices the "
                         "gateway's own aliases)")  # fmt: skip
    else:
        lines.append("cost: not priced (pass --prices CONFIG.yaml to price the usage)")
    if summary["savings_usd"]:
        for lever, dollars in summary["savings_usd"].items():
            lines.append(f"saved by {lever}: ${dollars:.6f}")
    else:
        lines.append("savings: none recorded")
    if summary["lever_requests"] is not None:
        lines.append(f"  (gateway levers: from {summary['lever_requests']} requests this run "
                     "handled)")  # fmt: skip
    else:
        lines.append(
            "  (over --url the gateway's own levers are not reported: a cache hit's usage is "
            "counted as paid)"
        )
    lines.append(f"output: {summary['output']}")
    errors = summary["errors"]
    lines.append(f"errors: {errors}" if errors else "errors: none")
    return lines


def document(
    tally: Tally,
    worth: Money,
    *,
    status: str,
    output: str,
    errors: str | None,
    in_process: bool,
    builtin: bool = False,
) -> dict[str, Any]:
    """The summary as one JSON-ready document (`levergate batch run --json`; `render` writes it
    as text): the amounts unrounded, `null` where the text says "not priced" / "not reported".
    `builtin`: priced by the built-in catalog (over --url without --prices), not by a config's
    aliases."""
    tokens = [u.tokens for u in tally.by_model.values()]
    return {
        "status": status,
        "completed": tally.ok,
        "failed": tally.failed,
        "tokens": {
            "prompt": sum(t.input for t in tokens),
            "cached": sum(t.cached_read for t in tokens),
            "completion": sum(t.output for t in tokens),
        },
        "cost_usd": worth.cost if worth.priced else None,
        "usage_cost_usd": worth.usage_cost if worth.priced else None,
        "priced_by": ("builtin_catalog" if builtin else "config_catalog") if worth.priced else None,
        "unpriced_models": list(worth.unpriced),
        "savings_usd": dict(sorted(worth.savings.items())),
        # The gateway's own levers: counted from this run's requests in-process, not reported
        # over --url (a cache hit's usage is then counted as paid).
        "lever_requests": tally.records if in_process else None,
        "output": output,
        "errors": errors,
    }

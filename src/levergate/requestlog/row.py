"""One finished request as one row of the request log: the columns, and the record turned into
them (in the writer's thread, never on the request path).

The columns are the `RequestRecord`'s (layers/measure/record.py, schema 4) flattened: what is
filtered or summed on has a column of its own (times, tenant, key, model, outcome, latency, the
four token buckets, cost, the savings of each `Lever`, the service tier), the rest of the
decisions (the route decision, escalation reasons, failed endpoints, side spends, notes, the
micro-batch, how the tier was decided) are one JSON `detail`, and what `levergate analyze`
replays (fingerprint, prefix digests, deadlines: requestlog/features.py) one JSON `replay`.
Money is US dollars as the ledger priced it, so the log's sums are `/metrics`' sums.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from levergate.core.call import CacheOutcome
from levergate.core.controls import Priority
from levergate.core.json_bound import parse_json
from levergate.core.reply import Completed
from levergate.core.tokenizer import TokenSource
from levergate.layers.measure.record import RequestRecord
from levergate.policies.pricing import Lever

__all__ = [
    "COLUMNS", "INTEGER", "LEVERS", "REAL", "UNKNOWN_BYTES", "ZERO_DEFAULT", "Captured", "row_of",
    "saved_column",
]  # fmt: skip

TEXT, INTEGER, REAL = "TEXT", "INTEGER", "REAL"
# What a request without its bytes as received (a library caller's) counts as held.
UNKNOWN_BYTES = 4096
LEVERS: tuple[Lever, ...] = tuple(Lever)


def saved_column(lever: Lever | str) -> str:
    return f"saved_{lever}"


# (name, type): the order of `row_of`'s values. `ts` is when the request finished (wall clock,
# epoch seconds); `saved_usd` the net of the levers' savings (negative: a lever cost more).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("ts", REAL),
    ("request_id", TEXT),
    ("kind", TEXT),
    ("origin", TEXT),
    ("tenant", TEXT),
    ("key_id", TEXT),
    ("feature", TEXT),
    ("workflow", TEXT),
    ("model", TEXT),
    ("alias", TEXT),
    ("upstream", TEXT),
    ("upstream_model", TEXT),
    ("outcome", TEXT),
    ("status", INTEGER),
    ("error", TEXT),
    ("total_ms", REAL),
    ("ttft_ms", REAL),
    ("upstream_ms", REAL),
    ("overhead_ms", REAL),
    ("queued_ms", REAL),
    ("itl_ms", REAL),
    ("input_tokens", INTEGER),
    ("cached_tokens", INTEGER),
    ("cache_write_tokens", INTEGER),
    ("output_tokens", INTEGER),
    ("output_source", TEXT),
    ("cost_usd", REAL),
    ("saved_usd", REAL),
    *((saved_column(lever), REAL) for lever in LEVERS),
    ("cache", TEXT),
    ("attempts", INTEGER),
    ("retries", INTEGER),
    ("fallback", TEXT),
    ("escalations", INTEGER),
    ("priority", TEXT),
    ("tier", TEXT),
    ("trimmed_tokens", INTEGER),
    ("expected_cached", INTEGER),
    ("detail", TEXT),
    ("request_body", TEXT),
    ("answer_body", TEXT),
    ("schema", INTEGER),
    # What `levergate analyze` replays, bodies or not (requestlog/features.py; schema 4).
    ("replay", TEXT),
)
NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)
# The columns 0 on most records (a lever that saved nothing, no cached tokens, no retry): a new
# table declares them DEFAULT 0, and SQLite's INSERT leaves out a column whose value is its
# default in every row of a batch (store.py `SqliteLog`), NULL or 0, instead of binding it.
ZERO_DEFAULT = frozenset({
    "cached_tokens", "cache_write_tokens", "cost_usd", "saved_usd",
    *(saved_column(lever) for lever in LEVERS), "queued_ms", "retries", "escalations",
    "trimmed_tokens", "expected_cached",
})  # fmt: skip


class Captured(NamedTuple):
    """A request's bodies as they were, taken by reference when it finished (bodies logging on
    for its model): turned into capped, redacted text by the writer."""

    raw: bytes | None  # the request's JSON as received, when the edge kept it
    body: Mapping[str, Any]  # the parsed request
    answer: Completed | None  # a whole answer
    chunks: Sequence[bytes]  # a stream's events that carried generated text

    @property
    def size(self) -> int:
        """Bytes held (what `bodies.max_queued_bytes` bounds): the request and the answer."""
        request = len(self.raw) if self.raw is not None else UNKNOWN_BYTES
        answer = self.answer.size if self.answer is not None else sum(map(len, self.chunks))
        return request + answer


def _detail(record: RequestRecord) -> str | None:
    found: dict[str, Any] = {}
    if record.decision is not None:
        d = record.decision
        found["route"] = {
            "router": d.router,
            "asked": d.asked,
            "chosen": d.chosen,
            "default": d.default,
            "reason": d.reason,
            "score": d.score,
        }
    if record.escalation_reasons:
        found["escalation_reasons"] = list(record.escalation_reasons)
    if record.failed_endpoints:
        found["failed_endpoints"] = sorted(record.failed_endpoints)
    if record.side:
        found["side"] = [
            {"alias": s.alias, "purpose": s.purpose, "usd": s.usd} for s in record.side
        ]
    if record.notes:
        found["notes"] = [{"layer": n.layer, "text": n.text} for n in record.notes]
    if record.microbatch is not None:
        m = record.microbatch
        found["microbatch"] = {"requests": m.requests, "inputs": m.inputs, "prorated": m.prorated}
    if record.tokens.cache_write_1h:
        found["cache_write_1h_tokens"] = record.tokens.cache_write_1h
    if record.tier_decision is not None or record.tier_assumed:
        found["tier"] = _tier_detail(record)
    return orjson.dumps(found).decode() if found else None


def _tier_detail(record: RequestRecord) -> dict[str, Any]:
    """How the service tier was decided (policies/tiers.py `TierDecision`), and whether the
    provider said which tier served it."""
    found: dict[str, Any] = {"assumed": record.tier_assumed}
    d = record.tier_decision
    if d is not None:
        found.update(
            chosen=None if d.chosen is None else d.chosen.value, reason=d.reason, asked=d.asked,
            seconds_left=d.seconds, refused=[t.value for t in d.refused],
            hedged=None if d.hedged is None else d.hedged.value,
        )  # fmt: skip
    return found


# An enum member's `.value` is a property written in Python (a frame, ~1,000 instructions, per
# read); a StrEnum or IntEnum member hashes as its str or int, in C: a dict lookup instead.
_PRIORITY = {p: p.name.lower() for p in Priority}
_SOURCE = {s: s.value for s in TokenSource}
_OUTCOME = {o: o.value for o in CacheOutcome}
_NO_SAVINGS = (0.0,) * len(LEVERS)
# The savings' names in `row_of`, in `LEVERS` order: a lever added is a name added there.
_SAVED_NAMES = ("exact", "semantic", "embeddings", "coalesced", "route", "trim", "prompt_cache",
                "batch", "tier")  # fmt: skip
if tuple(map(str, LEVERS)) != _SAVED_NAMES:
    raise RuntimeError("row_of unpacks each lever's savings by name: add the new lever there")


def row_of(
    at: float,
    record: RequestRecord,
    bodies: tuple[str | None, str | None] = (None, None),
    replay: str | None = None,
) -> tuple[Any, ...]:
    """The row of `record`, finished at `at` (epoch seconds), in `COLUMNS` order, with its
    replay features (`replay`, requestlog/features.py). The record and its timings and tokens
    are unpacked once: a `NamedTuple`'s field read is not specialised by CPython 3.11 (a
    descriptor call, ~100 instructions), unpacking is an iteration in C. The row is two
    displays joined, each under 30 items: one of more than 30 items, or with a starred part,
    is compiled as a list appended to item by item (CPython's `STACK_USE_GUIDELINE`): one
    display of the 51 values counted 12.6k instructions a record against 10.9k for three
    tuples joined (the savings between, callgrind, inprocess_cpu.py's records), and two
    joined (the savings unpacked into names, `_SAVED_NAMES`) 9.74k against three's 10.22k (a
    plain record of the tests', benchmarks/results/logstore.md). Slicing the record into a
    plain tuple first (`record[:]`, whose unpacking CPython specialises) counted the same."""
    (
        request_id, timings, tokens, cost_usd, kind, model, feature, outcome, status, error,
        upstream_model, alias, tenant, upstream, attempts, retries, tier, priority, origin,
        fallback, workflow, queued, savings, cache, decision, escalations, trimmed, reasons,
        failed, notes, key_id, side, _batch, expected_cached, microbatch, _deadline, schema,
        tier_assumed, tier_decision,
    ) = record  # fmt: skip
    total, upstream_s, overhead, ttft, gap = timings
    uncached, cached, written, output, source, written_1h = tokens
    if savings:
        saved = tuple(map(savings.get, LEVERS, _NO_SAVINGS))  # each lever's, 0.0 when none
        saved_usd = sum(saved)
    else:
        saved, saved_usd = _NO_SAVINGS, 0.0
    exact, semantic, embeddings, coalesced, route, trim, prompt_cache, batch, tier_usd = saved
    plain = not (decision or reasons or failed or side or notes or microbatch or written_1h
                 or tier_decision or tier_assumed)  # fmt: skip
    request_body, answer_body = bodies
    return (  # noqa: RUF005 - joined, not unpacked: the docstring says why
        at, request_id, kind, origin, tenant, key_id, feature, workflow, model, alias, upstream,
        upstream_model, outcome, status, error, total * 1000.0,
        None if ttft is None else ttft * 1000.0, upstream_s * 1000.0, overhead * 1000.0,
        queued * 1000.0, None if gap is None else gap * 1000.0, uncached, cached, written,
        output, _SOURCE[source], cost_usd, saved_usd,
    ) + (
        exact, semantic, embeddings, coalesced, route, trim, prompt_cache, batch, tier_usd,
        None if cache is None else f"{cache.cache}:{_OUTCOME[cache.outcome]}", attempts,
        retries, fallback, escalations, _PRIORITY[priority], tier, trimmed, expected_cached,
        None if plain else _detail(record), request_body, answer_body, schema, replay,
    )  # fmt: skip


def as_dict(row: Sequence[Any], names: Sequence[str] = NAMES) -> dict[str, Any]:
    """A stored row as a JSON object: `detail` parsed, empty savings columns left out."""
    found = dict(zip(names, row, strict=True))
    detail = found.pop("detail", None)
    found["detail"] = parse_json(detail) if detail else {}
    replay = found.get("replay")
    found["replay"] = parse_json(replay) if isinstance(replay, str) else None
    found["savings"] = {
        str(lever): value for lever in LEVERS if (value := found.pop(saved_column(lever), 0.0))
    }
    return found

"""MicroBatch: concurrent `/v1/embeddings` requests to one model become one upstream call.

Providers take up to 2,048 inputs per embeddings call for about the latency of one, and count
each call once against the key's requests-per-minute. Many clients embedding one text each (a
search box, a RAG ingest fanned out per chunk) waste both; this layer holds each request up to
`max_wait_ms` for company, sends the batch as one call with a list `input`, and answers every
request with its own rows, re-indexed from 0, in its own order (core/microbatch.py does the
batching: bounds, waiting, cancellation).

PER MODEL, above Retry: a batch is one upstream request, retried as one under the retry budget,
limited as one, balanced to one endpoint. It sits under the FRONT caches, so a cached input never
waits here, and under Fallback, so a batch that fails fails each request, whose own Fallback
then acts for it alone.

What may share a call: requests with the same model name, tenant and every other body field
(`dimensions`, `encoding_format`, `user`, ...), so an answer is what the request would have got
alone. Tenants are never mixed: the upstream's per-request attribution (`user`, abuse
monitoring) and a tenant's data must not ride on another's request. A batch the provider rejects
as a bad request (400/413/422: one input too long, say) is sent again one request at a time,
so each request gets its own verdict instead of failing for a neighbour's input; any other
failure (5xx, timeout, 429 after Retry) reaches exactly that batch's requests.

Usage stays per request: the batch's `prompt_tokens` is split over its requests in proportion
to their inputs' size (token ids counted exactly, text by its length), with largest remainders
so the shares add up to what the provider billed. That is a proration unless every input was
token ids whose count matches the bill; the reply says which in `x-levergate-microbatch-usage`
and `trace.microbatch` records it. A request alone in its batch goes upstream untouched.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from levergate.config import MicroBatchSettings, ModelSettings
from levergate.core.call import BatchShare, Call, Context, Trace
from levergate.core.clock import Clock, timeout
from levergate.core.microbatch import BatchLimits, MicroBatcher
from levergate.core.reply import Completed, Reply
from levergate.core.service import Layer, Service
from levergate.errors import UpstreamRejected, UpstreamTimeout, UpstreamUnavailable
from levergate.policies.prorate import prorate
from levergate.protocol.openai.body import embedding_inputs, is_token_ids

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

BATCH_HEADER = "x-levergate-microbatch"  # requests that shared the upstream call
USAGE_HEADER = "x-levergate-microbatch-usage"  # "exact" or "prorated"
# Statuses that blame the request's content: the batch is re-sent one request at a time.
_ISOLATE = frozenset({400, 413, 422})


@dataclass(frozen=True, slots=True)
class Pending:
    call: Call
    inputs: list[Any]
    size: int  # bytes of input: UTF-8 text, 4 per token id


Outcome = Reply | Exception


class MicroBatch:
    @classmethod
    def layer(
        cls, settings: MicroBatchSettings, *, model: ModelSettings, shared: Shared
    ) -> Layer | None:
        """None unless micro-batching is on for this alias."""
        s = settings.for_model(model.name)
        if not s.enabled:
            return None
        limits = BatchLimits(
            max_wait=s.max_wait_ms / 1000.0, max_items=s.max_inputs, max_requests=s.max_requests,
            max_bytes=s.max_bytes, max_running=s.max_running,
        )  # fmt: skip
        return partial(cls, limits=limits, clock=shared.clock)

    def __init__(self, inner: Service, *, limits: BatchLimits, clock: Clock) -> None:
        self._inner = inner
        self._clock = clock
        self.batcher: MicroBatcher[Pending, Outcome] = MicroBatcher(
            self._send, limits=limits, clock=clock,
            items=lambda p: len(p.inputs), size=lambda p: p.size,
        )  # fmt: skip

    async def __call__(self, call: Call) -> Reply:
        inputs = embedding_inputs(call.body.get("input")) if call.kind == "embedding" else []
        key = _group(call) if inputs and not call.stream else None
        if key is None:
            return await self._inner(call)
        outcome = await self._join(Pending(call, inputs, _size(inputs)), key)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _join(self, pending: Pending, key: Hashable) -> Outcome:
        """Wait for this request's share, no longer than its own deadline: leaving early
        leaves the batch running for the others."""
        deadline = pending.call.ctx.controls.deadline
        if deadline is None:
            return await self.batcher.submit(pending, key=key)
        remaining = deadline - self._clock.now()
        if remaining <= 0:
            raise _expired()
        try:
            async with timeout(self._clock, remaining):
                return await self.batcher.submit(pending, key=key)
        except TimeoutError:
            raise _expired() from None

    async def _send(self, batch: Sequence[Pending]) -> list[Outcome]:
        if len(batch) == 1:  # alone: exactly what it would have been without this layer
            return [await self._inner(batch[0].call)]
        merged = _merged(batch)
        try:
            reply = await self._inner(merged)
        except UpstreamRejected as exc:
            if exc.upstream_status not in _ISOLATE:
                raise
            return await self._one_by_one(batch)
        finally:
            _copy_trace(merged.ctx.trace, batch)
        if not isinstance(reply, Completed) or reply.status != 200:
            raise UpstreamUnavailable("the upstream answered a batch of embeddings without data")
        return list(_split(reply, batch))

    async def _one_by_one(self, batch: Sequence[Pending]) -> list[Outcome]:
        async def alone(pending: Pending) -> Outcome:
            try:
                return await self._inner(pending.call)
            except Exception as exc:  # each request's own outcome, raised to it alone
                return exc

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(alone(p)) for p in batch]
        return [task.result() for task in tasks]


def _expired() -> UpstreamTimeout:
    return UpstreamTimeout(
        "The request's deadline passed before the upstream answered.", code="deadline_exceeded"
    )


def _size(inputs: list[Any]) -> int:
    return sum(len(v.encode()) if isinstance(v, str) else 4 * len(v) for v in inputs)


def _group(call: Call) -> Hashable | None:
    """What must be equal for two requests to share a call; None: never batched."""
    rest = {k: v for k, v in call.body.items() if k != "input"}
    try:
        shape = orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    return (call.model, call.ctx.principal.tenant, shape)


def _merged(batch: Sequence[Pending]) -> Call:
    """One call for the batch: the most urgent priority, the latest deadline (each request
    still leaves at its own), a record of its own copied back to every request."""
    first = batch[0].call
    deadlines = [p.call.ctx.controls.deadline for p in batch]
    ctx = Context(
        request_id=f"{first.ctx.request_id}+{len(batch) - 1}",
        principal=first.ctx.principal,
        controls=dataclasses.replace(
            first.ctx.controls,
            priority=min(p.call.ctx.controls.priority for p in batch),
            deadline=None if None in deadlines else max(d for d in deadlines if d is not None),
        ),
        headers=first.ctx.headers,
        trace=Trace(tenant=first.ctx.trace.tenant, alias=first.ctx.trace.alias),
    )
    body = {**first.body, "input": [item for p in batch for item in p.inputs]}
    return Call(kind="embedding", body=body, ctx=ctx)


def _copy_trace(source: Trace, batch: Sequence[Pending]) -> None:
    for pending in batch:
        trace = pending.call.ctx.trace
        trace.upstream, trace.upstream_model = source.upstream, source.upstream_model
        trace.upstream_seconds += source.upstream_seconds
        trace.attempts += source.attempts
        trace.retries += source.retries
        trace.failed_endpoints |= source.failed_endpoints
        trace.quota = source.quota if source.quota is not None else trace.quota


def _split(reply: Completed, batch: Sequence[Pending]) -> list[Reply]:
    data = reply.data
    count = sum(len(p.inputs) for p in batch)
    rows = _ordered(data.get("data"), count)
    usage = data.get("usage")
    billed = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    billed = billed if isinstance(billed, int) and billed >= 0 else 0
    exact_ids = all(is_token_ids(v) for p in batch for v in p.inputs)
    weights = [sum(len(v) for v in p.inputs) if exact_ids else p.size for p in batch]
    prorated = not (exact_ids and sum(weights) == billed)
    shares = prorate(billed, weights)
    replies: list[Reply] = []
    start = 0
    for pending, share in zip(batch, shares, strict=True):
        mine = rows[start : start + len(pending.inputs)]
        start += len(pending.inputs)
        body = {
            "object": "list",
            "data": [{**row, "index": i} for i, row in enumerate(mine)],
            "model": data.get("model", pending.call.model),
            "usage": {"prompt_tokens": share, "total_tokens": share},
        }
        pending.call.ctx.trace.microbatch = BatchShare(len(batch), count, prorated)
        headers = {**reply.headers, BATCH_HEADER: str(len(batch)),
                   USAGE_HEADER: "prorated" if prorated else "exact"}  # fmt: skip
        replies.append(Completed(data=body, headers=headers))
    return replies


def _ordered(rows: Any, count: int) -> list[dict[str, Any]]:
    """The upstream's rows by their `index` (providers may answer out of order)."""
    if not isinstance(rows, list) or len(rows) != count:
        raise UpstreamUnavailable("the upstream returned the wrong number of embeddings")
    ordered: list[dict[str, Any] | None] = [None] * count
    for position, row in enumerate(rows):
        index = row.get("index", position) if isinstance(row, dict) else None
        if not isinstance(index, int) or not 0 <= index < count or ordered[index] is not None:
            raise UpstreamUnavailable("the upstream returned a malformed embeddings list")
        ordered[index] = row
    return [row for row in ordered if row is not None]

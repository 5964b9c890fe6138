"""Trimming replayed: the gateway's own `Trim` layer (layers/trim/: the output budget, cuts of long
tool results and documents, windowing to the budget by `policies.trim.plan`), built per alias
as the pipeline builds it, applied to each logged body. What it leaves out is priced:

- prompt tokens: the log's prompt plus what the logged run's trim already left out
  (`trimmed_tokens`), less what this trim leaves out (`trace.trimmed_input`, counted with the
  alias's tokenizer as the layer counts it);
- output tokens: at most the output budget the layer sets (`max_tokens` capped or defaulted);
- the trimmed prompt's prefix digests (requestlog/features.py) replace the logged ones, so the
  provider prompt cache sees what would really be sent;
- a request whose pinned messages alone do not fit is refused (`context_length_exceeded`),
  and one over `max_tokens` with `over_max_tokens: reject` too: neither paid nor timed.

A rule's `summary_model` summarises the dropped turns with a model call: not made offline, so
its requests are priced trimmed without the summary (said in the notes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from levergate.analyze.calls import answer, call_of, model_for, shared_of
from levergate.analyze.effects import Effect
from levergate.analyze.inputs import Req
from levergate.config import Settings, TrimSettings
from levergate.core.call import Call
from levergate.core.clock import SystemClock
from levergate.core.reply import Reply
from levergate.core.service import Service
from levergate.errors import BadRequest
from levergate.layers.trim.edit import OUTPUT_FIELDS
from levergate.layers.trim.layer import Trim
from levergate.requestlog.features import BLOCK_BYTES, decode_blocks, features_of_body

__all__ = ["Trimmed", "replay_trim"]


@dataclass
class Trimmed:
    effects: dict[int, Effect] = field(default_factory=dict)
    seen: int = 0  # requests to an alias with a trim rule
    trimmed: int = 0  # of which the layer shortened the prompt
    tokens: int = 0  # prompt tokens left out, as the layer counted them
    refused: int = 0
    capped: int = 0  # answers the output budget shortens
    output_cut: int = 0  # output tokens fewer
    notes: list[str] = field(default_factory=list)


def replay_trim(
    trim: TrimSettings, settings: Settings, reqs: Sequence[Req], aliases: Mapping[int, str]
) -> Trimmed:
    """Each request through its alias's trim layer (`aliases`: the alias a route or cascade
    sends it to instead of the logged one)."""
    return asyncio.run(_trim(trim, settings, reqs, aliases))


async def _trim(
    trim: TrimSettings, settings: Settings, reqs: Sequence[Req], aliases: Mapping[int, str]
) -> Trimmed:
    found = Trimmed()
    if any(rule.summary_model for rule in trim.models.values()):
        found.notes.append("summary_model is a model call: not made offline; trimmed requests "
                           "are priced without the summary message")  # fmt: skip
    shared = shared_of(settings, SystemClock())
    layers: dict[str, Service | None] = {}
    sent: dict[int, Call] = {}

    async def upstream(call: Call) -> Reply:
        at = int(call.ctx.request_id)
        sent[at] = call
        return answer(reqs[at], alias=call.model)

    try:
        for at, req in enumerate(reqs):
            alias = aliases.get(at, req.alias)
            if alias not in layers:
                layers[alias] = _layer(trim, settings, alias, shared, upstream)
            layer = layers[alias]
            call = call_of(at, req)
            if layer is None or call is None:
                continue
            found.seen += 1
            try:
                await layer(call.with_body(model=alias))
            except BadRequest:
                found.refused += 1
                found.effects[at] = Effect(refused=True)
                continue
            effect = _effect(req, sent.pop(at), found)
            if effect is not None:
                found.effects[at] = effect
    finally:
        await shared.aclose()
    return found


def _layer(
    trim: TrimSettings, settings: Settings, alias: str, shared: Any, upstream: Service
) -> Service | None:
    model = model_for(settings, alias)
    if model is None or (trim.models.get(model.name) is None):
        return None
    make = Trim.layer(trim, model=model, shared=shared)
    return None if make is None else make(upstream)


def _effect(req: Req, call: Call, found: Trimmed) -> Effect | None:
    left_out = call.ctx.trace.trimmed_input
    cap = next((v for f in OUTPUT_FIELDS if isinstance(v := call.body.get(f), int)), None)
    output = min(req.output, cap) if cap is not None and cap < req.output else None
    if not left_out and output is None and not req.trimmed:
        return None
    prompt = max(1, req.prompt + req.trimmed - left_out)
    if output is not None:
        found.capped += 1
        found.output_cut += req.output - output
    found.trimmed += left_out > 0
    found.tokens += left_out
    blocks = None
    if left_out:
        features = features_of_body(call.body, kind=call.kind, model=call.model)
        pb = features["pb"]
        blocks = (decode_blocks(features["blocks"]), BLOCK_BYTES * prompt / pb if pb else 0.0)
    return Effect(prompt=prompt if prompt != req.prompt else None, output=output, blocks=blocks)

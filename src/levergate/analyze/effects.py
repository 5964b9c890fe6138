"""What the levers that need bodies do to one request, as the replay applies it: the gateway's own
layers decide it (analyze/bodies.py), the replay (analyze/replay.py) prices and times it.

    semantic   the semantic cache answered it: nothing is paid, it takes a hit's time
    alias      another alias answers it (a route's choice, a cascade's last step): priced at that
               alias, timed by that alias's fitted latency model (analyze/fit.py)
    prompt     the prompt tokens sent (trimming), the request's own times shifted by the fitted
               prefill cost of the difference
    output     the answer's tokens (trimming's output cap)
    first      a cascade's first step answered and was rejected: that answer is paid too, and
               waited for before the next step's
    refused    trimming refuses it (`context_length_exceeded`): nothing is paid or timed
    blocks     the trimmed prompt's prefix digests (and tokens per block): what the provider's
               prompt cache sees of it
    seconds    time the layer itself adds on the request path (embedding the prompt for the
               semantic cache's lookup or a learned router's score)

An effect is relative to what the log shows: a request the baseline's layers already routed or
trimmed keeps its logged alias and tokens under the same settings.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from levergate.analyze.fit import Latency
from levergate.analyze.inputs import Req

__all__ = ["Effect", "Effects", "applied", "merged"]


class Effect(NamedTuple):
    semantic: bool = False
    alias: str | None = None
    prompt: int | None = None
    output: int | None = None
    first: str | None = None
    refused: bool = False
    blocks: tuple[tuple[int, ...], float] | None = None
    seconds: float = 0.0


Effects = Mapping[int, Effect]  # request index (in the input's order) -> its effect


def merged(a: Effect | None, b: Effect) -> Effect:
    """Two levers' effects on one request: `b`'s fields where it sets them."""
    if a is None:
        return b
    return Effect(
        semantic=a.semantic or b.semantic,
        alias=b.alias if b.alias is not None else a.alias,
        prompt=b.prompt if b.prompt is not None else a.prompt,
        output=b.output if b.output is not None else a.output,
        first=b.first if b.first is not None else a.first,
        refused=a.refused or b.refused,
        blocks=b.blocks if b.blocks is not None else a.blocks,
        seconds=a.seconds + b.seconds,
    )


def applied(req: Req, effect: Effect, latency: Mapping[str, Latency], overall: Latency) -> Req:
    """`req` as the effect's layers send it (module docstring). A request answered by another
    alias takes that alias's modelled times (its own logged ones were another model's)."""
    if effect.alias is not None and effect.alias != req.alias:
        req = req._replace(alias=effect.alias, upstream="", ttft=None, total=None, cached=0,
                           written=0)  # fmt: skip
    if effect.output is not None and effect.output < req.output:
        model = latency.get(req.alias, overall)
        fewer = req.output - effect.output
        cut = fewer / model.tokens_per_second if model.tokens_per_second else 0.0
        total = None if req.total is None else max(0.0, req.total - cut)
        req = req._replace(output=effect.output, total=total)
    if effect.blocks is not None:
        req = req._replace(blocks=effect.blocks[0], block_tokens=effect.blocks[1])
    if effect.prompt is not None and effect.prompt != req.prompt:
        prompt = max(0, effect.prompt)
        shift = latency.get(req.alias, overall).shift(prompt - req.prompt)
        req = req._replace(
            prompt=prompt, cached=min(req.cached, prompt),
            written=min(req.written, max(0, prompt - req.cached)),
            total=None if req.total is None else max(0.0, req.total + shift),
            ttft=None if req.ttft is None else max(0.0, req.ttft + shift),
        )  # fmt: skip
    return req

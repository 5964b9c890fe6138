"""What to send and when: arrival schedules and request bodies.

An `Arrival` is the lightweight plan of one request (intended offset, lengths); its body is built
only at launch, so counting what a stopped run never sent costs nothing.

Prompts are synthetic text of common one-token English words, about one token per word. By
default every prompt starts with a run nonce and its index, so neither an exact cache nor a
provider prefix cache can make the target look faster than it is; `repeat_rate` then re-sends
whole earlier bodies on purpose. Mooncake records carry the ids of shared 512-token prefix
blocks: those prompts are rebuilt block by block, so requests share prefixes exactly where the
production ones did, and the nonce goes at the end instead.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

from levergate.bench.config import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    ArrivalProcess,
    BenchConfig,
)
from levergate.bench.traces import MOONCAKE_BLOCK_TOKENS, TraceRecord

_VOCABULARY = (
    "the of and to in is was for on that with as by at from his her an are were which this be "
    "or had not but have one all new their has they been more its who two after first also "
    "into other time only over most some when can would about during out year there three then "
    "she these made used between him up later city world many than part under such well while "
    "four both where may no game school since early being known film through state long before "
    "high best each same house war book five area water line place end music life name back own "
    "team work small show set last second form great large people group three day main number "
    "way around power old family left system use public name side band album local good even "
    "field song road home light land point river town free open car blue green red stone paper "
    "cloud tree bird fish dog cat horse glass metal wood fire wind rain snow sun moon star sea "
    "hill lake bridge tower garden window door table chair bread milk tea rice apple salt sugar "
    "gold silver iron copper king queen child woman man friend doctor teacher farmer pilot"
)
_WORDS = tuple(_VOCABULARY.split())
_POOL_WORDS = 1 << 16
_REPEAT_MEMORY = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Arrival:
    """`offset_s` is the intended send time relative to the start; None in a closed loop."""

    index: int
    offset_s: float | None
    prompt_tokens: int
    max_tokens: int | None
    hash_ids: tuple[int, ...] = ()


def arrivals(
    config: BenchConfig, *, trace: Iterable[TraceRecord] | None = None
) -> Iterator[Arrival]:
    """The run's plan, bounded by `requests`, by the trace's end, and for open loops by the
    sending deadline (closed loops check the deadline as they go)."""
    prompt, output = config.prompt_tokens, config.max_tokens
    rng = random.Random(config.seed)
    limit = config.requests
    horizon = config.stop_after_s if config.mode != "closed" else None
    offset = 0.0
    for index, record in enumerate(_lengths(trace)):
        if limit is not None and index >= limit:
            return
        if config.mode == "rate" and config.rate is not None:
            offset = _next_offset(
                config.arrival, rng, rate=config.rate, index=index, previous=offset
            )
        elif config.mode == "trace" and record is not None:
            offset = record.offset_s
        if horizon is not None and offset >= horizon:
            return
        yield Arrival(
            index=index,
            offset_s=None if config.mode == "closed" else offset,
            prompt_tokens=prompt or (record.input_tokens if record else DEFAULT_PROMPT_TOKENS),
            max_tokens=(
                None
                if config.endpoint == "embeddings"
                else output or (record.output_tokens if record else DEFAULT_MAX_TOKENS)
            ),
            hash_ids=record.hash_ids if record is not None and prompt is None else (),
        )


def _next_offset(
    process: ArrivalProcess, rng: random.Random, *, rate: float, index: int, previous: float
) -> float:
    """Uniform spacing is wrk2's `-R` (index / rate, no drift from float sums); Poisson spacing
    (exponential gaps, what vLLM's and SGLang's benchmarks default to) adds realistic bursts."""
    if process == "poisson":
        return 0.0 if index == 0 else previous + rng.expovariate(rate)
    return index / rate


def _lengths(trace: Iterable[TraceRecord] | None) -> Iterator[TraceRecord | None]:
    if trace is None:
        while True:
            yield None
    else:
        yield from trace


class PromptFactory:
    """Builds prompt text cheaply: a pool of random words is joined once, and each prompt is a
    slice of it, so a 1,000-token prompt costs a string copy rather than 1,000 random draws."""

    __slots__ = ("_nonce", "_rng", "_starts", "_text")

    def __init__(self, *, seed: int, nonce: str) -> None:
        self._rng = random.Random(seed)
        self._nonce = nonce
        words = self._rng.choices(_WORDS, k=_POOL_WORDS)
        doubled = [*words, *words]  # a slice may wrap around the end of the pool
        self._starts: list[int] = []
        position = 0
        for word in doubled:
            self._starts.append(position)
            position += len(word) + 1
        self._starts.append(position)
        self._text = " ".join(doubled) + " "

    def words(self, *, start: int, count: int) -> str:
        """`count` pool words from word `start`, wrapping as needed."""
        parts: list[str] = []
        start %= _POOL_WORDS
        while count > 0:
            take = min(count, _POOL_WORDS)
            parts.append(self._text[self._starts[start] : self._starts[start + take] - 1])
            count -= take
            start = (start + take) % _POOL_WORDS
        return " ".join(parts)

    def unique(self, *, index: int, tokens: int) -> str:
        """Nonce and index first, so no two prompts share more than a token or two of prefix."""
        head = f"{self._nonce}-{index}:"
        body = self.words(start=self._rng.randrange(_POOL_WORDS), count=max(1, tokens - 4))
        return f"{head} {body}"

    def blocks(self, *, index: int, tokens: int, hash_ids: tuple[int, ...]) -> str:
        """One deterministic 512-token block per hash id (the same id gives the same text in
        every request), the last block cut to fit `tokens`; the nonce is appended at the end."""
        parts: list[str] = []
        remaining = max(1, tokens - 4)
        for block in hash_ids:
            size = min(MOONCAKE_BLOCK_TOKENS, remaining)
            if size <= 0:
                break
            start = (block * 2654435761) % _POOL_WORDS
            parts.append(f"<{block}> " + self.words(start=start, count=max(1, size - 3)))
            remaining -= size
        parts.append(f"{self._nonce}-{index}.")
        return " ".join(parts)


class BodyFactory:
    """Turns arrivals into encoded JSON bodies; remembers recent ones to honour `repeat_rate`."""

    __slots__ = ("_base", "_config", "_prompts", "_recent", "_rng")

    def __init__(self, *, config: BenchConfig, nonce: str) -> None:
        self._config = config
        self._rng = random.Random(config.seed + 1)
        self._prompts = PromptFactory(seed=config.seed, nonce=nonce)
        self._recent: list[bytes] = []
        base: dict[str, Any] = {"model": config.model}
        if config.stream:
            base["stream"] = True
            base["stream_options"] = {"include_usage": True}
        self._base: Mapping[str, Any] = {**base, **(config.extra_body or {})}

    def body(self, arrival: Arrival) -> tuple[bytes, bool]:
        """The encoded body, and whether it repeats an earlier one."""
        rate = self._config.repeat_rate
        if self._recent and rate > 0.0 and self._rng.random() < rate:
            return self._rng.choice(self._recent), True
        encoded = orjson.dumps(self._shape(arrival))
        if self._config.repeat_rate > 0.0:
            if len(self._recent) >= _REPEAT_MEMORY:
                self._recent[self._rng.randrange(_REPEAT_MEMORY)] = encoded
            else:
                self._recent.append(encoded)
        return encoded, False

    def _shape(self, arrival: Arrival) -> dict[str, Any]:
        if arrival.hash_ids:
            text = self._prompts.blocks(
                index=arrival.index, tokens=arrival.prompt_tokens, hash_ids=arrival.hash_ids
            )
        else:
            text = self._prompts.unique(index=arrival.index, tokens=arrival.prompt_tokens)
        endpoint = self._config.endpoint
        if endpoint == "embeddings":
            return {"input": text, **self._base}
        shaped: dict[str, Any]
        if endpoint == "chat":
            shaped = {"messages": [{"role": "user", "content": text}]}
        else:
            shaped = {"prompt": text}
        shaped["max_tokens"] = arrival.max_tokens
        shaped.update(self._base)
        return shaped

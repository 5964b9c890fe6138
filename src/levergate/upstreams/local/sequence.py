"""What crosses between the event loop and the engine thread, and a sequence's own state.

A request goes in as an immutable `Request` with a `Ticket`; the engine answers through the
ticket's sink with `Tokens` items (one per step, several tokens when a speculative draft was
accepted), then exactly one `Finished` or `Failed`. The sink is
`loop.call_soon_threadsafe(queue.put_nowait, item)`, so the engine never touches the loop's
objects, and the loop never waits on the engine while holding anything.

Cancelling sets a flag the engine reads at its next step (a plain attribute: one writer, one
reader, and a step's worth of extra tokens is harmless) and wakes the engine if it sleeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from levergate.errors import LevergateError
from levergate.upstreams.local.logprobs import Scored
from levergate.upstreams.local.sampling import Sampler, SamplingParams


@dataclass(frozen=True, slots=True)
class Draft:
    """Prompt-lookup settings for one request (None on the request: no speculation)."""

    ngram_min: int
    ngram_max: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Request:
    prompt: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams
    draft: Draft | None = None
    # None: no logprobs asked (the plain path); N: score each token with N alternatives.
    logprobs: int | None = None


@dataclass(frozen=True, slots=True)
class Tokens:
    ids: tuple[int, ...]
    text: bytes
    cached: int  # prompt tokens whose KV was reused rather than computed
    scores: tuple[Scored, ...] | None = None  # one per id, when the request asked for logprobs


@dataclass(frozen=True, slots=True)
class Finished:
    reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    drafted: int
    accepted: int


@dataclass(frozen=True, slots=True)
class Failed:
    error: LevergateError


Item = Tokens | Finished | Failed


@dataclass(eq=False, slots=True)
class Ticket:
    request: Request
    sink: Callable[[Item], None]
    wake: Callable[[], None] = field(default=lambda: None)
    cancelled: bool = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.wake()


class Sequence:
    """One request in a slot: its tokens so far (prompt, then output) and where decoding is.
    `computed` tokens have KV cells; `pending` is the last sampled token, not yet decoded."""

    __slots__ = (
        "accepted",
        "cached",
        "computed",
        "draft_limit",
        "drafted",
        "generated",
        "length",
        "pending",
        "reserved",
        "sampler",
        "slot",
        "ticket",
        "tokens",
    )

    def __init__(self, ticket: Ticket, *, slot: int, capacity: int, reserved: int) -> None:
        request = ticket.request
        self.ticket = ticket
        self.slot = slot
        self.reserved = reserved
        self.tokens: npt.NDArray[np.int32] = np.zeros(capacity, dtype=np.int32)
        self.tokens[: len(request.prompt)] = request.prompt
        self.length = len(request.prompt)
        self.computed = 0
        self.cached = 0
        self.pending: int | None = None
        self.generated = 0
        self.drafted = 0
        self.accepted = 0
        self.draft_limit = request.draft.tokens if request.draft else 0
        seed = request.sampling.seed
        self.sampler = Sampler(request.sampling, rng=np.random.default_rng(seed))

    @property
    def request(self) -> Request:
        return self.ticket.request

    @property
    def prompt_length(self) -> int:
        return len(self.ticket.request.prompt)

    @property
    def prefilling(self) -> bool:
        return self.pending is None

    def history(self) -> npt.NDArray[np.int32]:
        return self.tokens[: self.length]

    def append(self, token: int) -> None:
        self.tokens[self.length] = token
        self.length += 1

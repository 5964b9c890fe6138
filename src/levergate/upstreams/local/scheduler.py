"""Continuous batching: which sequences run, and what each feeds into the next step.

Requests wait in arrival order and join between steps while a slot is free and the KV cells they
may need (prompt + max_tokens, reserved up front) fit in the pool, so a running sequence never
runs out of room mid-answer. A joining request starts from the longest prefix it can reuse:
a running sequence's computed prefix (shared cells, no copy) or a cached KV state (restored,
then trimmed to the common part). A request whose prefix another request is still computing
waits for it instead of computing it a second time: a shared prefix is computed once.

Each step feeds every decoding sequence its pending token (plus a prompt-lookup draft when
asked), then fills the rest of the step's token budget with prompt chunks of the sequences still
prefilling, oldest first. Decoding first keeps inter-token latency steady while new prompts
stream in; chunking keeps one long prompt from stalling everyone.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from levergate.upstreams.local.prefix_cache import PrefixCache, Tokens, common_prefix
from levergate.upstreams.local.sequence import Sequence, Ticket
from levergate.upstreams.local.speculative import propose


class KVCells(Protocol):
    def forget(self, seq: int, start: int = 0) -> None: ...

    def share(self, source: int, target: int, length: int) -> None: ...

    def load(self, seq: int, state: bytearray) -> bool: ...


@dataclass(frozen=True, slots=True)
class Work:
    """What one sequence feeds into a step: `fed` tokens at positions `start`..., of which the
    last `outputs` produce logits. `draft` is the speculative part of `fed` (after the pending
    token)."""

    seq: Sequence
    start: int
    fed: list[int]
    outputs: int
    draft: list[int]


class Scheduler:
    def __init__(
        self, *, kv: KVCells, cache: PrefixCache, slots: int, n_ctx: int, batch_tokens: int
    ) -> None:
        self._kv = kv
        self._cache = cache
        self._n_ctx = n_ctx
        self._batch_tokens = batch_tokens
        self._free = list(range(slots - 1, -1, -1))
        self.waiting: deque[Ticket] = deque()
        self.active: dict[int, Sequence] = {}
        self.reserved = 0
        self.reused_tokens = 0

    def idle(self) -> bool:
        return not self.active and not self.waiting

    def release(self, seq: Sequence) -> None:
        """Free a finished, failed or cancelled sequence's slot, cells and reservation."""
        if self.active.pop(seq.slot, None) is not None:
            self._kv.forget(seq.slot)
            self._free.append(seq.slot)
            self.reserved -= seq.reserved

    def reap(self) -> None:
        """Drop cancelled requests: waiting ones, and running ones with their cells."""
        self.waiting = deque(t for t in self.waiting if not t.cancelled)
        for seq in [s for s in self.active.values() if s.ticket.cancelled]:
            self.release(seq)

    def admit(self) -> list[Sequence]:
        admitted: list[Sequence] = []
        deferred: deque[Ticket] = deque()
        while self.waiting and self._free:
            ticket = self.waiting.popleft()
            request = ticket.request
            draft = request.draft.tokens if request.draft else 0
            need = min(len(request.prompt) + request.max_tokens + draft + 1, self._n_ctx)
            if self.active and self.reserved + need > self._n_ctx:
                deferred.append(ticket)
                break  # first come, first served: no overtaking by smaller requests
            prompt = np.asarray(request.prompt, dtype=np.int32)
            if self._prefix_in_progress(prompt):
                deferred.append(ticket)
                continue
            capacity = len(prompt) + request.max_tokens + draft + 2
            seq = Sequence(ticket, slot=self._free.pop(), capacity=capacity, reserved=need)
            self.active[seq.slot] = seq
            self.reserved += need
            self._reuse(seq, prompt)
            admitted.append(seq)
        self.waiting.extendleft(reversed(deferred))
        return admitted

    def plan(self) -> list[Work]:
        budget = self._batch_tokens
        works: list[Work] = []
        for seq in sorted(self.active.values(), key=lambda s: s.slot):
            if seq.pending is None or budget == 0:
                continue
            draft = self._draft(seq, budget - 1)
            works.append(Work(seq, seq.computed, [seq.pending, *draft], 1 + len(draft), draft))
            budget -= 1 + len(draft)
        for seq in self._prefilling():
            count = min(budget, seq.prompt_length - seq.computed)
            if count <= 0:
                continue
            fed = [int(t) for t in seq.tokens[seq.computed : seq.computed + count]]
            done = seq.computed + count == seq.prompt_length
            works.append(Work(seq, seq.computed, fed, 1 if done else 0, []))
            budget -= count
        return works

    def _prefilling(self) -> list[Sequence]:
        """Sequences still computing their prompt, in arrival order (tickets are admitted in
        order, and dicts keep insertion order)."""
        return [s for s in self.active.values() if s.pending is None]

    def _draft(self, seq: Sequence, room: int) -> list[int]:
        options = seq.request.draft
        left = seq.request.max_tokens - seq.generated - 1
        limit = min(room, left, seq.draft_limit)
        if options is None or limit <= 0:
            return []
        return propose(
            seq.history(), ngram_min=options.ngram_min, ngram_max=options.ngram_max, limit=limit
        )

    def _prefix_in_progress(self, prompt: Tokens) -> bool:
        """Whether a running sequence is still computing a prefix this prompt shares, longer
        than what could be reused now by at least the cache's minimum."""
        limit = len(prompt) - 1
        now = self._best_running(prompt, limit)[1]
        for seq in self._prefilling():
            later = min(common_prefix(seq.tokens[: seq.prompt_length], prompt), limit)
            if later - now >= self._cache.min_tokens and later > seq.computed:
                return True
        return False

    def _best_running(self, prompt: Tokens, limit: int) -> tuple[Sequence | None, int]:
        best: tuple[Sequence | None, int] = (None, 0)
        for seq in self.active.values():
            common = min(common_prefix(seq.tokens[: seq.computed], prompt), limit)
            if common > best[1]:
                best = (seq, common)
        return best

    def _reuse(self, seq: Sequence, prompt: Tokens) -> None:
        limit = len(prompt) - 1
        source, shared = self._best_running(prompt, limit)
        match = self._cache.match(prompt, limit=limit)
        if (
            source is not None
            and shared >= self._cache.min_tokens
            and (match is None or shared >= match.common)
        ):
            self._kv.share(source.slot, seq.slot, shared)
            seq.computed = seq.cached = shared
        elif match is not None:
            state = self._cache.state(match.key)
            if state is not None and self._kv.load(seq.slot, state):
                self._kv.forget(seq.slot, match.common)
                seq.computed = seq.cached = match.common
            else:
                self._kv.forget(seq.slot)
        self.reused_tokens += seq.cached

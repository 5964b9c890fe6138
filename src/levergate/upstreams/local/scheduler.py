"""Continuous batching: which sequences run, and what each feeds into the next step.

Requests wait in arrival order and join between steps while a slot is free and the KV cells they
may need (prompt + max_tokens, reserved up front) fit in the pool, so a running sequence never
runs out of room mid-answer. A joining request starts from the longest prefix it can reuse,
in the KV pool itself when it can: a running sequence's computed prefix, or the cells a
finished request left in its slot (a "resident"), both shared or trimmed in place with no copy;
else a cached KV state (restored, ~23 KB per token, then trimmed to the common part). A request
whose prefix another request is still computing waits for it instead of computing it a second
time: a shared prefix is computed once.

Residents live until the next admission, as llama-server's idle slots do (it saves them to
its prompt cache and clears them when a task starts, with a unified KV pool): an admission
keeps only the resident it reuses and evicts the others. llama.cpp gives new cells the first
free ones from a moving head and attends over the pool up to its highest cell in use, so a
resident kept through a cold prompt's prefill would push that prompt's cells above its own and
make every step of it attend over both (a cold 1.5k-token prompt took 1.19x llama-server's
time to first token with residents kept); evicted, they give their cells back from the bottom
(`seq_rm` moves the head down to the first cell it frees), and their saved states remain.
The new request takes an empty slot (a resident it shares a prefix with is copied, so its
tail stays for its own follow-up), else the resident it matches, trimmed in place. The one
resident kept goes too unless the running sequences' reservations and the cells only it holds
fit in the pool, those within `resident_cells` (`CellMap` counts the cells).

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

from levergate.upstreams.local.cells import CellMap
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


@dataclass(frozen=True, slots=True)
class Resident:
    """The cells a finished request left in its (free) slot: `tokens` at positions 0..."""

    tokens: Tokens


@dataclass(frozen=True, slots=True)
class Source:
    """A prefix reusable in the pool: `common` positions of `slot`'s cells."""

    slot: int
    common: int
    resident: bool


class Scheduler:
    def __init__(
        self,
        *,
        kv: KVCells,
        cache: PrefixCache,
        slots: int,
        n_ctx: int,
        batch_tokens: int,
        keep_cells: bool = True,
        resident_cells: int | None = None,
    ) -> None:
        self._kv = kv
        self._cache = cache
        self._n_ctx = n_ctx
        self._batch_tokens = batch_tokens
        self._keep_cells = keep_cells
        self._resident_cells = n_ctx if resident_cells is None else resident_cells
        self._free = list(range(slots - 1, -1, -1))
        self._cells = CellMap()
        self.residents: dict[int, Resident] = {}
        self.waiting: deque[Ticket] = deque()
        self.active: dict[int, Sequence] = {}
        self.reserved = 0
        self.reused_tokens = 0
        self.reused_in_place = 0  # of reused_tokens: shared or trimmed in the pool, not restored

    def idle(self) -> bool:
        return not self.active and not self.waiting

    def release(self, seq: Sequence, *, keep: bool = True) -> None:
        """Free a finished, failed or cancelled sequence's slot and reservation. Its cells
        stay in the slot as a resident (`keep`, and long enough to be reused); a failed step
        may have left them half-written, so a failure passes keep=False."""
        if self.active.pop(seq.slot, None) is None:
            return
        self._free.append(seq.slot)
        self.reserved -= seq.reserved
        # Positions past `length` may hold a draft token cut by an end token (never appended).
        kept = min(seq.computed, seq.length)
        if keep and self._keep_cells and kept >= self._cache.min_tokens:
            if kept < seq.computed:
                self._kv.forget(seq.slot, kept)
            self._cells.grow(seq.slot, seq.computed)
            self._cells.trim(seq.slot, kept)
            self.residents[seq.slot] = Resident(seq.tokens[:kept].copy())
        else:
            self._kv.forget(seq.slot)
            self._cells.drop(seq.slot)

    def reap(self) -> None:
        """Drop cancelled requests: waiting ones, and running ones (their computed cells stay
        as a resident, as a finished request's do)."""
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
            admitted.append(self._start(ticket, prompt, capacity=capacity, need=need))
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
        best = self._best_source(prompt, limit)
        now = best.common if best is not None else 0
        for seq in self._prefilling():
            later = min(common_prefix(seq.tokens[: seq.prompt_length], prompt), limit)
            if later - now >= self._cache.min_tokens and later > seq.computed:
                return True
        return False

    def _best_source(self, prompt: Tokens, limit: int) -> Source | None:
        """The longest prefix of `prompt` (up to `limit`) held in the pool: a running
        sequence's computed tokens or a resident's; a resident wins a tie (no sharing)."""
        best: Source | None = None
        for slot, resident in self.residents.items():
            common = min(common_prefix(resident.tokens, prompt), limit)
            if common > (best.common if best else 0):
                best = Source(slot, common, resident=True)
        for seq in self.active.values():
            common = min(common_prefix(seq.tokens[: seq.computed], prompt), limit)
            if common > (best.common if best else 0):
                best = Source(seq.slot, common, resident=False)
        return best

    def _start(self, ticket: Ticket, prompt: Tokens, *, capacity: int, need: int) -> Sequence:
        """Admit `ticket` into a slot, evicting every resident but the one it reuses (before
        a restored state or its prefill takes new cells), then start it from the longest prefix
        it can reuse."""
        for running in self.active.values():  # the map follows their prefill and decoding
            self._cells.grow(running.slot, running.computed)
        limit = len(prompt) - 1
        source = self._best_source(prompt, limit)
        match = self._cache.match(prompt, limit=limit)
        if source is not None and (
            source.common < self._cache.min_tokens or (match and match.common > source.common)
        ):
            source = None
        for resident in [s for s in self.residents if source is None or s != source.slot]:
            self._forget_resident(resident)
        slot = self._slot(source)
        seq = Sequence(ticket, slot=slot, capacity=capacity, reserved=need)
        self.active[slot] = seq
        self.reserved += need
        if source is not None:
            if source.slot == slot:  # the resident's own cells, trimmed in place
                self._kv.forget(slot, source.common)
                self._cells.trim(slot, source.common)
            else:
                self._kv.share(source.slot, slot, source.common)
                self._cells.copy(source.slot, slot, source.common)
            seq.computed = seq.cached = source.common
            self.reused_in_place += source.common
        elif match is not None:
            state = self._cache.state(match.key)
            if state is not None and self._kv.load(slot, state):
                self._kv.forget(slot, match.common)
                self._cells.grow(slot, match.common)
                seq.computed = seq.cached = match.common
            else:
                self._kv.forget(slot)
        self.reused_tokens += seq.cached
        self._evict()  # the resident it shared from may still hold a tail of its own
        return seq

    def _slot(self, source: Source | None) -> int:
        """A free slot for a new sequence (the only resident left is `source`'s, if any): an
        empty one, unless `source`'s resident is reused whole or is the only free slot."""
        empty = [slot for slot in self._free if slot not in self.residents]
        if source is not None and source.resident:
            whole = source.common == len(self.residents[source.slot].tokens)
            if whole or not empty:
                del self.residents[source.slot]
                self._free.remove(source.slot)
                return source.slot
        slot = empty[-1]
        self._free.remove(slot)
        return slot

    def _evict(self) -> None:
        """Evict residents (at most the one an admission reuses is left) until the running
        sequences' reservations and the cells that only residents hold fit in the pool, and
        those cells within `resident_cells` (every step attends over the pool up to its highest
        cell in use, so residents are not free)."""
        while self.residents:
            running = list(self.active)
            only_residents = self._cells.cells([*running, *self.residents])
            only_residents -= self._cells.cells(running)
            fits = self.reserved + only_residents <= self._n_ctx
            if fits and only_residents <= self._resident_cells:
                return
            self._forget_resident(next(iter(self.residents)))

    def _forget_resident(self, slot: int) -> None:
        del self.residents[slot]
        self._kv.forget(slot)
        self._cells.drop(slot)

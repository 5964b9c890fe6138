"""`Engine`: the one thread that owns the llama.cpp context and runs the step loop.

llama.cpp calls hold the CPU for milliseconds to seconds, so none of them may run on the event
loop. The engine thread sleeps on its inbox while there is nothing to do, and otherwise loops:
take new requests and cancellations, admit what fits, run one step for every running sequence,
sample (and score each token's logprob, for the requests that asked: logprobs.py), and hand each
sequence's new tokens to its sink. Nothing else touches the context.

A failure inside a step (llama.cpp refusing a batch, a bug) fails the sequences of that step
with an `UpstreamUnavailable` and clears their cells (a finished sequence's stay in its slot
for the next prompt sharing them: scheduler.py); the thread goes on serving the next
requests. Stopping fails whatever is still queued or running, then frees the model.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from levergate.errors import LevergateError, UpstreamUnavailable
from levergate.upstreams.local.logprobs import Scored, score
from levergate.upstreams.local.prefix_cache import PrefixCache
from levergate.upstreams.local.runtime import Entry, Runtime
from levergate.upstreams.local.scheduler import Scheduler, Work
from levergate.upstreams.local.sequence import Failed, Finished, Sequence, Ticket, Tokens
from levergate.upstreams.local.speculative import next_limit, verify

log = logging.getLogger("levergate.local")

_STOP = object()
Chooser = Callable[[int], int]


@dataclass(slots=True)
class EngineStats:
    """Counters since start, read by benchmarks and tests (ints: a torn read is harmless)."""

    steps: int = 0
    decoded_tokens: int = 0
    generated_tokens: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    cache_saves: int = 0


class Engine:
    def __init__(
        self,
        runtime: Runtime,
        *,
        cache: PrefixCache,
        name: str,
        keep_cells: bool = True,
        resident_cells: int | None = None,
    ) -> None:
        self.runtime = runtime
        self.cache = cache
        self.stats = EngineStats()
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.scheduler = Scheduler(
            kv=runtime,
            cache=cache,
            slots=runtime.slots,
            n_ctx=runtime.n_ctx,
            batch_tokens=runtime.batch_tokens,
            keep_cells=keep_cells,
            resident_cells=resident_cells,
        )
        self._thread = threading.Thread(target=self._run, name=f"levergate-{name}", daemon=True)
        self._thread.start()

    def submit(self, ticket: Ticket) -> None:
        ticket.wake = self._wake
        self._inbox.put(ticket)

    def stop(self) -> None:
        """Ask the thread to finish; blocks until it has (call it off the event loop)."""
        if self._thread.is_alive():
            self._inbox.put(_STOP)
            self._thread.join()

    def _wake(self) -> None:
        self._inbox.put(None)

    def _run(self) -> None:
        try:
            while self._pull():
                self._step()
        finally:
            stopped = UpstreamUnavailable("the local engine stopped", upstream="local")
            for seq in list(self.scheduler.active.values()):
                seq.ticket.sink(Failed(stopped))
            for ticket in self.scheduler.waiting:
                ticket.sink(Failed(stopped))
            self.runtime.close()

    def _pull(self) -> bool:
        """Move the inbox into the waiting queue, sleeping first when there is no work."""
        block = self.scheduler.idle()
        while True:
            try:
                message = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if message is _STOP:
                return False
            if isinstance(message, Ticket):
                self.scheduler.waiting.append(message)

    def _step(self) -> None:
        scheduler = self.scheduler
        scheduler.reap()
        scheduler.admit()
        works = scheduler.plan()
        if not works:
            return
        try:
            self._run_step(works)
        except Exception as exc:  # the thread's edge: fail this step's requests, keep serving
            log.exception("local engine step failed")
            self._fail([w.seq for w in works], UpstreamUnavailable(f"local engine error: {exc}"))

    def _run_step(self, works: list[Work]) -> None:
        entries: list[Entry] = []
        for work in works:
            slot, start, last = work.seq.slot, work.start, len(work.fed) - work.outputs
            entries.extend((token, start + i, slot, i >= last) for i, token in enumerate(work.fed))
        status = self.runtime.decode(entries)
        if status != 0:
            # 1: no free KV cells (reservations make this rare); fail the newest sequence
            # and let the others go on at the next step.
            victims = [works[-1].seq] if status == 1 else [w.seq for w in works]
            self._fail(victims, UpstreamUnavailable(f"llama_decode returned {status}"))
            return
        self.stats.steps += 1
        self.stats.decoded_tokens += len(entries)
        first = 0
        for work in works:
            self._advance(work, first)
            first += len(work.fed)

    def _advance(self, work: Work, first: int) -> None:
        seq = work.seq
        if work.outputs == 0:  # a prompt chunk that does not reach the prompt's end
            seq.computed += len(work.fed)
            return
        base = first + len(work.fed) - work.outputs
        scores: list[Scored] | None = None if seq.request.logprobs is None else []
        choose = self._chooser(seq, base, scores)
        if seq.pending is None:  # the prompt's last chunk: its last logits give token one
            seq.computed += len(work.fed)
            finished = self._emit(seq, [choose(0)], scores)
            # Saved once token one is on its way (a 1.7k-token state is ~40 MB to copy), and
            # before a sequence that ended at once gives its cells back.
            self._remember_prompt(seq)
            if finished:
                self.scheduler.release(seq)
            return
        tokens = verify(work.draft, choose)
        seq.computed = work.start + len(tokens)
        seq.drafted += len(work.draft)
        seq.accepted += len(tokens) - 1
        if seq.request.draft is not None:
            seq.draft_limit = next_limit(
                seq.draft_limit,
                proposed=len(work.draft),
                accepted=len(tokens) - 1,
                ceiling=seq.request.draft.tokens,
            )
        self.stats.drafted_tokens += len(work.draft)
        self.stats.accepted_tokens += len(tokens) - 1
        if len(tokens) - 1 < len(work.draft):
            self.runtime.forget(seq.slot, seq.computed)
        if self._emit(seq, tokens, scores):
            self.scheduler.release(seq)

    def _chooser(self, seq: Sequence, base: int, scores: list[Scored] | None) -> Chooser:
        """`choose(j)`: the token sampled from the step's logits row `base + j`. When the
        request asked for logprobs, each choice is also scored from the same row (a view that
        the next decode overwrites, so it is read now); otherwise nothing more is done."""
        logits, sampler = self.runtime.logits, seq.sampler
        if scores is None:
            return lambda j: sampler.choose(logits(base + j))
        top = seq.request.logprobs or 0

        def choose(j: int) -> int:
            row = logits(base + j)
            token = sampler.choose(row)
            scores.append(score(row, token, top=top))
            return token

        return choose

    def _emit(self, seq: Sequence, tokens: list[int], scores: list[Scored] | None) -> bool:
        """Hand the new tokens to the request, and finish it on an end token or max_tokens
        (True: it finished, and its slot is the caller's to release)."""
        ids: list[int] = []
        text = b""
        reason: str | None = None
        for token in tokens:
            if self.runtime.is_end(token):
                reason = "stop"
                break
            seq.append(token)
            seq.generated += 1
            ids.append(token)
            text += self.runtime.piece(token)
            if seq.generated >= seq.request.max_tokens:
                reason = "length"
                break
        self.stats.generated_tokens += len(ids)
        seq.pending = ids[-1] if ids else seq.pending
        if ids:
            scored = None if scores is None else tuple(scores[: len(ids)])
            seq.ticket.sink(Tokens(tuple(ids), text, seq.cached, scored))
        if reason is not None:
            seq.ticket.sink(
                Finished(
                    reason="stop" if reason == "stop" else "length",
                    prompt_tokens=seq.prompt_length,
                    completion_tokens=seq.generated,
                    cached_tokens=seq.cached,
                    drafted=seq.drafted,
                    accepted=seq.accepted,
                )
            )
        return reason is not None

    def _remember_prompt(self, seq: Sequence) -> None:
        """Save the prompt's KV state for later requests sharing its prefix, unless it adds
        fewer than `min_tokens` to the prefix it reused: that prefix is already saved (or
        resident in a running sequence), and re-saving the whole prompt to keep a short
        question copied ~23 KB per token of KV for every warm request."""
        prompt = seq.tokens[: seq.prompt_length]
        cache = self.cache
        if (
            cache.ram_bytes == 0
            or len(prompt) - seq.cached < cache.min_tokens
            or cache.covers(prompt)
        ):
            return
        cache.put(np.array(prompt, dtype=np.int32), self.runtime.save(seq.slot))
        self.stats.cache_saves += 1

    def _fail(self, seqs: list[Sequence], error: LevergateError) -> None:
        for seq in seqs:
            seq.ticket.sink(Failed(error))
            self.scheduler.release(seq, keep=False)

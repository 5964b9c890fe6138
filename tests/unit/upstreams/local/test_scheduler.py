"""Continuous batching without a model: admission (slots, reserved cells, arrival order),
prefix reuse (shared from a running sequence, restored from the cache), a shared prefix computed
once, and the per-step plan within the token budget."""

from __future__ import annotations

import numpy as np

from levergate.upstreams.local.prefix_cache import PrefixCache
from levergate.upstreams.local.sampling import SamplingParams
from levergate.upstreams.local.scheduler import Scheduler
from levergate.upstreams.local.sequence import Draft, Request, Ticket


class FakeKV:
    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def forget(self, seq: int, start: int = 0) -> None:
        self.calls.append(("forget", seq, start))

    def share(self, source: int, target: int, length: int) -> None:
        self.calls.append(("share", source, target, length))

    def load(self, seq: int, state: bytearray) -> bool:
        self.calls.append(("load", seq, state))
        return True


def ticket(prompt: list[int], max_tokens: int = 4, draft: Draft | None = None) -> Ticket:
    request = Request(tuple(prompt), max_tokens, SamplingParams(), draft)
    return Ticket(request, sink=lambda item: None)


def scheduler(
    *, slots: int = 4, n_ctx: int = 100, batch: int = 16, min_tokens: int = 3
) -> tuple[Scheduler, FakeKV, PrefixCache]:
    kv = FakeKV()
    cache = PrefixCache(ram_bytes=1000, min_tokens=min_tokens)
    return Scheduler(kv=kv, cache=cache, slots=slots, n_ctx=n_ctx, batch_tokens=batch), kv, cache


def test_admission_respects_slots_and_reserved_cells_in_arrival_order() -> None:
    sched, _, _ = scheduler(slots=2, n_ctx=30)
    big, small1, small2 = ticket([1] * 20, 5), ticket([2] * 3, 2), ticket([3] * 3, 2)
    sched.waiting.extend([big, small1, small2])
    admitted = sched.admit()
    # big reserves 26 cells; small1 needs 6 more than fit, and small2 may not overtake it.
    assert [s.ticket for s in admitted] == [big]
    assert list(sched.waiting) == [small1, small2]
    sched.release(admitted[0])
    assert [s.ticket for s in sched.admit()] == [small1, small2]
    assert sched.reserved == 12


def test_a_cancelled_request_leaves_and_frees_its_slot() -> None:
    sched, kv, _ = scheduler(slots=1)
    first, second = ticket([1, 2, 3]), ticket([4, 5, 6])
    sched.waiting.extend([first, second])
    (seq,) = sched.admit()
    first.cancel()
    sched.reap()
    assert ("forget", seq.slot, 0) in kv.calls
    assert [s.ticket for s in sched.admit()] == [second]


def test_the_plan_decodes_first_then_fills_the_budget_with_prompt_chunks() -> None:
    sched, _, _ = scheduler(batch=10)
    sched.waiting.extend([ticket(list(range(8))), ticket(list(range(50, 62)))])
    one, two = sched.admit()
    works = sched.plan()
    assert [(w.seq, len(w.fed), w.outputs) for w in works] == [(one, 8, 1), (two, 2, 0)]
    one.computed, one.pending = 8, 99
    two.computed = 2
    works = sched.plan()
    assert [(w.seq, w.fed[:1], w.outputs) for w in works] == [(one, [99], 1), (two, [52], 0)]
    assert sum(len(w.fed) for w in works) == 10


def test_a_running_prefix_is_shared_and_one_still_being_computed_is_awaited() -> None:
    sched, kv, _ = scheduler(batch=8)
    shared = list(range(10, 30))
    sched.waiting.append(ticket([*shared, 1, 2]))
    (first,) = sched.admit()
    first.computed = 8  # mid-prefill: 8 of the 20 shared tokens exist
    sched.waiting.append(ticket([*shared, 3, 4]))
    assert sched.admit() == []  # waits rather than computing the shared part again
    first.computed = 22
    first.pending = 5
    (second,) = sched.admit()
    assert ("share", first.slot, second.slot, 20) in kv.calls
    assert second.computed == second.cached == 20


def test_a_cached_prefix_is_restored_and_trimmed_to_the_common_part() -> None:
    sched, kv, cache = scheduler()
    cache.put(np.asarray([1, 2, 3, 4, 5, 6], dtype=np.int32), bytearray(b"state"))
    sched.waiting.append(ticket([1, 2, 3, 4, 9, 9]))
    (seq,) = sched.admit()
    assert kv.calls[-2:] == [("load", seq.slot, bytearray(b"state")), ("forget", seq.slot, 4)]
    assert seq.computed == seq.cached == 4
    assert sched.reused_tokens == 4


def test_a_whole_prompt_is_never_reused_so_its_last_logits_are_computed() -> None:
    sched, _, cache = scheduler()
    cache.put(np.asarray([1, 2, 3, 4], dtype=np.int32), bytearray(b"s"))
    sched.waiting.append(ticket([1, 2, 3, 4]))
    (seq,) = sched.admit()
    assert seq.computed == 3
    (work,) = sched.plan()
    assert work.fed == [4]
    assert work.outputs == 1


def test_drafts_fit_in_the_budget_and_the_remaining_max_tokens() -> None:
    sched, _, _ = scheduler(batch=4)
    draft = Draft(ngram_min=1, ngram_max=2, tokens=8)
    sched.waiting.append(ticket([1, 2, 3, 4, 5, 1, 2], max_tokens=10, draft=draft))
    (seq,) = sched.admit()
    seq.computed, seq.pending = 7, 3
    seq.append(3)  # history: 1 2 3 4 5 1 2 3 -> the trigram "1 2 3" recurs, then 4 5 1 ...
    (work,) = sched.plan()
    assert work.fed == [3, 4, 5, 1]
    assert work.draft == [4, 5, 1]
    assert work.outputs == 4

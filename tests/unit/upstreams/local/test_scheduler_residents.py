"""In-place prefix reuse (issue 29): a finished request's cells stay in its slot, and a later
prompt sharing them starts from them with no copy, within the pool's spare cells. The KV pool
here is the cell-by-cell model (pool.py), so each check reads which tokens' cells a sequence
really holds: a reused prefix must be exactly the prompt's own tokens, and the pool must never
be asked for more cells than it has."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.upstreams.local.prefix_cache import PrefixCache
from levergate.upstreams.local.sampling import SamplingParams
from levergate.upstreams.local.scheduler import Scheduler
from levergate.upstreams.local.sequence import Request, Sequence, Ticket
from tests.unit.upstreams.local.pool import Pool

SHARED = list(range(100, 120))  # a 20-token "system prompt"
PREFIXES = [SHARED, list(range(200, 230)), [*SHARED[:8], *range(300, 312)]]


def ticket(prompt: list[int], max_tokens: int = 3) -> Ticket:
    return Ticket(Request(tuple(prompt), max_tokens, SamplingParams()), sink=lambda item: None)


def setup(
    *, slots: int = 3, n_ctx: int = 200, keep: bool = True, ram: int = 0, budget: int | None = None
) -> tuple[Scheduler, Pool, PrefixCache]:
    pool = Pool(n_ctx)
    cache = PrefixCache(ram_bytes=ram, min_tokens=4)
    sched = Scheduler(kv=pool, cache=cache, slots=slots, n_ctx=n_ctx, batch_tokens=64,
                      keep_cells=keep, resident_cells=budget)  # fmt: skip
    return sched, pool, cache


def step(sched: Scheduler, pool: Pool, cache: PrefixCache) -> list[Sequence]:
    """What the engine does with each running sequence in one step, on the model pool: the
    rest of its prompt, or one decoded token; its prompt's state saved after token one, and
    the sequence released at max_tokens."""
    for seq in list(sched.active.values()):
        if seq.pending is None:
            prompt = seq.tokens[: seq.prompt_length]
            pool.compute(seq.slot, seq.computed, prompt[seq.computed :].tolist())
            seq.computed = seq.prompt_length
            if cache.ram_bytes and seq.prompt_length - seq.cached >= cache.min_tokens:
                cache.put(prompt, pool.save(seq.slot))
        else:
            pool.compute(seq.slot, seq.computed, [seq.pending])
            seq.computed += 1
        seq.pending = 900 + seq.slot * 10 + seq.generated
        seq.append(seq.pending)
        seq.generated += 1
        if seq.generated >= seq.request.max_tokens:
            sched.release(seq)
    sched.reap()
    return sched.admit()


def check(sched: Scheduler, pool: Pool, n_ctx: int) -> None:
    """Every sequence holds the cells of exactly its own tokens; slots that hold nothing are
    empty in the pool; the running sequences' reservations and the residents' cells fit."""
    for slot, seq in sched.active.items():
        assert pool.held(slot) == seq.tokens[: seq.computed].tolist()
    for slot, resident in sched.residents.items():
        assert pool.held(slot) == resident.tokens.tolist()
    for slot in range(3):
        if slot not in sched.active and slot not in sched.residents:
            assert pool.length(slot) == 0
    only_residents = pool.occupied() - pool.occupied(sched.active)
    assert sched.reserved + only_residents <= n_ctx


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.integers(0, 2),
            st.lists(st.integers(0, 3), max_size=4),
            st.integers(1, 6),
        ),
        st.tuples(st.just("step")),
        st.tuples(st.sampled_from(["finish", "fail", "cancel"]), st.integers(0, 2)),
    ),
    max_size=40,
)


@settings(max_examples=150)
@given(operations, st.sampled_from([60, 90, 200]), st.booleans())
def test_reused_cells_are_the_prompts_own_and_the_pool_never_overflows(
    ops: list[tuple[object, ...]], n_ctx: int, saved_states: bool
) -> None:
    sched, pool, cache = setup(n_ctx=n_ctx, ram=10_000 if saved_states else 0)
    for operation in ops:
        match operation:
            case ("submit", int(prefix), list(suffix), int(max_tokens)):
                sched.waiting.append(ticket([*PREFIXES[prefix], *(500 + t for t in suffix)],
                                            max_tokens))  # fmt: skip
            case ("step",):
                admitted = step(sched, pool, cache)
                for seq in admitted:
                    assert seq.computed == seq.cached
                    prompt = list(seq.request.prompt)
                    assert pool.held(seq.slot) == prompt[: seq.cached]
                if admitted:  # a resident outlives an admission only as the prefix it shares
                    for slot in sched.residents:
                        assert any(pool.shared(slot, seq.slot) for seq in admitted)
            case (str(how), int(index)) if sched.active:
                seq = list(sched.active.values())[index % len(sched.active)]
                if how == "cancel":
                    seq.ticket.cancel()
                else:
                    sched.release(seq, keep=how == "finish")
        check(sched, pool, n_ctx)
        assert pool.occupied() <= n_ctx


def test_a_finished_request_leaves_its_cells_for_the_next_sharing_its_prefix() -> None:
    sched, pool, cache = setup(slots=1)
    sched.waiting.append(ticket([*SHARED, 1, 2], max_tokens=2))
    step(sched, pool, cache)
    while sched.active:
        step(sched, pool, cache)
    (slot,) = sched.residents
    sched.waiting.append(ticket([*SHARED, 3, 4]))
    (seq,) = sched.admit()
    assert seq.slot == slot  # the one slot, trimmed in place: no copy, no restore
    assert seq.cached == len(SHARED)
    assert pool.held(slot) == SHARED
    assert sched.reused_in_place == len(SHARED)


def test_with_an_empty_slot_a_resident_is_shared_and_keeps_its_own_tail() -> None:
    sched, pool, cache = setup(slots=2)
    first = [*SHARED, 1, 2]
    sched.waiting.append(ticket(first, max_tokens=2))
    step(sched, pool, cache)
    while sched.active:
        step(sched, pool, cache)
    (slot,) = sched.residents
    history = pool.held(slot)
    sched.waiting.append(ticket([*SHARED, 3, 4]))
    (other,) = sched.admit()
    assert other.slot != slot
    assert other.cached == len(SHARED)
    assert pool.held(slot) == history  # the first conversation's follow-up still has it all
    assert pool.occupied() == len(history)  # the shared prefix is in the pool once
    sched.waiting.append(ticket([*history, 7]))
    step(sched, pool, cache)
    follow_up = sched.active[slot]
    assert follow_up.cached == len(history)


def test_a_cold_admission_evicts_the_residents_and_the_saved_state_is_the_fallback() -> None:
    sched, pool, cache = setup(ram=10_000)
    for prefix in PREFIXES[:2]:  # two at once: both finish before the next admission
        sched.waiting.append(ticket([*prefix, 1], max_tokens=1))
    step(sched, pool, cache)
    step(sched, pool, cache)
    assert len(sched.residents) == 2
    sched.waiting.append(ticket([*range(600, 640)], max_tokens=3))
    (cold,) = sched.admit()
    assert not sched.residents  # before its prefill takes new cells: llama-server's clear
    assert pool.occupied() == 0
    step(sched, pool, cache)
    assert pool.held(cold.slot)[:40] == list(range(600, 640))
    while sched.active:
        step(sched, pool, cache)
    sched.waiting.append(ticket([*SHARED, 9]))
    (seq,) = step(sched, pool, cache)
    assert seq.cached == len(SHARED)  # restored from its saved state
    assert pool.held(seq.slot) == SHARED
    assert sched.reused_in_place == 0


def test_without_in_place_reuse_a_finished_request_gives_its_cells_back() -> None:
    sched, pool, cache = setup(keep=False)
    sched.waiting.append(ticket([*SHARED, 1], max_tokens=1))
    step(sched, pool, cache)
    step(sched, pool, cache)
    assert not sched.active
    assert not sched.residents
    assert pool.occupied() == 0


@pytest.mark.parametrize(("budget", "kept"), [(40, True), (5, False)])
def test_the_resident_shared_from_keeps_its_tail_within_the_cell_budget(
    budget: int, kept: bool
) -> None:
    sched, pool, cache = setup(budget=budget)
    sched.waiting.append(ticket([*SHARED, 1], max_tokens=6))
    while sched.waiting or sched.active:
        step(sched, pool, cache)
    (slot,) = sched.residents
    tail = pool.length(slot) - len(SHARED)  # its question and answer
    sched.waiting.append(ticket([*SHARED, 3, 4]))
    (seq,) = sched.admit()
    assert seq.cached == len(SHARED)
    assert seq.slot != slot
    assert (slot in sched.residents) is kept
    assert pool.occupied() == len(SHARED) + (tail if kept else 0)

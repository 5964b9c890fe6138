"""Where a prompt's cells land when finished requests left theirs in the pool (issue 29 §1).

llama.cpp attends over the KV pool up to its highest cell in use, and gives a batch the first
free cells from a moving head (pool.py models both), so cells kept for residents could push
a cold prompt's cells above theirs and make its whole prefill attend over both: 1.19x
llama-server's cold time to first token, measured. The invariant checked here on the modelled
pool: a prompt that reuses nothing in the pool (computed from scratch, or restored from a
saved state) attends over no more cells than it would with no resident at all, while a warm
prompt still finds its prefix in place."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.upstreams.local.prefix_cache import PrefixCache
from levergate.upstreams.local.scheduler import Scheduler
from levergate.upstreams.local.sequence import Sequence
from tests.unit.upstreams.local.pool import Pool
from tests.unit.upstreams.local.test_scheduler_residents import PREFIXES, step, ticket

N_CTX = 1024


def setup(*, keep: bool, ram: int = 1 << 20) -> tuple[Scheduler, Pool, PrefixCache]:
    pool = Pool(N_CTX, ubatch=32)
    cache = PrefixCache(ram_bytes=ram, min_tokens=4)
    sched = Scheduler(kv=pool, cache=cache, slots=4, n_ctx=N_CTX, batch_tokens=64,
                      keep_cells=keep)  # fmt: skip
    return sched, pool, cache


def alone(
    sched: Scheduler, pool: Pool, cache: PrefixCache, prompt: list[int], max_tokens: int
) -> tuple[Sequence, int, bool]:
    """Run one request to its end with nothing else running: the sequence, one past the
    highest cell in use once its prompt is computed, and whether it reused cells in place."""
    before = sched.reused_in_place
    sched.waiting.append(ticket(prompt, max_tokens))
    (seq,) = sched.admit()
    in_place = sched.reused_in_place > before
    step(sched, pool, cache)
    high = pool.used_max_p1()
    while sched.active:
        step(sched, pool, cache)
    return seq, high, in_place


def test_a_cold_prompt_after_warm_rounds_lands_where_it_would_without_residents() -> None:
    """The benchmark's pattern: a new 150-token system prompt, then another question after
    it, round after round."""
    cold_highs: dict[bool, list[int]] = {}
    for keep in (True, False):
        sched, pool, cache = setup(keep=keep)
        cold_highs[keep] = []
        for index in range(4):
            system = list(range(1000 + 200 * index, 1150 + 200 * index))
            cold, high, _ = alone(sched, pool, cache, [*system, 1, 2], max_tokens=4)
            assert cold.cached == 0
            cold_highs[keep].append(high)
            warm, _, in_place = alone(sched, pool, cache, [*system, 3, 4], max_tokens=4)
            assert warm.cached == len(system)
            assert in_place is keep  # in place when kept, else restored from its saved state
    assert cold_highs[True] == cold_highs[False] == [152] * 4


requests = st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.integers(0, 3), max_size=4), st.integers(1, 6)),
    max_size=12,
)


@settings(max_examples=100)
@given(requests, st.booleans())
def test_one_at_a_time_a_prompt_reusing_nothing_in_the_pool_takes_its_lowest_cells(
    reqs: list[tuple[int, list[int], int]], saved_states: bool
) -> None:
    """With no resident, nothing running and a head at the bottom, a prompt's cells are the
    pool's first ones; with residents evicted on its admission, they must be too."""
    sched, pool, cache = setup(keep=True, ram=1 << 20 if saved_states else 0)
    for prefix, suffix, max_tokens in reqs:
        prompt = [*PREFIXES[prefix], *(500 + t for t in suffix)]
        seq, high, in_place = alone(sched, pool, cache, prompt, max_tokens)
        assert pool.held(seq.slot)[: len(prompt)] == prompt
        if not in_place:
            assert high == len(prompt)

"""The replay's provider prompt caches: bounded as the simulator's, OpenAI's routing by prefix and
`prompt_cache_key`, and Anthropic's breakpoints as the gateway's placer puts them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.analyze.analysis import analyse
from levergate.analyze.fit import ASSUMED
from levergate.analyze.inputs import Input, Req, Skipped, body_req
from levergate.analyze.provider_cache import Bounded, OpenAICache
from levergate.analyze.replay import Timing, replay
from levergate.policies.pricing import Tokens, cost
from levergate.simulator.settings import PromptCacheSettings
from tests.unit.analyze.reqs import plan, req

TIMING = Timing({}, ASSUMED, 0.002)
ROUTED = PromptCacheSettings(machines=64)


@given(
    st.integers(1, 50),
    st.lists(st.tuples(st.lists(st.integers(0, 60), max_size=12, unique=True),
                       st.floats(0, 1000)), max_size=100),
)  # fmt: skip
def test_the_bounded_cache_never_exceeds_its_bound_and_keeps_the_newest(
    capacity: int, puts: list[tuple[list[int], float]]
) -> None:
    lru = Bounded(capacity)
    for keys, expiry in puts:
        lru.read_and_store(keys, expiry - 2.0, expiry)
        assert len(lru) <= capacity
        kept = keys[-capacity:]  # the newest are the last evicted
        assert all(lru.live(k, expiry - 1.0) for k in kept)
        if kept:  # read back at once: the longest of them
            assert lru.read_and_store(keys, expiry - 1.0, expiry) == len(keys)


def _chain(prefix: int, depth: int) -> tuple[int, ...]:
    return tuple(prefix * 1000 + n for n in range(depth))


def test_an_evicting_cache_still_reads_the_longest_prefix_it_holds() -> None:
    cache = OpenAICache(PromptCacheSettings(max_entries=6, increment=256))
    long = req(blocks=_chain(1, 6), block_tokens=256.0, prompt=1536)
    assert cache.cached("a", long, key=None, now=0.0) == 0
    other = req(blocks=_chain(2, 2), block_tokens=256.0, prompt=512)
    cache.cached("a", other, key=None, now=1.0)  # too short to cache: stored nothing
    assert cache.lru is not None
    assert len(cache.lru) == 6
    third = req(blocks=_chain(3, 5), block_tokens=256.0, prompt=1280)
    cache.cached("a", third, key=None, now=2.0)
    assert cache.lru.evicted == 5
    assert len(cache.lru) == 6
    # the first prompt's shortest prefixes went first; its longest is still read, as the
    # simulator reads the longest prefix it holds (a leading-run search would find none)
    assert cache.cached("a", long, key=None, now=3.0) == 1280


def _openai(tenant: str, at: float, prefix: int, depth: int = 8) -> Req:
    return req(arrival=at, tenant=tenant, blocks=_chain(prefix, depth), block_tokens=256.0,
               prompt=depth * 256 + 50, fp=None)  # fmt: skip


MODELS = {"upstreams": [{"name": "sim", "base_url": "http://127.0.0.1:9/v1"}],
          "models": [{"name": "gpt-4o-mini", "upstream": "sim"}]}  # fmt: skip
KEYED = {"prompt_cache": {"openai_cache_key": "on"}, **MODELS}
UNKEYED = {"prompt_cache": {"openai_cache_key": "off"}, **MODELS}


def test_the_gateways_key_keeps_a_hot_shared_prefix_on_one_machine_per_tenant() -> None:
    # 40 tenants share one system prompt, 4 requests a minute each: 160 a minute in all, far
    # past the ~15 one machine takes; with a key per tenant, each pair stays on its machine.
    reqs = [_openai(f"t{n % 40}", n * 60.0 / 160, prefix=7) for n in range(640)]
    off = replay(plan(**UNKEYED), reqs, TIMING, provider=ROUTED)
    on = replay(plan(**KEYED), reqs, TIMING, provider=ROUTED)
    assert on.cached_tokens > off.cached_tokens
    assert on.cost_usd < off.cost_usd
    one = PromptCacheSettings()  # one machine: nothing changes
    assert replay(plan(**KEYED), reqs, TIMING, provider=one).cost_usd == pytest.approx(
        replay(plan(**UNKEYED), reqs, TIMING, provider=one).cost_usd
    )


def test_a_clients_own_key_is_kept_and_counts_in_the_baseline() -> None:
    reqs = [_openai("t", n * 10.0, prefix=1)._replace(pck=f"k{n}") for n in range(6)]
    keyed = replay(plan(**KEYED), reqs, TIMING, provider=ROUTED)
    assert (
        keyed.cost_usd == replay(plan(**UNKEYED), reqs, TIMING, provider=ROUTED).cost_usd
    )  # both the client's
    same = [r._replace(pck="k") for r in reqs]
    assert (
        replay(plan(**UNKEYED), same, TIMING, provider=ROUTED).cached_tokens > keyed.cached_tokens
    )


requests = st.lists(
    st.tuples(st.sampled_from("abcd"), st.integers(0, 2), st.integers(4, 10),
              st.floats(0, 3000)),
    min_size=1, max_size=40,
)  # fmt: skip


@settings(max_examples=60)
@given(requests, st.integers(2, 16))
def test_a_key_that_only_merges_identical_prefixes_never_costs_more(
    given_reqs: list[tuple[str, int, int, float]], machines: int
) -> None:
    """Without overflow, sending every tenant's copy of a prefix to one machine (no key) never
    costs more than splitting it by tenant (the gateway's key): the merged machine's cache has
    seen everything each split one has."""
    provider = PromptCacheSettings(machines=machines, overflow_per_minute=100_000)
    reqs = sorted((_openai(t, at, prefix=p, depth=d) for t, p, d, at in given_reqs),
                  key=lambda r: r.arrival)  # fmt: skip
    merged = replay(plan(**UNKEYED), reqs, TIMING, provider=provider)
    split = replay(plan(**KEYED), reqs, TIMING, provider=provider)
    assert merged.cost_usd <= split.cost_usd + 1e-12
    assert merged.cached_tokens >= split.cached_tokens


# ---- Anthropic: the gateway's automatic breakpoints --------------------------------------------

CLAUDE = "claude-sonnet-4-5"


def anthropic(**prompt_cache: Any) -> dict[str, Any]:
    return {
        "upstreams": [{"name": "ant", "kind": "anthropic", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": CLAUDE, "upstream": "ant"}],
        "prompt_cache": prompt_cache,
    }


SYSTEM = "You are a careful assistant for the billing team. " * 200  # ~2,600 tokens


def _turn(n: int, at: float) -> Req:
    body = {"model": CLAUDE, "max_tokens": 50, "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Question number {n}: what is due this month?"}]}  # fmt: skip
    found = body_req(n, {"body": body, "timestamp": at}, interval=1.0)
    assert isinstance(found, Req)
    return found


def test_breakpoints_write_the_shared_system_prompt_once_then_read_it() -> None:
    reqs = [_turn(n, 10.0 * n) for n in range(6)]
    assert all(r.bp and r.bp[0][0] == "system" for r in reqs)
    on = replay(plan(**anthropic()), reqs, TIMING)
    off = replay(plan(**anthropic(breakpoints={"enabled": False})), reqs, TIMING)
    assert (off.cached_tokens, off.written_tokens) == (0, 0)
    # the first sighting is no evidence; the second writes (5 minutes pays); the rest read
    system = on.written_tokens
    assert 2000 < system < reqs[0].prompt
    assert on.cached_tokens == 4 * system
    assert on.written_1h_tokens == 0
    rates = plan(**anthropic()).catalog.rates(CLAUDE)
    assert rates.cache_write == pytest.approx(1.25 * rates.input)
    expected = (
        sum(cost(Tokens(r.prompt, 0, 0, r.output), rates) for r in reqs)
        + (
            system * (rates.cache_write - rates.input)
            - 4 * system * (rates.input - rates.cache_read)
        )
        / 1e6
    )
    assert on.cost_usd == pytest.approx(expected)
    assert on.cost_usd < off.cost_usd


def test_one_hour_breakpoints_are_priced_at_the_one_hour_write() -> None:
    reqs = [_turn(n, 600.0 * n) for n in range(5)]  # 10 minutes apart: only 1 hour keeps it
    on = replay(plan(**anthropic(breakpoints={"ttl": "1h"})), reqs, TIMING)
    # a fixed TTL places both boundaries from the first request: the system prompt written
    # once, read by the four after it; each question's own tail written every time
    assert on.written_1h_tokens == on.written_tokens > 0
    system = on.cached_tokens // 4
    assert on.cached_tokens == 4 * system
    assert 2400 < system < reqs[0].prompt
    assert on.written_tokens < system + 5 * 100
    five = replay(plan(**anthropic(breakpoints={"ttl": "5m"})), reqs, TIMING)
    assert five.cached_tokens == 0  # expired between every two requests


def test_the_analysis_says_what_breakpoints_could_not_see() -> None:
    reqs = [_turn(n, 10.0 * n) for n in range(6)]
    on, off = plan(**anthropic()), plan(**anthropic(breakpoints={"enabled": False}))
    given = Input(reqs, "turns", timings=False, skipped=Skipped())
    (row,) = analyse(given, baseline=off, candidate=on)["levers"]
    assert row["evaluable"]
    assert row["change_usd"] < 0
    assert "client's own cache_control" in row["note"]
    bare = Input([r._replace(bp=()) for r in reqs], "old log", timings=False, skipped=Skipped())
    (row,) = analyse(bare, baseline=off, candidate=on)["levers"]
    assert not row["evaluable"]
    assert "no breakpoint boundaries" in row["reason"]

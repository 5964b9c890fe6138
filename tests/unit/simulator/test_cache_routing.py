"""OpenAI's prompt-cache routing, emulated: a prefix-and-key pair has one machine until it comes
faster than `overflow_per_minute`; then some of its requests overflow to other machines."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from levergate.simulator.cache_routing import CacheRouter, pair_of
from levergate.simulator.settings import PromptCacheSettings
from levergate.testing import ManualClock
from tests.unit.simulator.test_simulator import make, post

ROUTED = PromptCacheSettings(machines=64, overflow_per_minute=3)


def test_one_machine_leaves_the_scope_alone() -> None:
    router = CacheRouter(settings=PromptCacheSettings())
    assert router.scope(scope="k\x00m", text="a" * 5000, key="x", now=0.0) == "k\x00m"


def test_a_pair_keeps_its_machine_until_it_overflows_then_returns_after_a_minute() -> None:
    router = CacheRouter(settings=ROUTED)
    pair = pair_of("k\x00\x00prefix")
    first = router.route(pair, 0.0)
    assert [router.route(pair, 1.0), router.route(pair, 2.0)] == [first, first]
    spilled = {router.route(pair, 3.0 + n / 10) for n in range(20)}
    assert router.overflowed == 20
    assert spilled == {(first + 1 + k) % 64 for k in range(20)}  # round the others in turn
    assert router.route(pair, 61.0) == first  # the window moved on


def test_the_key_and_the_prefix_both_choose_the_machine() -> None:
    router = CacheRouter(settings=ROUTED)
    machines = {router.scope(scope="k", text="a" * 4096, key=f"key{n}", now=0.0) for n in range(20)}
    assert len(machines) > 1
    # only the first route_tokens (256 x 4 characters) count
    same = {router.scope(scope="k", text="b" * 1024 + tail, key=None, now=0.0)
            for tail in ("x" * 3000, "y" * 3000)}  # fmt: skip
    assert len(same) == 1


@given(st.lists(st.tuples(st.integers(0, 40), st.floats(0, 300)), max_size=200))
def test_pairs_stay_bounded(arrivals: list[tuple[int, float]]) -> None:
    router = CacheRouter(settings=PromptCacheSettings(machines=8, max_entries=10,
                                                      overflow_per_minute=2))  # fmt: skip
    for n, at in sorted(arrivals, key=lambda a: a[1]):
        assert 0 <= router.route(pair_of(str(n)), at) < 8
        assert len(router) <= 10


def _long_chat(sim: Any, key: str | None) -> int:
    body: dict[str, Any] = {"model": "m", "max_tokens": 2,
                            "messages": [{"role": "user", "content": "word " * 1500}]}  # fmt: skip
    if key is not None:
        body["prompt_cache_key"] = key
    reply = post(sim, "/v1/chat/completions", body)
    cached: int = orjson.loads(reply.body)["usage"]["prompt_tokens_details"]["cached_tokens"]
    return cached


def test_through_the_simulator_a_key_moves_a_prompt_to_another_machines_cache() -> None:
    sim = make(ManualClock(), prompt_cache={"machines": 64})
    assert _long_chat(sim, None) == 0
    assert _long_chat(sim, None) > 0  # the same pair: the same machine
    misses = [_long_chat(sim, f"user-{n}") for n in range(8)]
    assert misses.count(0) >= 6  # other pairs: other machines (64 of them), mostly cold
    assert _long_chat(sim, "user-0") > 0
    one = make(ManualClock())  # one machine: the key changes nothing
    assert [_long_chat(one, k) for k in (None, "a", "b")][1:] == [_long_chat(one, "c")] * 2

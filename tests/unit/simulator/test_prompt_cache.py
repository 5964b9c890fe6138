"""Provider prompt-cache emulation: exact prefixes >= 1024 tokens, 128-token steps, TTL, LRU."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from levergate.simulator.prompt_cache import PromptCache, prefix_digests
from levergate.simulator.settings import PromptCacheSettings
from tests.unit.simulator.test_simulator import chat, make

SETTINGS = PromptCacheSettings()


def text_of(tokens: int, *, fill: str = "a") -> str:
    return fill * (4 * tokens)


def test_short_prompts_are_never_cached() -> None:
    cache = PromptCache(settings=SETTINGS)
    assert cache.lookup_and_store(scope="k", text=text_of(1023), now=0) == 0
    assert cache.lookup_and_store(scope="k", text=text_of(1023), now=1) == 0
    assert len(cache) == 0


def test_a_repeated_prompt_hits_in_128_token_steps() -> None:
    cache = PromptCache(settings=SETTINGS)
    prompt = text_of(1500)
    assert cache.lookup_and_store(scope="k", text=prompt, now=0) == 0
    assert cache.lookup_and_store(scope="k", text=prompt, now=1) == 1408  # 1024 + 3 * 128
    assert cache.stats.hits == 1


def test_a_shared_prefix_hits_up_to_the_last_common_boundary() -> None:
    cache = PromptCache(settings=SETTINGS)
    shared = text_of(1200)
    cache.lookup_and_store(scope="k", text=shared + text_of(800, fill="b"), now=0)
    assert cache.lookup_and_store(scope="k", text=shared + text_of(800, fill="c"), now=1) == 1152


def test_a_change_before_the_first_boundary_misses() -> None:
    cache = PromptCache(settings=SETTINGS)
    cache.lookup_and_store(scope="k", text=text_of(2000), now=0)
    assert cache.lookup_and_store(scope="k", text="X" + text_of(2000)[1:], now=1) == 0


def test_scopes_do_not_share_entries() -> None:
    cache = PromptCache(settings=SETTINGS)
    cache.lookup_and_store(scope="key-a\x00m", text=text_of(1100), now=0)
    assert cache.lookup_and_store(scope="key-b\x00m", text=text_of(1100), now=1) == 0


def test_entries_expire_after_the_ttl_and_a_hit_refreshes_them() -> None:
    cache = PromptCache(settings=PromptCacheSettings(ttl_seconds=10))
    prompt = text_of(1024)
    cache.lookup_and_store(scope="k", text=prompt, now=0)
    assert cache.lookup_and_store(scope="k", text=prompt, now=9) == 1024
    assert cache.lookup_and_store(scope="k", text=prompt, now=18) == 1024
    assert cache.lookup_and_store(scope="k", text=prompt, now=29) == 0


def test_the_lru_stays_bounded() -> None:
    cache = PromptCache(settings=PromptCacheSettings(max_entries=5))
    for index in range(10):
        cache.lookup_and_store(scope=str(index), text=text_of(1024), now=0)
    assert len(cache) == 5
    assert cache.lookup_and_store(scope="0", text=text_of(1024), now=1) == 0
    assert cache.lookup_and_store(scope="9", text=text_of(1024), now=1) == 1024


def test_disabled_cache_reports_nothing() -> None:
    cache = PromptCache(settings=PromptCacheSettings(enabled=False))
    cache.lookup_and_store(scope="k", text=text_of(2000), now=0)
    assert cache.lookup_and_store(scope="k", text=text_of(2000), now=1) == 0


@given(
    extra=st.text(alphabet="ab", max_size=1000),
    tail=st.text(alphabet="abc", max_size=2000),
    other=st.text(alphabet="abc", max_size=2000),
)
def test_cached_tokens_are_a_boundary_within_the_shared_prefix(
    extra: str, tail: str, other: str
) -> None:
    cache = PromptCache(settings=SETTINGS)
    head = text_of(1024) + extra
    first, second = head + tail, head + other
    cache.lookup_and_store(scope="k", text=first, now=0)
    cached = cache.lookup_and_store(scope="k", text=second, now=1)
    shared_chars = len(head) + len(_common_prefix(tail, other))
    assert cached >= SETTINGS.min_tokens
    assert (cached - SETTINGS.min_tokens) % SETTINGS.increment == 0
    assert cached * 4 <= min(shared_chars, len(second))
    # ... and it is the largest such boundary: the next one would cross the divergence.
    assert (cached + SETTINGS.increment) * 4 > shared_chars or (
        cached + SETTINGS.increment
    ) * 4 > len(second)


def _common_prefix(a: str, b: str) -> str:
    size = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        size += 1
    return a[:size]


def test_digests_cover_every_whole_token_boundary() -> None:
    assert len(prefix_digests(scope="k", text=text_of(1024 + 3 * 128 + 5), settings=SETTINGS)) == 4
    assert prefix_digests(scope="k", text=text_of(1023) + "abc", settings=SETTINGS) == []


def test_prompt_cache_key_is_accepted_counted_and_type_checked() -> None:
    sim = make()
    for key in ("lg-a", "lg-a", "lg-b"):
        assert chat(sim, prompt_cache_key=key).status == 200
    assert sim.snapshot()["prompt_cache_keys"] == {"requests": 3, "distinct": 2}
    refused = chat(sim, prompt_cache_key=7)
    assert refused.status == 400
    assert orjson.loads(refused.body)["error"]["param"] == "prompt_cache_key"

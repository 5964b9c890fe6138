"""SemanticCache over a scripted upstream and a bag-of-words embedder."""

from __future__ import annotations

import hashlib
import math
import re

import pytest

from levergate.config import CacheRuleSettings, CacheSettings, SemanticCacheSettings
from levergate.core.call import CacheOutcome, CacheResult, Call
from levergate.core.reply import Completed
from levergate.layers.cache.entries import CACHE_HEADER, CacheView, Entries
from levergate.layers.cache.semantic import SIMILARITY_HEADER, SemanticCache
from levergate.layers.cache.stats import CacheStats
from levergate.stores.kv_memory import MemoryKV
from levergate.stores.vector import PartitionedIndex
from levergate.testing import FakeUpstream, ManualClock, sample_value
from tests.unit.layers.cache.helpers import Routed, chat, drain

ON = CacheSettings(
    default=CacheRuleSettings(semantic=True), semantic=SemanticCacheSettings(threshold=0.8)
)
_SYNONYMS = {"whats": "what", "is": "", "the": "", "of": "", "a": ""}


class BagOfWords:
    """Cosine of word counts, after dropping a few function words: paraphrases that reuse the
    same content words score 1.0, which is what lets the guards be tested in isolation."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.fail:
            raise RuntimeError("embedder down")
        return [self._one(t) for t in texts]

    @staticmethod
    def _one(text: str) -> list[float]:
        vector = [0.0] * 64
        for raw in re.findall(r"[a-z0-9]+", text.lower().replace("'", "")):
            word = _SYNONYMS.get(raw, raw)
            if word:
                vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0  # noqa: S324
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]


def semantic(
    upstream: FakeUpstream, *, settings: CacheSettings = ON, max_entries: int = 100
) -> tuple[SemanticCache, CacheStats, BagOfWords]:
    stats, embedder = CacheStats(), BagOfWords()
    entries = Entries(MemoryKV(max_bytes=10_000_000, clock=ManualClock()), cache="semantic",
                      stats=stats)  # fmt: skip
    layer = SemanticCache(
        upstream,
        view=CacheView(settings, entries, stats, resolve=lambda alias, _feature: alias),
        embedder=embedder,
        index=PartitionedIndex(max_entries=max_entries, hnsw_above=1000),
    )  # fmt: skip
    return layer, stats, embedder


def ask(text: str, *, system: str | None = None, **extra: object) -> Call:
    messages = [{"role": "user", "content": text}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return chat(messages=messages, **extra)  # type: ignore[arg-type]


async def test_a_paraphrase_is_served_from_the_semantic_cache() -> None:
    upstream = FakeUpstream()
    cache, stats, _ = semantic(upstream)
    first = await cache(ask("What is the capital of France?"))
    second = await cache(ask("what's the capital of France"))
    assert isinstance(second, Completed)
    assert second.headers[CACHE_HEADER] == "semantic"
    assert float(second.headers[SIMILARITY_HEADER]) >= 0.8
    assert isinstance(first, Completed)
    assert second.raw == first.raw
    assert len(upstream.calls) == 1
    assert sample_value(stats.lookups, "semantic", "hit") == 1


@pytest.mark.parametrize(
    ("stored", "asked", "guard"),
    [
        ("How do I cancel my subscription?", "How do I change my subscription?", "key_terms"),
        ("Is it safe to fly in March?", "Is it safe to fly in April?", "dates"),
        ("How do I lose 5 kg in a month?", "How do I lose 10 kg in a month?", "numbers"),
        ("Can I eat eggs when pregnant?", "Can I not eat eggs when pregnant?", "negation"),
        ("Does Python support tail calls?", "Does Java support tail calls?", "entities"),
        ("Did Germany beat Brazil?", "Did Brazil beat Germany?", "order"),
    ],
)
async def test_guards_refuse_near_misses(stored: str, asked: str, guard: str) -> None:
    upstream = FakeUpstream()
    cache, stats, _ = semantic(upstream)
    await cache(ask(stored))
    reply = await cache(ask(asked))
    assert reply.headers.get(CACHE_HEADER) != "semantic"
    assert len(upstream.calls) == 2
    assert sample_value(stats.rejected, guard) >= 1


async def test_everything_but_the_final_user_text_must_match() -> None:
    upstream = FakeUpstream()
    cache, _, _ = semantic(upstream)
    await cache(ask("What is the capital of France?", system="Answer in French."))
    other_system = await cache(ask("What's the capital of France?", system="Answer in German."))
    other_params = await cache(ask("What's the capital of France?", max_tokens=3))
    other_tenant = await cache(ask("What's the capital of France?", tenant="other"))
    for reply in (other_system, other_params, other_tenant):
        assert reply.headers.get(CACHE_HEADER) != "semantic"
    assert len(upstream.calls) == 4


async def test_off_unless_opted_in_and_only_for_deterministic_requests() -> None:
    upstream = FakeUpstream()
    cache, _, embedder = semantic(upstream, settings=CacheSettings())
    await cache(ask("What is the capital of France?"))
    await cache(ask("what's the capital of France"))
    assert embedder.calls == 0
    cache, _, embedder = semantic(upstream)
    await cache(ask("What is the capital of France?", temperature=0.9))
    assert embedder.calls == 0
    assert len(upstream.calls) == 3


async def test_a_failing_embedder_is_a_miss_not_an_error() -> None:
    upstream = FakeUpstream()
    cache, stats, embedder = semantic(upstream)
    embedder.fail = True
    reply = await cache(ask("What is the capital of France?"))
    assert isinstance(reply, Completed)
    assert sample_value(stats.lookups, "semantic", "unavailable") == 1


async def test_streamed_answers_are_stored_on_clean_completion_and_replayed() -> None:
    upstream = FakeUpstream()
    cache, _, _ = semantic(upstream)
    await drain(await cache(ask("What is the capital of France?", stream=True)))
    whole = await cache(ask("what's the capital of France"))
    assert isinstance(whole, Completed)
    assert whole.headers[CACHE_HEADER] == "semantic"
    assert whole.data["choices"][0]["message"]["content"] == "Paris is the capital."
    cut = FakeUpstream(cut_after=1)
    cache, _, _ = semantic(cut)
    with pytest.raises(Exception, match="cut"):
        await drain(await cache(ask("What is the capital of Spain?", stream=True)))
    await cache(ask("what's the capital of Spain"))
    assert len(cut.calls) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_a_hit_remembers_the_model_that_answered_it_first(stream: bool) -> None:
    cache, _, _ = semantic(Routed())
    miss = await cache(ask("What is the capital of France?", model="auto", stream=stream))
    if stream:
        await drain(miss)
    hit = ask("what's the capital of France", model="auto")
    assert (await cache(hit)).headers[CACHE_HEADER] == "semantic"
    assert hit.ctx.trace.cache == CacheResult(
        "semantic", CacheOutcome.HIT, 7, 4, alias="mini", upstream_model="mini-2024"
    )


async def test_a_verifier_can_refuse_a_hit() -> None:
    for word, expected_calls in (("no", 2), ("yes", 1)):
        upstream = FakeUpstream()
        settings = CacheSettings(
            default=CacheRuleSettings(semantic=True),
            semantic=SemanticCacheSettings(threshold=0.8, verify_model="judge"),
        )
        cache, _, _ = semantic(upstream, settings=settings)
        verdict = Completed(data={"choices": [{"message": {"content": word}}]})
        verifier = FakeUpstream(default=verdict)
        cache._verify = verifier
        await cache(ask("What is the capital of France?"))
        await cache(ask("what's the capital of France"))
        assert len(verifier.calls) == 1
        assert len(upstream.calls) == expected_calls


async def test_the_index_is_bounded_oldest_out_first() -> None:
    upstream = FakeUpstream()
    cache, _, _ = semantic(upstream, max_entries=2)
    for city in ("Paris", "Rome", "Oslo"):
        await cache(ask(f"Tell me about {city} now"))
    assert isinstance(cache._index, PartitionedIndex)
    assert len(cache._index) == 2
    again = await cache(ask(f"tell me about {'Paris'} now!"))
    assert again.headers.get(CACHE_HEADER) != "semantic"
    hit = await cache(ask("tell me about Oslo now!"))
    assert hit.headers[CACHE_HEADER] == "semantic"


async def test_the_configured_guard_set_decides_which_may_object() -> None:
    upstream = FakeUpstream()
    no_order = CacheSettings(
        default=CacheRuleSettings(semantic=True),
        semantic=SemanticCacheSettings(threshold=0.8, guards=("negation", "numbers")),
    )
    cache, _, _ = semantic(upstream, settings=no_order)
    await cache(ask("Did Germany beat Brazil?"))
    swapped = await cache(ask("Did Brazil beat Germany?"))
    assert swapped.headers[CACHE_HEADER] == "semantic"  # the order guard is off here
    await cache(ask("How do I lose 5 kg in a month?"))
    assert (await cache(ask("How do I lose 10 kg in a month?"))).headers.get(
        CACHE_HEADER
    ) != "semantic"

"""ExactCache over a scripted upstream: what is served, what is stored, what never is."""

from __future__ import annotations

import orjson
import pytest

from levergate.config import CacheRuleSettings, CacheSettings
from levergate.core.call import CacheOutcome, CacheResult, Call, Context
from levergate.core.controls import CachePolicy
from levergate.core.reply import Completed, Reply, Stream
from levergate.errors import UpstreamUnavailable
from levergate.layers.cache.entries import AGE_HEADER, CACHE_HEADER, CacheView, Entries
from levergate.layers.cache.exact import ExactCache
from levergate.layers.cache.stats import CacheStats
from levergate.stores.entry import decode, encode
from levergate.stores.kv_memory import MemoryKV
from levergate.testing import FakeUpstream, ManualClock, sample_value
from tests.unit.layers.cache.helpers import Routed, chat, drain, exact_cache, text_of


async def test_second_identical_request_is_a_hit_with_age_and_same_bytes() -> None:
    upstream = FakeUpstream()
    cache, stats = exact_cache(upstream)
    first = await cache(chat())
    second = await cache(chat())
    assert isinstance(first, Completed)
    assert isinstance(second, Completed)
    assert first.headers[CACHE_HEADER] == "miss"
    assert second.headers[CACHE_HEADER] == "hit"
    assert float(second.headers[AGE_HEADER]) >= 0
    assert second.raw == first.raw
    assert len(upstream.calls) == 1
    assert sample_value(stats.lookups, "exact", "hit") == 1


async def test_sampled_requests_bypass_unless_the_rule_says_always() -> None:
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream)
    for _ in range(2):
        reply = await cache(chat(temperature=0.7))
        assert reply.headers[CACHE_HEADER] == "bypass; reason=nondeterministic"
    assert len(upstream.calls) == 2
    seeded = [await cache(chat(temperature=0.7, seed=3)) for _ in range(2)]
    assert [r.headers[CACHE_HEADER] for r in seeded] == ["miss", "hit"]
    always, _ = exact_cache(
        FakeUpstream(), settings=CacheSettings(default=CacheRuleSettings(mode="always"))
    )
    await always(chat(temperature=1.0))
    assert (await always(chat(temperature=1.0))).headers[CACHE_HEADER] == "hit"
    off, _ = exact_cache(
        FakeUpstream(), settings=CacheSettings(models={"m": CacheRuleSettings(mode="off")})
    )
    assert (await off(chat())).headers[CACHE_HEADER] == "bypass; reason=off"


async def test_feature_rule_wins_over_model_rule() -> None:
    settings = CacheSettings(
        models={"m": CacheRuleSettings(mode="off")},
        features={"faq": CacheRuleSettings(mode="deterministic")},
    )
    cache, _ = exact_cache(FakeUpstream(), settings=settings)
    await cache(chat(feature="faq"))
    assert (await cache(chat(feature="faq"))).headers[CACHE_HEADER] == "hit"
    assert (await cache(chat())).headers[CACHE_HEADER] == "bypass; reason=off"


async def test_a_streamed_answer_replays_as_stream_and_serves_whole_requests() -> None:
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream)
    live = await drain(await cache(chat(stream=True)))
    replayed = await cache(chat(stream=True))
    assert replayed.headers[CACHE_HEADER] == "hit"
    assert await drain(replayed) == live
    whole = await cache(chat())
    assert isinstance(whole, Completed)
    assert whole.headers[CACHE_HEADER] == "hit"
    assert whole.data["choices"][0]["message"]["content"] == "Paris is the capital."
    assert whole.data["choices"][0]["finish_reason"] == "stop"
    assert whole.data["usage"]["completion_tokens"] == 4
    assert len(upstream.calls) == 1


async def test_a_whole_answer_replays_as_a_well_formed_stream() -> None:
    cache, _ = exact_cache(FakeUpstream())
    await cache(chat())
    chunks = await drain(await cache(chat(stream=True)))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert text_of(chunks) == "Paris is the capital."
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] == 11


async def test_errors_cut_streams_and_filtered_answers_are_never_stored() -> None:
    failing = FakeUpstream(default=UpstreamUnavailable("down"))
    cache, _ = exact_cache(failing)
    for _ in range(2):
        with pytest.raises(UpstreamUnavailable):
            await cache(chat())
    assert len(failing.calls) == 2

    cut = FakeUpstream(cut_after=2)
    cache, _ = exact_cache(cut)
    for _ in range(2):
        with pytest.raises(UpstreamUnavailable):
            await drain(await cache(chat(stream=True)))
    assert len(cut.calls) == 2

    filtered = FakeUpstream(finish="content_filter")
    cache, stats = exact_cache(filtered)
    await cache(chat())
    await drain(await cache(chat(stream=True)))
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    assert sample_value(stats.not_stored, "exact", "content_filter") == 3


async def test_a_stream_the_client_abandons_is_not_stored() -> None:
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream)
    reply = await cache(chat(stream=True))
    assert isinstance(reply, Stream)
    async for _ in reply:
        break
    await reply.aclose()
    assert upstream.closed == 1
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"


async def test_tool_calls_and_several_choices_only_when_configured() -> None:
    cache, _ = exact_cache(FakeUpstream(tool_call=True, finish="tool_calls"))
    await cache(chat())
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    allowed = CacheSettings(default=CacheRuleSettings(cache_tool_calls=True, cache_n=True))
    cache, _ = exact_cache(FakeUpstream(tool_call=True, finish="tool_calls"), settings=allowed)
    await drain(await cache(chat(stream=True)))
    hit = await cache(chat())
    assert isinstance(hit, Completed)
    assert hit.data["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup"
    cache, _ = exact_cache(FakeUpstream())
    assert (await cache(chat(n=2))).headers[CACHE_HEADER] == "bypass; reason=n"
    cache, _ = exact_cache(FakeUpstream(), settings=allowed)
    await cache(chat(n=2))
    assert (await cache(chat(n=2))).headers[CACHE_HEADER] == "hit"


async def test_cache_control_no_cache_no_store_max_age_and_ttl() -> None:
    clock = ManualClock()
    store = MemoryKV(max_bytes=1_000_000, clock=clock)
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream, store=store)
    await cache(chat(cache=CachePolicy(store=False)))
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"  # stored now
    refreshed = await cache(chat(cache=CachePolicy(lookup=False)))
    assert refreshed.headers[CACHE_HEADER] == "miss"
    assert len(upstream.calls) == 3
    assert (await cache(chat())).headers[CACHE_HEADER] == "hit"
    aged = await cache(chat(cache=CachePolicy(max_age=3600)))
    assert aged.headers[CACHE_HEADER] == "hit"
    short = chat(cache=CachePolicy(ttl=5), max_tokens=9)
    await cache(short)
    assert (await cache(short)).headers[CACHE_HEADER] == "hit"
    clock.advance(6)
    assert (await cache(short)).headers[CACHE_HEADER] == "miss"


async def test_tenants_never_share_unless_mapped_to_one_namespace() -> None:
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream)
    await cache(chat(tenant="a"))
    assert (await cache(chat(tenant="b"))).headers[CACHE_HEADER] == "miss"
    shared = CacheSettings(tenant_namespaces={"a": "team", "b": "team"})
    cache, _ = exact_cache(FakeUpstream(), settings=shared)
    await cache(chat(tenant="a"))
    assert (await cache(chat(tenant="b"))).headers[CACHE_HEADER] == "hit"
    assert (await cache(chat(tenant="c"))).headers[CACHE_HEADER] == "miss"


async def test_corrupt_entries_are_dropped_counted_and_refetched() -> None:
    store = MemoryKV(max_bytes=1_000_000, clock=ManualClock())
    upstream = FakeUpstream()
    cache, stats = exact_cache(upstream, store=store)
    await cache(chat())
    (key,) = list(store._entries)
    good = await store.get(key)
    assert good is not None
    for bad in (good[:-3], b"garbage", good[:20] + bytes([good[20] ^ 1]) + good[21:]):
        await store.set(key, bad, ttl=60)
        assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    assert sample_value(stats.corrupt, "exact") == 3
    # An entry written under another key is refused too.
    from levergate.stores.entry import decode

    moved = encode(decode(good, key=key), key="another")
    await store.set(key, moved, ttl=60)
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    assert sample_value(stats.corrupt, "exact") == 4


async def test_an_entry_remembered_decoded_is_still_checked_against_the_store() -> None:
    """A repeated hit reuses the entry decoded from the same bytes; bytes that changed in the
    store (corrupted, or rewritten) are decoded again, and an expired entry is not served."""
    wall = [1000.0]
    store = MemoryKV(max_bytes=1_000_000, clock=ManualClock())
    stats = CacheStats()
    entries = Entries(store, cache="exact", stats=stats, wall=lambda: wall[0], remember=True)
    upstream = FakeUpstream()
    cache = ExactCache(upstream, view=CacheView(CacheSettings(), entries, stats,
                                                resolve=lambda a, _feature: a))  # fmt: skip
    await cache(chat())
    (key,) = list(store._entries)
    first, again = await entries.load(key), await entries.load(key)
    assert first is not None
    assert again is first  # the same bytes: decoded once
    hits = [await cache(chat()) for _ in range(2)]
    assert [h.headers[CACHE_HEADER] for h in hits] == ["hit", "hit"]
    good = await store.get(key)
    assert good is not None
    await store.set(key, good[:20] + bytes([good[20] ^ 1]) + good[21:], ttl=60)
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    assert sample_value(stats.corrupt, "exact") == 1
    assert (await cache(chat())).headers[CACHE_HEADER] == "hit"  # the miss wrote it anew
    wall[0] += CacheSettings().default.ttl_seconds + 1
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    assert len(upstream.calls) == 3


async def test_a_body_decided_before_keeps_its_tenant_feature_and_kind_apart() -> None:
    """The decision remembered by the raw body (rule, bypass, key) is the tenant's, the
    feature's and the kind's: the same bytes under another tenant miss, under a feature whose
    rule is off bypass, and a sampled body bypasses every time."""
    settings = CacheSettings(features={"nocache": CacheRuleSettings(mode="off")})
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream, settings=settings)
    asked = [("default", ""), ("default", ""), ("b", ""), ("b", ""), ("default", "nocache"),
             ("default", "nocache"), ("default", "")]  # fmt: skip
    outcomes = [(await cache(chat(raw=True, tenant=tenant, feature=feature))).headers[CACHE_HEADER]
                for tenant, feature in asked]  # fmt: skip
    assert outcomes == ["miss", "hit", "miss", "hit", "bypass; reason=off", "bypass; reason=off",
                        "hit"]  # fmt: skip
    sampled = [(await cache(chat(raw=True, temperature=0.5))).headers[CACHE_HEADER]
               for _ in range(2)]  # fmt: skip
    assert sampled == ["bypass; reason=nondeterministic"] * 2
    # The call's own Cache-Control still decides, the body's decision remembered or not.
    refreshed = await cache(chat(raw=True, cache=CachePolicy(lookup=False)))
    assert refreshed.headers[CACHE_HEADER] == "miss"
    body = {"model": "m", "prompt": "Once", "max_tokens": 2, "temperature": 0}
    raw = orjson.dumps(body)
    as_completion = Call(kind="completion", body=body, ctx=Context("r"), raw=raw)
    assert (await cache(as_completion)).headers[CACHE_HEADER] == "miss"
    assert len(upstream.calls) == 8  # 3 misses, 4 bypasses, the completion


async def test_max_age_refuses_older_entries_and_age_is_reported() -> None:
    from levergate.layers.cache.entries import CacheView, Entries
    from levergate.layers.cache.stats import CacheStats

    wall = [1000.0]
    stats = CacheStats()
    store = MemoryKV(max_bytes=1_000_000, clock=ManualClock())
    upstream = FakeUpstream()
    entries = Entries(store, cache="exact", stats=stats, wall=lambda: wall[0])
    view = CacheView(CacheSettings(), entries, stats, resolve=lambda a, _feature: a)
    cache = ExactCache(upstream, view=view)
    await cache(chat())
    wall[0] += 30
    hit = await cache(chat())
    assert hit.headers[AGE_HEADER] == "30.000"
    assert hit.headers["age"] == "30"
    young = await cache(chat(cache=CachePolicy(max_age=10)))
    assert young.headers[CACHE_HEADER] == "miss"
    # That miss refreshed the entry, so it is young now.
    assert (await cache(chat(cache=CachePolicy(max_age=10)))).headers[CACHE_HEADER] == "hit"


async def test_completions_are_cached_and_replayed_in_both_shapes() -> None:
    answer = {
        "id": "c", "object": "text_completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "text": "once upon", "logprobs": None,
                     "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }  # fmt: skip
    upstream = FakeUpstream(default=lambda: Completed(data=answer))
    cache, _ = exact_cache(upstream)
    body = {"model": "m", "prompt": "Once", "max_tokens": 2, "temperature": 0}
    await cache(Call(kind="completion", body=body, ctx=Context("r")))
    streamed = await cache(Call(kind="completion", body={**body, "stream": True}, ctx=Context("r")))
    chunks = await drain(streamed)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "once upon"
    assert chunks[-1]["usage"]["completion_tokens"] == 2
    assert len(upstream.calls) == 1


async def test_the_record_says_hit_or_miss_and_what_a_hit_saved() -> None:
    cache, _ = exact_cache(FakeUpstream())
    first, second = chat(), chat()
    await cache(first)
    await cache(second)
    assert first.ctx.trace.cache == CacheResult("exact", CacheOutcome.MISS)
    hit = second.ctx.trace.cache
    assert hit is not None
    assert (hit.outcome, hit.free, hit.saved_output) == (CacheOutcome.HIT, True, 4)


async def test_an_answer_from_a_fallback_model_is_not_stored() -> None:
    class FellBack(FakeUpstream):
        async def __call__(self, call: Call) -> Reply:
            call.ctx.trace.fallback = "other"
            return await super().__call__(call)

    cache, _ = exact_cache(FellBack())
    await cache(chat())
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"


async def test_a_semantic_hit_below_is_not_stored_as_the_exact_answer() -> None:
    class SemanticHit(FakeUpstream):
        async def __call__(self, call: Call) -> Reply:
            call.ctx.trace.cache = CacheResult("semantic", CacheOutcome.HIT, 10, 4)
            return await super().__call__(call)

    cache, _ = exact_cache(SemanticHit())
    first = chat()
    await cache(first)
    assert first.ctx.trace.cache is not None
    assert first.ctx.trace.cache.cache == "semantic"  # the exact cache leaves it as it is
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_hit_remembers_the_model_that_answered_it_first(stream: bool) -> None:
    # A client asked for "auto"; the ledger prices the hit at what answered, not at "auto".
    cache, _ = exact_cache(Routed())
    miss = await cache(chat(model="auto", stream=stream))
    if stream:
        await drain(miss)
    hit = chat(model="auto")
    await cache(hit)
    assert hit.ctx.trace.cache == CacheResult(
        "exact", CacheOutcome.HIT, 7, 4, alias="mini", upstream_model="mini-2024"
    )


async def test_an_entry_written_before_the_origin_was_kept_is_served_as_before() -> None:
    store = MemoryKV(max_bytes=1_000_000, clock=ManualClock())
    cache, _ = exact_cache(Routed(), store=store)
    await cache(chat())
    (key,) = list(store._entries)
    data = await store.get(key)
    assert data is not None
    entry = decode(data, key=key)
    for old_meta in (b"7,4,0,0,0", b"7,4"):
        old = encode(type(entry)(entry.form, entry.parts, entry.created, entry.expires, old_meta),
                     key=key)  # fmt: skip
        await store.set(key, old, ttl=60)
        hit = chat()
        assert (await cache(hit)).headers[CACHE_HEADER] == "hit"
        assert hit.ctx.trace.cache == CacheResult("exact", CacheOutcome.HIT, 7, 4)


async def test_hits_are_counted_on_the_children_every_other_way_counts_them() -> None:
    """The layer keeps its hit counters (`CacheStats.hits`) from its first hit: they are the
    children `lookup` and `saved` add to, so the lookups by outcome and the saved tokens are
    one series each however they were counted."""
    cache, stats = exact_cache(FakeUpstream())
    await cache(chat())
    assert sample_value(stats.lookups, "exact", "hit") == 0
    hits = [chat() for _ in range(3)]
    for call in hits:
        await cache(call)
    stats.lookup("exact", "hit")
    stats.saved("exact", 1, 2)
    result = hits[0].ctx.trace.cache
    assert result is not None
    assert result.saved_input > 0
    assert result.saved_output > 0
    assert sample_value(stats.lookups, "exact", "hit") == 4
    assert sample_value(stats.saved_tokens, "exact", "input") == 3 * result.saved_input + 1
    assert sample_value(stats.saved_tokens, "exact", "output") == 3 * result.saved_output + 2
    assert stats.hits("exact") == stats.hits("exact")  # the same children every time

"""The optimizer layer over a scripted upstream: what it sends on, and what it reports."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from levergate.config import PromptCacheSettings
from levergate.core.call import Call, Context
from levergate.core.controls import Principal
from levergate.layers.prompt_cache import PromptCacheOptimizer, PromptCacheState, Provider
from levergate.layers.prompt_cache.layer import BLOCK_BYTES, RAW_GROWTH, cache_key
from levergate.policies.affinity import prompt_bytes
from levergate.testing import FakeUpstream, ManualClock

SHARED = "Follow the support policy: be exact, cite the handbook, never guess. " * 80


def chat(system: str, *, tenant: str = "t1", **extra: Any) -> Call:
    body = {"model": "m", "messages": [{"role": "system", "content": system},
                                       {"role": "user", "content": "Hello"}], **extra}  # fmt: skip
    return Call(kind="chat", body=body, ctx=Context("r", principal=Principal(tenant=tenant)))


def build(
    provider: Provider, **settings: Any
) -> tuple[PromptCacheOptimizer, FakeUpstream, PromptCacheState, ManualClock, CollectorRegistry]:
    registry, clock, upstream = CollectorRegistry(), ManualClock(), FakeUpstream()
    s = PromptCacheSettings(**settings)
    state = PromptCacheState(s, registry=registry)
    layer = PromptCacheOptimizer(upstream, settings=s, model="m", provider=provider, state=state,
                                 clock=clock)  # fmt: skip
    return layer, upstream, state, clock, registry


async def test_openai_gets_a_prompt_cache_key_per_tenant_and_prefix() -> None:
    layer, upstream, *_ = build(Provider.OPENAI)
    for tenant in ("t1", "t1", "t2"):
        await layer(chat(SHARED, tenant=tenant))
    keys = [c.body["prompt_cache_key"] for c in upstream.calls]
    assert keys[0] == keys[1] != keys[2]
    assert keys[0] == cache_key("t1", upstream.calls[0].body)
    await layer(chat(SHARED, prompt_cache_key="mine"))
    assert upstream.calls[-1].body["prompt_cache_key"] == "mine"  # the client's is kept


async def test_other_providers_get_no_key_unless_asked() -> None:
    layer, upstream, *_ = build(Provider.OTHER)
    await layer(chat(SHARED))
    assert "prompt_cache_key" not in upstream.calls[0].body
    forced, upstream, *_ = build(Provider.OTHER, openai_cache_key="on")
    await forced(chat(SHARED))
    assert "prompt_cache_key" in upstream.calls[0].body


async def test_a_timestamp_in_the_system_prompt_is_reported() -> None:
    layer, _, state, clock, registry = build(Provider.OTHER)
    first = chat(f"Now: 2026-12-01T10:00:0{0}Z. " + SHARED)
    await layer(first)
    clock.advance(2.0)
    second = chat("Now: 2026-12-01T10:00:07Z. " + SHARED)
    await layer(second)
    [finding] = state.findings.newest()
    assert finding.shared_after >= 2048
    assert "07" not in finding.shape
    assert any("keeps" in n.text for n in second.ctx.trace.notes)
    assert (
        registry.get_sample_value(
            "levergate_prefix_breaks_total", {"model": "m", "kind": finding.kind}
        )
        == 1.0
    )


async def test_linting_is_sampled() -> None:
    layer, _, state, clock, _ = build(Provider.OTHER)
    for i in range(5):  # all within one second: only the first is compared (and kept)
        await layer(chat(f"id {i}{i}{i} " + SHARED))
    assert state.findings.newest() == []
    clock.advance(1.0)
    await layer(chat("id 999 " + SHARED))
    assert len(state.findings.newest()) == 1


async def test_anthropic_breakpoints_go_on_reused_prefixes_and_expected_cache_grows() -> None:
    layer, upstream, _, clock, registry = build(Provider.ANTHROPIC)
    calls = [chat(SHARED), chat(SHARED)]
    await layer(calls[0])
    clock.advance(10.0)
    await layer(calls[1])
    assert "cache_control" not in str(upstream.calls[0].body)
    system = upstream.calls[1].body["messages"][0]["content"]
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    assert calls[0].ctx.trace.expected_cached == 0
    assert calls[1].ctx.trace.expected_cached >= 1024
    assert (
        registry.get_sample_value(
            "levergate_prompt_cache_breakpoints_total",
            {"model": "m", "boundary": "system", "ttl": "5m"},
        )
        == 1.0
    )


async def test_canonical_tools_only_when_asked() -> None:
    tools = [{"type": "function", "function": {"name": n}} for n in ("b", "a")]
    plain, upstream, *_ = build(Provider.OTHER)
    await plain(chat("x", tools=tools))
    assert [t["function"]["name"] for t in upstream.calls[0].body["tools"]] == ["b", "a"]
    canon, upstream, *_ = build(Provider.OTHER, canonical_tools=True)
    await canon(chat("x", tools=tools))
    assert [t["function"]["name"] for t in upstream.calls[0].body["tools"]] == ["a", "b"]


async def test_other_kinds_pass_untouched() -> None:
    layer, upstream, *_ = build(Provider.OPENAI)
    call = Call(kind="embedding", body={"model": "m", "input": "x"}, ctx=Context("r"))
    await layer(call)
    assert upstream.calls[0] is call


def _json(value: object) -> str:
    """JSON text whose numbers are written as short as JSON allows (`1e15`), where orjson
    writes them longest when it writes the parsed value again."""
    if isinstance(value, tuple):  # (mantissa, exponent): a number in exponent form
        return f"{value[0]}e{value[1]}"
    if isinstance(value, list):
        return "[" + ",".join(_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json(k)}:{_json(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)  # strings escaped (\\uXXXX for non-ASCII), ints, true, null


_LEAVES = st.one_of(
    st.text(max_size=20), st.integers(), st.booleans(), st.none(),
    st.tuples(st.integers(1, 9), st.integers(-10, 300)),
)  # fmt: skip
_CONTENT = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)


@given(st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": _CONTENT}),
                min_size=1, max_size=5),
       st.one_of(st.none(), st.lists(_CONTENT, max_size=3)))  # fmt: skip
def test_a_prompt_is_never_more_than_raw_growth_times_the_json_it_came_in(
    messages: list[dict[str, object]], tools: list[object] | None
) -> None:
    """What lets a small request skip the prompt's digests: its bytes as written again are at
    most `RAW_GROWTH` times the request's own JSON, whatever its strings and numbers."""
    body: dict[str, object] = {"model": "m", "messages": messages}
    if tools:
        body["tools"] = tools
    raw = _json(body).encode()
    assert len(prompt_bytes(orjson.loads(raw))) <= RAW_GROWTH * len(raw)


async def test_a_small_request_skips_the_digests_and_a_large_one_still_counts() -> None:
    layer, *_ = build(Provider.OTHER)
    small = chat("Be brief.")
    small = Call(kind="chat", body=small.body, ctx=small.ctx, raw=orjson.dumps(small.body))
    assert len(small.raw or b"") * RAW_GROWTH < BLOCK_BYTES
    await layer(small)
    await layer(small)
    assert small.ctx.trace.expected_cached == 0
    first, second = chat(SHARED), chat(SHARED)
    first, second = (Call(kind="chat", body=c.body, ctx=c.ctx, raw=orjson.dumps(c.body))
                     for c in (first, second))  # fmt: skip
    await layer(first)
    await layer(second)
    assert first.ctx.trace.expected_cached == 0
    assert second.ctx.trace.expected_cached >= 1024

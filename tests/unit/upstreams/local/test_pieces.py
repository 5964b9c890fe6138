"""Tokenizing a prompt piece by piece: where a text may be cut, and, on the bundled model's real
vocabulary, the same tokens as tokenizing it whole, with a long piece a later prompt shares
tokenized once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.upstreams.local import LocalEndpoint
from levergate.upstreams.local.pieces import MIN_CACHED_CHARS, PieceTokenizer, Special, cuts
from levergate.upstreams.local.runtime import Runtime
from levergate.upstreams.local.template import chatml
from tests.unit.upstreams.local.helpers import SYSTEM, chat_call, local_settings, running

START, END = Special("<|im_start|>", lstrip=False), Special("<|im_end|>", lstrip=False)


def test_a_text_is_cut_before_each_special_token_but_the_first_character() -> None:
    text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    second_start = text.index("<|im_start|>", 1)
    expected = [text.index("<|im_end|>"), second_start, text.rindex("<|im_end|>")]
    assert cuts(text, [START, END]) == expected == [28, 39, 58]
    assert cuts("no special token here", [START, END]) == []


def test_overlapping_special_tokens_leave_the_text_whole() -> None:
    inner = Special("im_start", lstrip=False)
    assert cuts("a<|im_start|>b", [START, inner]) is None
    assert cuts("a<|im_start|>b", [START]) == [1]


def test_no_cut_before_a_token_that_strips_or_starts_with_whitespace() -> None:
    stripping = Special("<mask>", lstrip=True)
    spaced = Special(" <pad>", lstrip=False)
    assert cuts("a <mask> b <pad> c<|im_end|>", [stripping, spaced, END]) == [18]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[LocalEndpoint]:
    yield from running(local_settings())


def counting(runtime: Runtime) -> tuple[PieceTokenizer, list[str]]:
    """A tokenizer over the runtime's vocabulary, and the texts it hands to llama.cpp."""
    seen: list[str] = []

    def tokenize(text: str, add_special: bool) -> list[int]:
        seen.append(text)
        return runtime.tokenize(text, add_special=add_special)

    return PieceTokenizer(tokenize, runtime.specials()), seen


def test_the_bundled_vocabulary_is_cut_at_its_chat_markers(endpoint: LocalEndpoint) -> None:
    specials = endpoint.runtime.specials()
    assert specials is not None
    assert {"<|im_start|>", "<|im_end|>"} <= {s.text for s in specials}


def test_a_shared_system_prompt_is_tokenized_once(endpoint: LocalEndpoint) -> None:
    runtime = endpoint.runtime
    tokenizer, seen = counting(runtime)
    cold = chatml([("system", SYSTEM), ("user", "When do you open?")])
    warm = chatml([("system", SYSTEM), ("user", "Do you deliver?")])
    assert tokenizer(cold) == runtime.tokenize(cold)
    seen.clear()
    assert tokenizer(warm) == runtime.tokenize(warm)
    assert tokenizer.hits == 1
    assert sum(len(text) for text in seen) < len(warm) - len(SYSTEM)


def test_short_pieces_are_tokenized_together(endpoint: LocalEndpoint) -> None:
    """A text of many special tokens costs one call, not one per piece; a long piece between
    short ones, three."""
    runtime = endpoint.runtime
    tokenizer, seen = counting(runtime)
    many = "<|im_end|>x" * 2000
    assert tokenizer(many) == runtime.tokenize(many)
    assert len(seen) == 1
    seen.clear()
    mixed = "<|im_start|>a" * 5 + "<|im_start|>" + SYSTEM + "<|im_end|>b" * 5
    assert tokenizer(mixed) == runtime.tokenize(mixed)
    assert len(seen) == 3


texts = st.lists(
    st.one_of(
        st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\n"]),
        st.text(max_size=40),
        st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=8), st.integers(60, 120)),
        st.sampled_from([" ", "\n", "  \n", SYSTEM[: MIN_CACHED_CHARS + 7]]),
    ),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(first=texts, second=texts)
def test_pieces_tokenize_as_the_whole_text_does(
    endpoint: LocalEndpoint, first: str, second: str
) -> None:
    """Any text, and a second one sharing its long pieces (tokenized from the cache): the
    tokens llama.cpp gives the whole text."""
    runtime = endpoint.runtime
    tokenizer, _ = counting(runtime)
    for text in (first, second, first + second, second + first):
        assert tokenizer(text) == runtime.tokenize(text)


async def test_the_endpoint_tokenizes_a_shared_system_prompt_once(
    endpoint: LocalEndpoint,
) -> None:
    before = endpoint._tokenize.hits
    for question in ("When do you open?", "Do you deliver?"):
        call = chat_call(question, system=SYSTEM)
        prepared = endpoint._prepare(call)
        text = chatml([("system", SYSTEM), ("user", question)])
        assert list(prepared.request.prompt) == endpoint.runtime.tokenize(text)
    assert endpoint._tokenize.hits == before + 1

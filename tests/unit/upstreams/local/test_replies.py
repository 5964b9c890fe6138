"""Text assembly from token bytes: UTF-8 split across tokens, stop strings across tokens,
and the OpenAI shapes of answers and chunks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from levergate.upstreams.local.replies import Shape, TextAssembler, usage_of


def feed_all(assembler: TextAssembler, pieces: list[bytes]) -> str:
    out = "".join(assembler.feed(p) for p in pieces)
    return out + assembler.flush()


def cut(data: bytes, points: list[int]) -> list[bytes]:
    marks = sorted({min(p, len(data)) for p in points})
    return [data[a:b] for a, b in zip([0, *marks], [*marks, len(data)], strict=True)]


@given(
    st.text(alphabet="ab é€😀\n", max_size=40),
    st.lists(st.sampled_from(["b a", "€", "😀\n", "aa"]), max_size=3),
    st.lists(st.integers(0, 200), max_size=12),
)
def test_any_split_gives_the_text_up_to_the_first_stop(
    text: str, stops: list[str], points: list[int]
) -> None:
    assembler = TextAssembler(stops)
    sent = feed_all(assembler, cut(text.encode(), points))
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    expected = text[: min(hits)] if hits else text
    assert sent == expected
    assert assembler.stopped == bool(hits)


def test_a_partial_stop_string_is_held_back_then_released() -> None:
    assembler = TextAssembler(["END"])
    assert assembler.feed(b"hello E") == "hello "
    assert assembler.feed(b"N") == ""
    assert assembler.feed(b"D!") == ""
    assert assembler.stopped
    other = TextAssembler(["END"])
    assert other.feed(b"hello EN") == "hello "
    assert other.feed(b"X") == "ENX"


def test_chat_and_completion_shapes() -> None:
    chat = Shape.new("chat", "m")
    usage = usage_of(prompt=10, completion=3, cached=4)
    done = chat.completed("hi", "stop", usage)
    assert done["object"] == "chat.completion"
    assert done["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert done["usage"]["prompt_tokens_details"]["cached_tokens"] == 4
    assert done["usage"]["total_tokens"] == 13
    assert chat.chunk(None)["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chat.chunk("x")["choices"][0]["delta"] == {"content": "x"}
    assert chat.chunk(None, "length")["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert chat.usage_chunk(usage)["choices"] == []
    text = Shape.new("completion", "m")
    assert text.id.startswith("cmpl-")
    assert text.completed("x", "stop", usage)["choices"][0]["text"] == "x"
    assert text.chunk("y")["object"] == "text_completion"

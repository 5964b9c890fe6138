"""Secrets in 200 answers: found in every JSON spelling, cut out of whole answers and out of
streams however the events split them; answers without one pass untouched (same objects)."""

from __future__ import annotations

import orjson
import pytest

from levergate.core.reply import Completed, Event, EventSource
from levergate.redact import Redactor
from levergate.redact_answers import HOLD_FROM, AnswerScrubber, texts

KEY = "sk-test-0123456789abcdefXYZ"
SCRUB = AnswerScrubber(Redactor([KEY]))


def escaped(text: str, *, upper: bool = False) -> str:
    return "".join(f"\\u{ord(c):04X}" if upper else f"\\u{ord(c):04x}" for c in text)


def chunk(content: str, *, index: int = 0) -> Event:
    event = {"id": "c", "object": "chat.completion.chunk",
             "choices": [{"index": index, "delta": {"content": content}}]}  # fmt: skip
    return Event(orjson.dumps(event))


async def run(events: list[Event], scrub: AnswerScrubber = SCRUB) -> list[Event]:
    async def source() -> EventSource:
        for event in events:
            yield event

    return [event async for event in scrub.stream(source())]


def contents(events: list[Event]) -> str:
    return "".join(t for e in events for _, _, t in texts(e.json()))


def test_no_secret_configured_builds_no_scrubber() -> None:
    assert AnswerScrubber.of(Redactor([])) is None
    assert AnswerScrubber.of(Redactor(["short"])) is None


@pytest.mark.parametrize(
    "spelled",
    [KEY, escaped(KEY), escaped(KEY, upper=True), KEY[:5] + escaped(KEY[5:9]) + KEY[9:],
     KEY.replace("-", "\\u002d")],
)  # fmt: skip
def test_a_whole_answer_is_scrubbed_in_every_json_spelling(spelled: str) -> None:
    raw = '{"id":"x","choices":[{"message":{"content":"the key: ' + spelled + ' ok\\n"}}]}'
    reply = SCRUB.completed(Completed(raw.encode()))
    assert KEY not in reply.raw.decode()
    assert reply.data["choices"][0]["message"]["content"] == "the key: [redacted] ok\n"


def test_a_slash_in_a_secret_is_found_behind_its_short_escape() -> None:
    secret = "abc/def/ghi/jkl"  # noqa: S105 - a test value
    scrub = AnswerScrubber(Redactor([secret]))
    reply = scrub.completed(Completed(b'{"a": "x abc\\/def\\/ghi\\/jkl y"}'))
    assert reply.data == {"a": "x [redacted] y"}


def test_an_answer_without_a_secret_is_the_same_object() -> None:
    reply = Completed(b'{"a": "sk-test-0123 and \\u00e9 \\n"}')
    assert SCRUB.completed(reply) is reply


async def test_a_key_in_one_event_is_scrubbed() -> None:
    out = await run([chunk("a"), chunk(f"key {KEY}!"), chunk("b")])
    assert contents(out) == "akey [redacted]!b"


@pytest.mark.parametrize("cut", [1, 3, 4, 10, len(KEY) - 1])
async def test_a_key_split_across_two_events_is_caught(cut: int) -> None:
    out = await run([chunk("key " + KEY[:cut]), chunk(KEY[cut:] + " end")])
    text = contents(out)
    assert KEY[HOLD_FROM - 1 :] not in text
    assert text.endswith("[redacted] end")
    assert text.startswith("key ")


@pytest.mark.parametrize("size", [1, 2, 3, 5])
async def test_a_key_dripped_over_many_events_is_caught(size: int) -> None:
    drips = [KEY[i : i + size] for i in range(0, len(KEY), size)]
    out = await run([chunk("the key "), *map(chunk, drips), chunk(" ok")])
    text = contents(out)
    assert "[redacted]" in text
    assert KEY[HOLD_FROM - 1 :] not in text
    assert text.endswith(" ok")


async def test_events_are_held_only_while_they_may_begin_a_secret() -> None:
    events = [chunk("hello sk-t"), chunk("here"), chunk(" world")]
    scrub = SCRUB.stream(_aiter(events))
    first = await anext(scrub)  # held until the next event shows it is no key
    assert contents([first]) == "hello sk-t"
    assert first is events[0]
    assert [e async for e in scrub] == events[1:]


async def test_other_choices_and_usage_chunks_keep_their_order() -> None:
    usage = Event(b'{"choices": [], "usage": {"prompt_tokens": 1}}')
    events = [chunk(KEY[:10]), chunk("other", index=1), usage, chunk(KEY[10:])]
    out = await run(events)
    assert [e.json().get("usage") for e in out] == [None, None, {"prompt_tokens": 1}, None]
    assert KEY[HOLD_FROM - 1 :] not in contents(out)
    assert "other" in contents(out)


async def test_tool_arguments_and_responses_deltas_are_text_channels() -> None:
    def call(args: str) -> Event:
        tool = {"index": 0, "function": {"arguments": args}}
        return Event.of({"choices": [{"index": 0, "delta": {"tool_calls": [tool]}}]})

    def delta(text: str) -> Event:
        return Event.of({"type": "response.output_text.delta", "output_index": 0,
                         "content_index": 0, "delta": text})  # fmt: skip

    for make in (call, delta):
        out = await run([make('{"k": "' + KEY[:12]), make(KEY[12:] + '"}')])
        assert KEY[HOLD_FROM - 1 :] not in b"".join(e.data for e in out).decode()


async def test_a_never_ending_partial_match_does_not_hold_without_bound() -> None:
    events = [chunk(KEY[:10]), *(chunk("") for _ in range(300))]
    scrub = SCRUB.stream(_aiter(events))
    assert await anext(scrub) is events[0]


async def _aiter(events: list[Event]) -> EventSource:
    for event in events:
        yield event

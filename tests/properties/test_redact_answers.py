"""However a stream's events split its text, the carry-over window never lets more than the
first HOLD_FROM - 1 characters of a secret out, and a stream without one comes out exactly
as it went in: same events, same order, same text."""

from __future__ import annotations

import asyncio

import orjson
from hypothesis import given
from hypothesis import strategies as st

from levergate.core.reply import Event, EventSource
from levergate.redact import Redactor
from levergate.redact_answers import HOLD_FROM, AnswerScrubber, texts

KEY = "sk-test-0123456789abcdefXYZ"
SCRUB = AnswerScrubber(Redactor([KEY]))
# Filler that often begins the key (s, k, -, t, e) but never holds its tail's digits.
FILLER = st.text(alphabet='sk-te xyz\n"', max_size=30)


def chunk(content: str) -> Event:
    return Event(orjson.dumps({"choices": [{"index": 0, "delta": {"content": content}}]}))


async def scrubbed(parts: list[str]) -> tuple[list[Event], list[Event]]:
    events = [chunk(p) for p in parts]

    async def source() -> EventSource:
        for event in events:
            yield event

    return events, [e async for e in SCRUB.stream(source())]


def split(text: str, cuts: list[int]) -> list[str]:
    at = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *at], [*at, len(text)], strict=True)]


def joined(events: list[Event]) -> str:
    return "".join(t for e in events for _, _, t in texts(e.json()))


@given(before=FILLER, after=FILLER, with_key=st.booleans(),
       cuts=st.lists(st.integers(0, 200), max_size=12))  # fmt: skip
def test_the_window_cuts_secrets_and_nothing_else(
    before: str, after: str, with_key: bool, cuts: list[int]
) -> None:
    text = before + (KEY if with_key else "") + after
    events, out = asyncio.run(scrubbed(split(text, cuts)))
    assert len(out) == len(events)
    if not with_key:
        assert all(a is b for a, b in zip(out, events, strict=True))
        return
    got = joined(out)
    assert KEY[HOLD_FROM - 1 :] not in got
    assert got.startswith(before)
    assert got.endswith("[redacted]" + after)

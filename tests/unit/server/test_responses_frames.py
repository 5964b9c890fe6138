"""The Responses SSE framing: `event: <type>` from the event, one data line, and a failure after
the head ends the stream with an `error` event numbered after the last one sent."""

from __future__ import annotations

from typing import Any

import orjson

from levergate.core.reply import Event, EventSource, Stream
from levergate.errors import UpstreamUnavailable
from levergate.protocol.sse import SSEDecoder
from levergate.server.handlers.responses import _frames, frame


def test_the_event_name_is_its_type() -> None:
    event = Event(b'{"type":"response.output_text.delta","delta":"hi","sequence_number":3}')
    assert frame(event) == b"event: response.output_text.delta\ndata: " + event.data + b"\n\n"
    spaced = Event(b'{ "sequence_number": 1, "type": "response.created" }')
    assert frame(spaced).startswith(b"event: response.created\n")


def test_multi_line_data_from_an_upstream_becomes_one_line() -> None:
    event = Event(b'{"type":"response.created",\n"sequence_number":0}')
    wire = frame(event)
    assert SSEDecoder().feed(wire) == [b'{"type":"response.created","sequence_number":0}']


def test_no_event_name_without_a_usable_type() -> None:
    assert frame(Event(b'{"a":1}')) == b'data: {"a":1}\n\n'
    assert frame(Event(b'{"type":"x\\ny"}')).startswith(b"data: ")


async def test_a_failure_after_the_head_ends_with_an_error_event() -> None:
    async def source() -> EventSource:
        yield Event.of({"type": "response.in_progress", "sequence_number": 1})
        raise UpstreamUnavailable("cut", code="stream_interrupted")

    opening = [Event.of({"type": "response.created", "sequence_number": 0})]
    frames = [f async for f in _frames(Stream(source()), opening)]
    events: list[dict[str, Any]] = [orjson.loads(d) for f in frames for d in SSEDecoder().feed(f)]
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1]["code"] == "stream_interrupted"
    assert events[-1]["sequence_number"] == 2
    assert frames[-1].startswith(b"event: error\n")

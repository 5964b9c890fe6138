"""The SSE decoder must give the same events however the bytes are split."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.protocol.sse import EventTooLarge, SSEDecoder, encode

payloads = st.lists(
    st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
    max_size=12,
)


@given(payloads, st.lists(st.integers(min_value=0, max_value=400), max_size=10), st.booleans())
def test_any_split_yields_the_same_events(events: list[bytes], cuts: list[int], crlf: bool) -> None:
    wire = b"".join(encode(e) for e in events)
    if crlf:
        wire = wire.replace(b"\n", b"\r\n")
    points = sorted({min(c, len(wire)) for c in cuts})
    pieces = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]
    decoder = SSEDecoder()
    seen = [event for piece in pieces for event in decoder.feed(piece)]
    assert seen == events
    assert decoder.pending == b""


def test_comments_and_other_fields_are_dropped_and_multiline_data_joined() -> None:
    decoder = SSEDecoder()
    wire = b": keep-alive\n\nevent: message\ndata: a\ndata: b\nid: 7\n\ndata: c\n\n"
    assert decoder.feed(wire) == [b"a\nb", b"c"]


def test_an_unterminated_event_stays_pending() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n\ndata: {"b"') == [b'{"a":1}']
    assert decoder.pending == b'data: {"b"'


def _pieces(wire: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(wire)) for c in cuts})
    return [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]


@given(
    payloads,
    st.lists(st.integers(min_value=0, max_value=400), max_size=10),
    st.booleans(),
    st.integers(min_value=8, max_value=40),
)
def test_the_event_cap_refuses_exactly_the_events_over_it_and_bounds_what_is_held(
    events: list[bytes], cuts: list[int], crlf: bool, limit: int
) -> None:
    wire = b"".join(encode(e) for e in events)
    if crlf:
        wire = wire.replace(b"\n", b"\r\n")
    decoder = SSEDecoder(max_event_bytes=limit)
    seen: list[bytes] = []
    refused = False
    try:
        for piece in _pieces(wire, cuts):
            seen += decoder.feed(piece)
            # Held: at most the event's text, one LF of its terminator and a CR split off.
            assert decoder.pending_bytes <= limit + 2
    except EventTooLarge:
        refused = True
    too_large = [len(b"data: " + e) > limit for e in events]
    assert refused == any(too_large)
    fitting = too_large.index(True) if refused else len(events)
    assert seen == events[: len(seen)]
    assert len(seen) <= fitting


def test_an_unterminated_event_fed_in_small_chunks_is_refused_at_the_cap() -> None:
    decoder = SSEDecoder(max_event_bytes=64 * 1024)
    decoder.feed(b"data: ")
    fed = 0
    while decoder.pending_bytes <= 64 * 1024 - 1024:
        decoder.feed(b"x" * 1024)
        fed += 1
    with pytest.raises(EventTooLarge):
        decoder.feed(b"x" * 1024)
    assert fed == 63
    assert decoder.pending_bytes <= 65 * 1024 + 6


def test_an_event_split_across_many_chunks_is_joined_once() -> None:
    decoder = SSEDecoder()
    wire = b"data: " + b"y" * 100_000 + b"\r\n\r\n"
    seen = [event for i in range(0, len(wire), 7) for event in decoder.feed(wire[i : i + 7])]
    assert seen == [b"y" * 100_000]
    assert decoder.pending == b""

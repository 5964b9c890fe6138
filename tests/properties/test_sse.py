"""The SSE decoder must give the same events however the bytes are split."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from levergate.protocol.sse import SSEDecoder, encode

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

"""The transport under uvicorn that sends a response's head with its first body bytes."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from levergate.server.http_protocol import _HeadWithBody

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"


class Recording(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True


def test_a_head_goes_out_with_the_first_body_write() -> None:
    real = Recording()
    transport = _HeadWithBody(real)
    transport.write(HEAD)
    assert real.writes == []
    transport.write(b"{}")
    assert real.writes == [HEAD + b"{}"]


def test_an_interim_head_goes_out_at_once() -> None:
    real = Recording()
    transport = _HeadWithBody(real)
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert real.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


def test_a_whole_response_in_one_write_is_not_held() -> None:
    real = Recording()
    transport = _HeadWithBody(real)
    whole = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 7\r\n\r\nInvalid"
    transport.write(whole)
    assert real.writes == [whole]


def test_a_large_body_follows_the_head_rather_than_being_copied() -> None:
    real = Recording()
    transport = _HeadWithBody(real)
    body = b"x" * (1 << 20)
    transport.write(HEAD)
    transport.write(body)
    assert real.writes == [HEAD, body]


def test_closing_flushes_a_held_head() -> None:
    real = Recording()
    transport = _HeadWithBody(real)
    transport.write(HEAD)
    transport.close()
    assert real.writes == [HEAD]
    assert real.closed


writes = st.lists(
    st.one_of(
        st.just(HEAD),
        st.just(b"HTTP/1.1 100 Continue\r\n\r\n"),
        st.binary(max_size=64),
        st.binary(min_size=70_000, max_size=70_001),
    ),
    max_size=8,
)


@given(writes)
def test_nothing_is_lost_or_reordered(chunks: list[bytes]) -> None:
    real = Recording()
    transport = _HeadWithBody(real)
    for chunk in chunks:
        transport.write(chunk)
    transport.close()
    assert b"".join(real.writes) == b"".join(chunks)

"""The transport under uvicorn: a response's head goes out with its first body bytes, and a
stream's later chunks leave as one write per turn of the event loop."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from levergate.server.http_protocol import _Coalescing

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"
INTERIM = b"HTTP/1.1 100 Continue\r\n\r\n"


class Recording(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


async def next_turn() -> None:
    await asyncio.sleep(0)


async def test_a_whole_answer_is_one_write_at_once() -> None:
    real = Recording()
    transport = _Coalescing(real)
    transport.write(HEAD)
    assert real.writes == []
    transport.write(b"{}")
    assert real.writes == [HEAD + b"{}"]


async def test_a_streams_later_chunks_leave_together_at_the_end_of_the_turn() -> None:
    real = Recording()
    transport = _Coalescing(real)
    transport.write(HEAD)
    transport.write(b"first")
    transport.write(b"second")
    transport.write(b"third")
    assert real.writes == [HEAD + b"first"]
    await next_turn()
    assert real.writes == [HEAD + b"first", b"secondthird"]
    transport.write(b"fourth")
    await next_turn()
    assert real.writes[-1] == b"fourth"


async def test_an_interim_head_is_not_held_for_a_body() -> None:
    real = Recording()
    transport = _Coalescing(real)
    transport.write(INTERIM)
    await next_turn()
    assert real.writes == [INTERIM]


async def test_a_large_body_follows_the_head_rather_than_being_copied() -> None:
    real = Recording()
    transport = _Coalescing(real)
    body = b"x" * (1 << 20)
    transport.write(HEAD)
    transport.write(body)
    assert real.writes == [HEAD, body]


async def test_closing_sends_what_is_held_and_collected_in_order() -> None:
    real = Recording()
    transport = _Coalescing(real)
    transport.write(b"tail of the last answer")
    transport.write(HEAD)
    transport.close()
    assert real.writes == [b"tail of the last answer", HEAD]
    assert real.closed


async def test_a_new_answer_never_overtakes_the_tail_of_the_last() -> None:
    real = Recording()
    transport = _Coalescing(real)
    transport.write(b"0\r\n\r\n")  # the end of a chunked answer, collected
    transport.write(HEAD)
    transport.write(b"{}")
    assert real.writes == [b"0\r\n\r\n", HEAD + b"{}"]


writes = st.lists(
    st.tuples(
        st.one_of(st.just(HEAD), st.just(INTERIM), st.binary(max_size=64), st.just(b"y" * 70_000)),
        st.booleans(),  # end the loop turn after this write
    ),
    max_size=10,
)


@given(writes)
def test_nothing_is_lost_or_reordered(chunks: list[tuple[bytes, bool]]) -> None:
    async def scenario() -> list[bytes]:
        real = Recording()
        transport = _Coalescing(real)
        for chunk, turn in chunks:
            transport.write(chunk)
            if turn:
                await next_turn()
        transport.close()
        return real.writes

    assert b"".join(asyncio.run(scenario())) == b"".join(chunk for chunk, _ in chunks)

"""The transport under a connection's writes: a stream's chunks leave as one write per turn of
the event loop, a large chunk and what must leave at once go after what is gathered."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from levergate.server.http_writes import Coalescing

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


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


async def test_a_streams_chunks_leave_together_at_the_end_of_the_turn() -> None:
    real = Recording()
    transport = Coalescing(real)
    transport.write_now(HEAD + b"first")
    transport.write(b"second")
    transport.write(b"third")
    assert real.writes == [HEAD + b"first"]
    await next_turn()
    assert real.writes == [HEAD + b"first", b"secondthird"]
    transport.write(b"fourth")
    await next_turn()
    assert real.writes[-1] == b"fourth"


async def test_closing_sends_what_is_collected_first() -> None:
    real = Recording()
    transport = Coalescing(real)
    transport.write(b"tail of the last answer")
    transport.close()
    assert real.writes == [b"tail of the last answer"]
    assert real.closed


async def test_a_new_answer_never_overtakes_the_tail_of_the_last() -> None:
    real = Recording()
    transport = Coalescing(real)
    transport.write(b"0\r\n\r\n")  # the end of a chunked answer, collected
    transport.write_now(HEAD + b"{}")
    assert real.writes == [b"0\r\n\r\n", HEAD + b"{}"]


writes = st.lists(
    st.tuples(
        st.one_of(st.binary(max_size=64), st.just(b"y" * 70_000)),
        st.booleans(),  # written at once
        st.booleans(),  # end the loop turn after this write
    ),
    max_size=10,
)


@given(writes)
def test_nothing_is_lost_or_reordered(chunks: list[tuple[bytes, bool, bool]]) -> None:
    async def scenario() -> list[bytes]:
        real = Recording()
        transport = Coalescing(real)
        for chunk, now, turn in chunks:
            (transport.write_now if now else transport.write)(chunk)
            if turn:
                await next_turn()
        transport.close()
        return real.writes

    assert b"".join(asyncio.run(scenario())) == b"".join(chunk for chunk, _, _ in chunks)


async def test_a_large_chunk_of_a_body_is_written_at_once_so_flow_control_sees_it() -> None:
    # A large answer sent in chunks: gathered to the end of the turn, all of it would have been
    # joined into one write, and the wait for a slow reader (it pauses when the socket's buffer
    # fills) would never have seen the buffer fill.
    real = Recording()
    transport = Coalescing(real)
    transport.write_now(HEAD + b"small")
    transport.write(b"x" * 100_000)
    transport.write(b"y" * 100_000)
    assert real.writes == [HEAD + b"small", b"x" * 100_000, b"y" * 100_000]
    transport.write(b"tail")
    await next_turn()
    assert real.writes[-1] == b"tail"

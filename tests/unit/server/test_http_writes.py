"""The transport under uvicorn: a response's head goes out with its first body bytes, and a
stream's later chunks leave as one write per turn of the event loop."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from levergate.server.http_writes import Coalescing, HeadOnly, Unchunked, unframe

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
    transport = Coalescing(real)
    transport.write(HEAD)
    assert real.writes == []
    transport.write(b"{}")
    assert real.writes == [HEAD + b"{}"]


async def test_a_streams_later_chunks_leave_together_at_the_end_of_the_turn() -> None:
    real = Recording()
    transport = Coalescing(real)
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
    transport = Coalescing(real)
    transport.write(INTERIM)
    await next_turn()
    assert real.writes == [INTERIM]


async def test_a_large_body_follows_the_head_rather_than_being_copied() -> None:
    real = Recording()
    transport = Coalescing(real)
    body = b"x" * (1 << 20)
    transport.write(HEAD)
    transport.write(body)
    assert real.writes == [HEAD, body]


async def test_closing_sends_what_is_held_and_collected_in_order() -> None:
    real = Recording()
    transport = Coalescing(real)
    transport.write(b"tail of the last answer")
    transport.write(HEAD)
    transport.close()
    assert real.writes == [b"tail of the last answer", HEAD]
    assert real.closed


async def test_a_new_answer_never_overtakes_the_tail_of_the_last() -> None:
    real = Recording()
    transport = Coalescing(real)
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
        transport = Coalescing(real)
        for chunk, turn in chunks:
            transport.write(chunk)
            if turn:
                await next_turn()
        transport.close()
        return real.writes

    assert b"".join(asyncio.run(scenario())) == b"".join(chunk for chunk, _ in chunks)


async def test_a_head_with_an_empty_body_to_come_leaves_with_that_empty_write() -> None:
    # 204, 304, content-length: 0 and more_body=False with no bytes: uvicorn writes b"" next.
    for head in (b"HTTP/1.1 204 No Content\r\n\r\n", HEAD.replace(b": 2\r\n", b": 0\r\n")):
        real = Recording()
        transport = Coalescing(real)
        transport.write(head)
        transport.write(b"")
        assert real.writes == [head]


async def test_a_head_only_answer_is_written_at_once_after_what_was_collected() -> None:
    real = Recording()
    transport = Coalescing(real)
    transport.write(b"0\r\n\r\n")  # the end of the last answer, collected
    HeadOnly(transport).write(HEAD)
    assert real.writes == [b"0\r\n\r\n", HEAD]


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def uvicorn_chunk(body: bytes, *, more: bool) -> bytes:
    """One body message as uvicorn writes it in chunked mode (httptools_impl.send)."""
    framed = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
    return framed if more else framed + b"0\r\n\r\n"


@given(st.lists(st.binary(max_size=100), max_size=6), st.binary(max_size=20))
def test_an_http_1_0_answer_carries_the_bodies_without_chunked_framing(
    bodies: list[bytes], last: bytes
) -> None:
    async def scenario() -> bytes:
        real = Recording()
        writes = Coalescing(real)
        transport = Unchunked(writes)
        transport.write(CHUNKED_HEAD)
        for body in bodies:
            transport.write(uvicorn_chunk(body, more=True))
        transport.write(uvicorn_chunk(last, more=False))
        writes.close()
        return b"".join(real.writes)

    sent = asyncio.run(scenario())
    head = CHUNKED_HEAD.replace(b"transfer-encoding: chunked\r\n", b"")
    assert sent == head + b"".join(bodies) + last


async def test_an_http_1_0_answer_with_a_length_is_left_as_it_is() -> None:
    real = Recording()
    transport = Unchunked(Coalescing(real))
    transport.write(INTERIM)
    transport.write(HEAD)
    transport.write(b"0\r")  # a body that only looks like framing
    assert b"".join(real.writes) == INTERIM + HEAD + b"0\r"


def test_unframe_reads_one_chunk_and_the_last_chunk() -> None:
    assert unframe(b"5\r\nhello\r\n") == b"hello"
    assert unframe(b"5\r\nhello\r\n0\r\n\r\n") == b"hello"
    assert unframe(b"0\r\n\r\n") == b""
    assert unframe(b"") == b""


async def test_a_large_chunk_of_a_body_is_written_at_once_so_flow_control_sees_it() -> None:
    # A large answer sent in chunks: gathered to the end of the turn, all of it would have been
    # joined into one write, and uvicorn's wait for a slow reader (it pauses when the socket's
    # buffer fills) would never have seen the buffer fill.
    real = Recording()
    transport = Coalescing(real)
    transport.write(HEAD)
    transport.write(b"small")
    transport.write(b"x" * 100_000)
    transport.write(b"y" * 100_000)
    assert real.writes == [HEAD + b"small", b"x" * 100_000, b"y" * 100_000]
    transport.write(b"tail")
    await next_turn()
    assert real.writes[-1] == b"tail"

"""One request and its answer as the gateway's HTTP protocol serves them (server.http_cycle):
the head written by the gateway itself, in one write with the body, and never with a header
that could split the response."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from uvicorn.protocols.http.flow_control import FlowControl

from levergate.config import Settings
from levergate.errors import BadRequest, PayloadTooLarge
from levergate.gateway import Gateway
from levergate.server.asgi import App
from levergate.server.exchange import Response
from levergate.server.http_cycle import Connection, Cycle, UnsafeHeader, encode_head
from levergate.server.http_writes import Coalescing

from .test_http_writes import Recording, next_turn

JSON = [("content-type", "application/json")]


class Wire:
    """A connection's transport and the answers it saw completed."""

    def __init__(self) -> None:
        self.real = Recording()
        self.completed = 0
        self.connection = Connection(Coalescing(self.real), FlowControl(self.real),
                                     self.done, ("127.0.0.1", 5))  # fmt: skip

    def done(self) -> None:
        self.completed += 1

    def cycle(self, method: str = "POST", headers: dict[str, str] | None = None) -> Cycle:
        return Cycle(self.connection, method, "/v1/chat/completions", "", headers or {})

    @property
    def sent(self) -> bytes:
        return b"".join(self.real.writes)


async def frames(*chunks: bytes) -> AsyncGenerator[bytes, None]:
    for chunk in chunks:
        yield chunk


async def test_a_whole_answer_is_one_write_with_its_length() -> None:
    wire = Wire()
    await wire.cycle().respond(Response(200, [*JSON, ("x-request-id", "abc")], b"{}"))
    assert wire.real.writes == [
        (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: abc\r\n"
         b"content-length: 2\r\n\r\n{}")
    ]  # fmt: skip
    assert wire.completed == 1
    assert not wire.real.closed


async def test_an_answer_with_no_headers_still_has_one_blank_line() -> None:
    wire = Wire()
    await wire.cycle().respond(Response(201))
    assert wire.sent == b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n"


@pytest.mark.parametrize("bad", ["a\r\nset-cookie: x=1", "a\nb", "a\rb", "a\x00b", "a\x7fb"])
async def test_a_header_that_would_split_the_answer_is_never_written(bad: str) -> None:
    wire = Wire()
    with pytest.raises(UnsafeHeader):
        await wire.cycle().respond(Response(200, [*JSON, ("x-ratelimit-remaining", bad)], b"{}"))
    with pytest.raises(UnsafeHeader):
        await wire.cycle().respond(Response(200, [*JSON, (f"x-{bad}", "1")], b"{}"))
    assert wire.real.writes == []
    assert wire.completed == 0


@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(max_size=12)), max_size=6))
def test_the_head_carries_every_header_as_one_line_or_is_refused(
    headers: list[tuple[str, str]],
) -> None:
    try:
        head = encode_head(200, headers, "content-length: 0\r\n")
    except (UnsafeHeader, UnicodeEncodeError):
        assert any(
            any(c in "\r\n" or (ord(c) < 32 and c != "\t") or c == "\x7f" for c in n + v)
            or any(ord(c) > 255 for c in n + v)
            for n, v in headers
        )
        return
    lines = head.split(b"\r\n")
    assert lines[1 : 1 + len(headers)] == [f"{n}: {v}".encode("latin-1") for n, v in headers]
    assert lines[1 + len(headers) :] == [b"content-length: 0", b"", b""]
    assert head.count(b"\r\n\r\n") == 1


async def test_a_tab_in_a_value_is_written() -> None:
    wire = Wire()
    await wire.cycle().respond(Response(200, [("x-note", "a\tb")], b""))
    assert b"x-note: a\tb\r\n" in wire.sent


async def test_a_stream_is_chunked_and_its_head_leaves_with_the_first_chunk() -> None:
    wire = Wire()
    cycle = wire.cycle()
    await cycle.respond(Response(200, [("content-type", "text/event-stream")],
                                 stream=frames(b"data: 1\n\n", b"", b"data: 2\n\n")))  # fmt: skip
    assert wire.real.writes[0] == (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked"
        b"\r\n\r\n9\r\ndata: 1\n\n\r\n"
    )
    await next_turn()
    assert wire.real.writes[1:] == [b"9\r\ndata: 2\n\n\r\n0\r\n\r\n"]
    assert wire.completed == 1


async def test_an_http_1_0_client_gets_the_stream_bare_then_the_close() -> None:
    wire = Wire()
    cycle = wire.cycle()
    cycle.unchunked, cycle.keep_alive = True, False
    await cycle.respond(Response(200, [], stream=frames(b"one", b"two")))
    assert wire.sent == b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nonetwo"
    assert wire.real.closed


async def test_a_file_is_sent_with_its_length_and_a_short_one_fails() -> None:
    wire = Wire()
    await wire.cycle().respond(Response(200, [], stream=frames(b"abc", b"de"), length=5))
    await next_turn()
    assert wire.sent == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nabcde"
    with pytest.raises(RuntimeError, match="shorter"):
        await wire.cycle().respond(Response(200, [], stream=frames(b"abc"), length=5))


async def test_a_head_request_gets_the_head_alone() -> None:
    wire = Wire()
    await wire.cycle("HEAD").respond(Response(200, JSON, b"{}"))
    pulled: list[bytes] = []

    async def never() -> AsyncGenerator[bytes, None]:
        pulled.append(b"pulled")
        yield b"never"

    await wire.cycle("HEAD").respond(Response(200, [], stream=never(), length=5))
    assert wire.real.writes == [
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
    ]
    assert pulled == []


async def test_nothing_is_written_for_a_client_that_has_gone() -> None:
    wire = Wire()
    cycle = wire.cycle()
    cycle.lose()
    await cycle.respond(Response(200, JSON, b"{}"))
    await cycle.respond(Response(200, [], stream=frames(b"x")))
    assert wire.real.writes == []
    assert wire.completed == 0


async def test_a_body_arriving_in_parts_is_read_whole_after_100_continue() -> None:
    wire = Wire()
    cycle = wire.cycle(headers={"content-length": "6", "expect": "100-continue"})
    cycle.waiting_for_100_continue = True
    reading = asyncio.create_task(cycle.read(limit=10))
    await next_turn()
    assert wire.real.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    cycle.received(b"abc")
    await next_turn()
    cycle.received(b"def")
    cycle.ended_body()
    assert await reading == b"abcdef"


async def test_a_body_over_the_limit_is_413_as_it_arrives() -> None:
    wire = Wire()
    cycle = wire.cycle()
    reading = asyncio.create_task(cycle.read(limit=4))
    await next_turn()
    cycle.received(b"abcde")
    with pytest.raises(PayloadTooLarge):
        await reading
    declared = wire.cycle(headers={"content-length": "5"})
    with pytest.raises(PayloadTooLarge):
        await declared.read(limit=4)


async def test_a_body_all_there_is_held_to_the_limit_by_its_length() -> None:
    """`arrived` checks the declared content-length only while more is due; a body all there
    (its framing made it the declared length) is refused by its own length, as before."""
    wire = Wire()
    whole = wire.cycle(headers={"content-length": "5"})
    whole.received(b"abcde")
    whole.ended_body()
    with pytest.raises(PayloadTooLarge):
        whole.arrived(limit=4)
    fits = wire.cycle(headers={"content-length": "4"})
    fits.received(b"abcd")
    fits.ended_body()
    assert fits.arrived(limit=4) == b"abcd"
    due = wire.cycle(headers={"content-length": "5"})
    due.received(b"ab")  # more is due: the declared length is refused before it arrives
    with pytest.raises(PayloadTooLarge):
        due.arrived(limit=4)


async def test_a_body_cut_by_the_client_going_away_is_incomplete() -> None:
    wire = Wire()
    cycle = wire.cycle()
    body = cycle.chunks(limit=100)
    cycle.received(b"abc")
    assert await anext(body) == b"abc"
    waiting = asyncio.ensure_future(anext(body))
    await next_turn()
    cycle.lose()
    with pytest.raises(BadRequest, match="ended before"):
        await waiting


async def test_a_lost_client_cancels_a_handler_that_has_run_long_enough() -> None:
    wire = Wire()
    cycle = wire.cycle()
    cycle.after = 0.05
    cycle.body_done = True

    async def handler() -> None:
        await asyncio.sleep(10)

    cycle.handler = asyncio.create_task(handler())
    cycle.started = time.perf_counter()
    cycle.lose()
    await next_turn()
    assert not cycle.handler.done()  # not before `after`
    with pytest.raises(asyncio.CancelledError):
        await cycle.handler
    assert cycle.cut_short


async def test_a_request_task_leaves_the_servers_set_as_it_ends() -> None:
    """`App.serve` takes its own task out of the server's running set (which a graceful
    shutdown waits to empty) as it ends, with no done callback: answered or failed."""
    wire = Wire()
    app = App(Gateway(Settings.for_upstream("http://127.0.0.1:9/v1")))
    for path in ("/nope", "/v1/chat/completions"):  # a 404, a 400 (no body)
        cycle = Cycle(wire.connection, "POST", path, "", {})
        cycle.ended_body()
        task = asyncio.get_running_loop().create_task(app.serve(cycle))
        cycle.handler = task
        wire.connection.tasks.add(task)
        await task
        assert not wire.connection.tasks
    assert wire.completed == 2
    assert wire.sent.startswith(b"HTTP/1.1 404")
    assert b"HTTP/1.1 400" in wire.sent

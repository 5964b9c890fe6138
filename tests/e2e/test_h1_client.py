"""The cleartext upstream client against real sockets: keep-alive reuse, chunked and
close-delimited bodies, stale pooled connections, cut bodies, refusals and the pool bound, a
body that came with its head taken whole."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Protocol

import pytest

from levergate.config import PoolSettings, ResponseLimitsSettings, UpstreamSettings
from levergate.core.call import Call, Context
from levergate.errors import UpstreamUnavailable
from levergate.upstreams.h1 import H1Client
from levergate.upstreams.http import OpenAIUpstream
from levergate.upstreams.wire import TransportFailed

Script = Callable[[int, int], bytes | None]  # (connection no., request no.) -> reply; None: close

OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'


class Server:
    """Answers each request on each connection as `script` says, and counts connections."""

    def __init__(self, script: Script, *, delay: float = 0.0) -> None:
        self.script = script
        self.delay = delay
        self.connections = 0
        self.open = 0
        self.most_open = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.connections
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            for request in range(1000):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                await asyncio.sleep(self.delay)
                reply = self.script(number, request)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if b"connection: close" in reply.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


class Serve(Protocol):
    """The `serve` fixture: starts a `Server` on a free port, returns it and its base URL."""

    async def __call__(self, script: Script, *, delay: float = 0.0) -> tuple[Server, str]: ...


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[asyncio.Server] = []

    async def start(script: Script, *, delay: float = 0.0) -> tuple[Server, str]:
        state = Server(script, delay=delay)
        server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return state, f"http://127.0.0.1:{port}/v1"

    yield start
    for server in servers:
        server.close()


def client_for(url: str, *, pool: PoolSettings | None = None) -> H1Client:
    return H1Client(UpstreamSettings(name="t", base_url=url, pool=pool or PoolSettings()))


async def fetch(client: H1Client, url: str) -> tuple[int, bytes]:
    response = await client.request("POST", url + "/chat/completions", body=b"{}", headers={})
    return response.status, await response.read()


async def test_keep_alive_connections_are_reused(serve: Serve) -> None:
    state, url = await serve(lambda c, r: OK)
    client = client_for(url)
    for _ in range(5):
        assert await fetch(client, url) == (200, b'{"ok":true}')
    assert state.connections == 1
    await client.aclose()


async def test_chunked_bodies_stream_and_close_delimited_bodies_end_with_the_socket(
    serve: Serve,
) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n"
        b"5\r\ndata:\r\n3\r\n 1\n\r\n0\r\n\r\n"
    )
    closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end"
    state, url = await serve(lambda c, r: chunked if r == 0 else closing)
    client = client_for(url)
    response = await client.request("POST", url + "/x", body=b"{}", headers={})
    assert response.headers["content-type"] == "text/event-stream"
    assert b"".join([chunk async for chunk in response.chunks()]) == b"data: 1\n"
    assert await fetch(client, url) == (200, b"until the end")
    assert await fetch(client, url) == (200, b"data: 1\n")  # a new connection after the close
    assert state.connections == 2
    await client.aclose()


async def test_a_pooled_connection_the_server_closed_is_replaced_transparently(
    serve: Serve,
) -> None:
    # The first connection answers once, then closes instead of answering the second request.
    state, url = await serve(lambda c, r: OK if (c, r) != (0, 1) else None)
    client = client_for(url)
    assert (await fetch(client, url))[0] == 200
    assert (await fetch(client, url))[0] == 200
    assert state.connections == 2
    await client.aclose()


async def test_a_cut_body_and_a_refused_connection_raise_transport_failed(
    serve: Serve,
) -> None:
    cut = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\nconnection: close\r\n\r\nonly this"
    _, url = await serve(lambda c, r: cut)
    client = client_for(url)
    with pytest.raises(TransportFailed):
        await fetch(client, url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    refused = client_for(closed)
    with pytest.raises(TransportFailed):
        await fetch(refused, closed)
    await client.aclose()
    await refused.aclose()


async def test_the_pool_never_opens_more_than_its_limit(serve: Serve) -> None:
    state, url = await serve(lambda c, r: OK, delay=0.02)
    client = client_for(url, pool=PoolSettings(max_connections=2))
    results = await asyncio.gather(*(fetch(client, url) for _ in range(8)))
    assert all(status == 200 for status, _ in results)
    assert state.most_open <= 2
    await client.aclose()


async def test_an_abandoned_body_closes_its_connection(serve: Serve) -> None:
    endless = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"
    state, url = await serve(lambda c, r: endless if c == 0 else OK)
    client = client_for(url)
    response = await client.request("POST", url + "/x", body=b"{}", headers={})
    chunks = response.chunks()
    assert isinstance(chunks, AsyncGenerator)  # so it can be closed before its end
    assert await anext(chunks) == b"hello"
    await chunks.aclose()
    assert await fetch(client, url) == (200, b'{"ok":true}')
    assert state.connections == 2
    await client.aclose()


async def test_url_credentials_travel_as_basic_auth_never_in_the_host_header() -> None:
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(OK)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://user:pa%3Ass@127.0.0.1:{port}/v1"
    client = client_for(url)
    assert await fetch(client, url) == (200, b'{"ok":true}')
    await client.aclose()
    server.close()
    head = heads[0].decode("latin-1").lower()
    assert f"host: 127.0.0.1:{port}\r\n" in head
    assert "pa" not in head.split("host: ")[1].split("\r\n")[0]
    assert "authorization: basic dxnlcjpwytpzcw==" in head  # base64("user:pa:ss")


async def test_a_large_body_is_written_in_slices_as_the_server_reads_it() -> None:
    """A 24 MiB body (a Responses conversation's size, the soak: issue 20) to a server that reads
    it slowly: the client's transport never holds more than a slice past its high-water mark
    (joined behind its head and written at once, it held the body's unread rest, megabytes),
    the loop keeps turning, and the server gets every byte, in order, then a second request on
    the same connection."""
    body = bytes(range(256)) * (96 << 10)
    got: list[bytes] = []

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            received = bytearray()
            while len(received) < length:
                received += await reader.read(min(256 << 10, length - len(received)))
                await asyncio.sleep(0.002)
            got.append(bytes(received))
            writer.write(OK)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(slow, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    client = client_for(url)
    most, turns = 0, 0

    async def watch() -> None:
        nonlocal most, turns
        while True:
            for conn in client._checked_out:
                if conn.transport is not None:
                    most = max(most, conn.transport.get_write_buffer_size())
            turns += 1
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    try:
        for _ in range(2):
            response = await client.request("POST", url + "/responses", body=body, headers={})
            assert (response.status, await response.read()) == (200, b'{"ok":true}')
    finally:
        watcher.cancel()
        server.close()
        await client.aclose()
    assert got == [body, body]
    assert most <= 1 << 20, most
    assert turns > 100


STRAY = b'HTTP/1.1 200 OK\r\ncontent-length: 14\r\n\r\n{"stray":true}'


async def test_a_second_response_to_one_request_is_not_its_body_and_closes_the_connection(
    serve: Serve,
) -> None:
    """A server that answers one request twice in one write: the request gets the first answer
    alone (before, the parser went on into the second and added its body to the first's), and
    the connection, out of step, is not reused."""
    state, url = await serve(lambda c, r: OK + STRAY if c == 0 else OK)
    client = client_for(url)
    assert await fetch(client, url) == (200, b'{"ok":true}')
    assert await fetch(client, url) == (200, b'{"ok":true}')
    assert state.connections == 2
    assert client.unsolicited == 1
    await client.aclose()


async def test_bytes_on_an_idle_pooled_connection_close_it() -> None:
    """Bytes arriving on a pooled connection no request is waiting on: the client closes it
    (before, it kept it, and a response sent early would answer the next request)."""
    closed = asyncio.Event()
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(OK)
                await writer.drain()
                if connections == 1:
                    await asyncio.sleep(0.05)  # the client has pooled the connection by now
                    writer.write(STRAY)
                    await writer.drain()
                    await reader.read()  # returns b"" once the client closes its end
                    closed.set()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    client = client_for(url)
    try:
        assert await fetch(client, url) == (200, b'{"ok":true}')
        await asyncio.wait_for(closed.wait(), timeout=5)
        assert client.unsolicited == 1
        assert await fetch(client, url) == (200, b'{"ok":true}')
        assert connections == 2
    finally:
        server.close()
        await client.aclose()


async def test_a_body_that_came_with_its_head_is_taken_whole_and_its_connection_pooled(
    serve: Serve,
) -> None:
    """`whole()`: the body of an answer written at once is there with its head; taking it
    releases the connection, which the next request reuses."""
    state, url = await serve(lambda c, r: OK)
    client = client_for(url)
    response = await client.request("POST", url + "/chat/completions", body=b"{}", headers={})
    await asyncio.sleep(0.05)  # on loopback one write is one read; this leaves no doubt
    assert response.whole() == b'{"ok":true}'
    await response.aclose()  # as the upstream's error paths do: releasing twice is harmless
    assert await fetch(client, url) == (200, b'{"ok":true}')
    assert state.connections == 1
    await client.aclose()


async def test_a_body_still_arriving_is_not_whole_and_its_chunks_bring_all_of_it() -> None:
    rest = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r")[0]))
        writer.write(OK[:-4])
        await writer.drain()
        await rest.wait()
        writer.write(OK[-4:])
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    client = client_for(url)
    try:
        response = await client.request("POST", url + "/x", body=b"{}", headers={})
        await asyncio.sleep(0.05)
        assert response.whole() is None
        rest.set()
        assert b"".join([chunk async for chunk in response.chunks()]) == b'{"ok":true}'
    finally:
        server.close()
        await client.aclose()


async def test_an_answer_over_the_body_cap_is_refused_though_it_came_whole(serve: Serve) -> None:
    """The upstream takes a body that came with its head without a wait (`whole()`), and still
    holds it to `response_limits.body_bytes`: chunked (no length to refuse it by up front) and
    complete in one write, 2 KiB against a 1 KiB cap is a 502."""
    body = b'{"x":"' + b"y" * 2048 + b'"}'
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n"
    answer = head + b"\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    _, url = await serve(lambda c, r: answer)
    limits = ResponseLimitsSettings(body_bytes=1024)
    settings = UpstreamSettings(name="t", base_url=url, response_limits=limits)
    upstream = OpenAIUpstream(settings, client=client_for(url))
    call = Call(kind="chat", body={"model": "m", "messages": [{"role": "user", "content": "q"}]},
                ctx=Context(request_id="t"))  # fmt: skip
    with pytest.raises(UpstreamUnavailable) as refused:
        await upstream(call)
    assert refused.value.code == "upstream_response_too_large"
    await upstream.aclose()

"""A connection's requests served one after another by one task (server.http_protocol's
`_serve_in_turn`), each still beginning as in a task of its own: in the server's set of running
tasks only while it runs, with no cancellation left over and no context variable set by the
request before it; the wait between requests never cancelled; the task gone with its
connection."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import uvicorn
from uvicorn.server import ServerState

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.asgi import App
from levergate.server.exchange import Request, Response
from levergate.server.http_protocol import HttpProtocol
from levergate.server.route import Route
from levergate.server.run import limits_for

_LEFT = contextvars.ContextVar[str]("left", default="")
MARGIN = 10.0  # a hang guard only


class Seen:
    """What each request's handler saw of the task it ran in."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []
        self.in_set: list[bool] = []
        self.cancelling: list[int] = []
        self.left: list[str] = []
        self.state = ServerState()
        self.release = asyncio.Event()

    def note(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.append(task)
        self.in_set.append(task in self.state.tasks)
        self.cancelling.append(task.cancelling())
        self.left.append(_LEFT.get())

    def routes(self) -> tuple[Route, ...]:
        async def plain(edge: Any, request: Request) -> Response:
            self.note()
            return Response(200, [("content-type", "application/json")], b"{}")

        async def sets_a_variable(edge: Any, request: Request) -> Response:
            self.note()
            _LEFT.set("set by an earlier request")
            return Response(200, [], b"{}")

        async def leaves_a_cancellation(edge: Any, request: Request) -> Response:
            self.note()
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):  # never taken back (`uncancel`)
                await asyncio.sleep(0)
            return Response(200, [], b"{}")

        async def waits(edge: Any, request: Request) -> Response:
            self.note()
            await self.release.wait()
            return Response(200, [], b"{}")

        return tuple(Route("GET", path, handler) for path, handler in (
            ("/plain", plain), ("/sets", sets_a_variable),
            ("/cancels", leaves_a_cancellation), ("/waits", waits),
        ))  # fmt: skip


@asynccontextmanager
async def serving(seen: Seen, *, watch_after: float = 1.0) -> AsyncIterator[tuple[App, int]]:
    settings = Settings.for_upstream(
        "http://127.0.0.1:9/v1", server={"disconnect_watch_after_seconds": watch_after}
    )
    app = App(Gateway(settings), routes=seen.routes())
    config = uvicorn.Config(app, loop="none", lifespan="off", log_config=None)
    limits = limits_for(settings.server)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: HttpProtocol(config, seen.state, {}, limits=limits, app=app), "127.0.0.1", 0
    )
    try:
        yield app, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> bytes:
    writer.write(b"GET %s HTTP/1.1\r\nhost: x\r\n\r\n" % path.encode())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), MARGIN)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.startswith(b"content-length:"))  # fmt: skip
    await asyncio.wait_for(reader.readexactly(length), MARGIN)
    return head


async def test_one_task_serves_a_connections_requests_each_in_the_set_while_it_runs() -> None:
    seen = Seen()
    async with serving(seen) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(3):
            assert (await ask(reader, writer, "/plain")).startswith(b"HTTP/1.1 200")
            assert not seen.state.tasks  # out of the set as soon as it has answered
        assert len(set(seen.tasks)) == 1
        assert seen.in_set == [True] * 3
        task = seen.tasks[0]
        assert not task.done()  # waiting for the next request
        writer.close()
        await asyncio.wait_for(asyncio.shield(task), MARGIN)  # ends with its connection
    assert not seen.state.tasks


async def test_a_request_that_leaves_a_variable_set_is_the_tasks_last() -> None:
    seen = Seen()
    async with serving(seen) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for path in ("/plain", "/sets", "/plain", "/plain"):
            await ask(reader, writer, path)
        writer.close()
    first, setter, after, later = seen.tasks
    assert first is setter
    assert after is not setter
    assert later is after
    assert setter.done()
    assert seen.left == ["", "", "", ""]  # the next request never sees it


async def test_a_request_that_leaves_a_cancellation_is_the_tasks_last() -> None:
    seen = Seen()
    async with serving(seen) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for path in ("/cancels", "/plain", "/plain"):
            assert (await ask(reader, writer, path)).startswith(b"HTTP/1.1 200")
        writer.close()
    cancelling, after, later = seen.tasks
    assert after is not cancelling
    assert later is after
    assert seen.cancelling == [0, 0, 0]  # every request begins with none requested


async def test_a_request_ended_at_shutdown_is_answered_and_the_connection_served_on() -> None:
    """`App.end_requests` cancels the running request's task (the connection's): the
    cancellation reaches that request (a 503), which takes it back, and the same task serves
    the next request."""
    seen = Seen()
    async with serving(seen) as (app, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /waits HTTP/1.1\r\nhost: x\r\n\r\n")
        while not seen.tasks:
            await asyncio.sleep(0.01)
        assert app.end_requests() == (0, 1)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), MARGIN)
        assert head.startswith(b"HTTP/1.1 503")
        length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
        error = orjson.loads(await reader.readexactly(length))["error"]
        assert error["code"] == "shutting_down"
        assert (await ask(reader, writer, "/plain")).startswith(b"HTTP/1.1 200")
        writer.close()
    waited, after = seen.tasks
    assert after is waited
    assert seen.cancelling == [0, 0]


async def test_a_client_that_goes_away_cancels_its_request_and_ends_the_task() -> None:
    seen = Seen()
    async with serving(seen, watch_after=0.0) as (_, port):  # a lost client cancels at once
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await ask(reader, writer, "/plain")
        writer.write(b"GET /waits HTTP/1.1\r\nhost: x\r\n\r\n")
        while len(seen.tasks) < 2:
            await asyncio.sleep(0.01)
        task = seen.tasks[1]
        assert task is seen.tasks[0]
        writer.close()
        await asyncio.wait_for(asyncio.shield(task), MARGIN)
        assert not task.cancelled()  # the request's own cancellation, taken back
        assert not seen.release.is_set()
    assert not seen.state.tasks

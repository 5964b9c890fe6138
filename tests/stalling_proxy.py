"""A TCP relay on loopback that can be told to stall: the failure of a server that hangs (stopped,
or its network cut) rather than dies. Relaying, it pipes every connection to the real server;
stalled, it keeps every connection open and accepts new ones, but forwards nothing either way
(what arrives is held, not lost) until `resume`. A dead server fails fast; a hung one makes
every caller wait out whatever bounds it has — the case for the timeouts (tests/hung_redis.py
is the same idea for Redis, hung from its first byte)."""

from __future__ import annotations

import asyncio


class StallingProxy:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0

    async def __aenter__(self) -> int:
        """Start relaying; the port to connect to."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._flowing.wait()  # a connection made while stalled hangs before connecting
            up_reader, up_writer = await asyncio.open_connection(*self._target)
            try:
                await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
            finally:
                up_writer.close()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            await self._flowing.wait()
            writer.write(data)
            await writer.drain()
        writer.close()

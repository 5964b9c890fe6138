"""A hung Redis for the fault tests: a loopback server that accepts connections and reads what
is sent but never answers (the failure a dead-server test does not show: every call waits out
its timeout), until `relay` is set, from when new connections are piped to the real Redis."""

from __future__ import annotations

import asyncio

REDIS = ("127.0.0.1", 6379)


class HungRedis:
    """Accepts connections and reads what is sent, answering nothing, until `relay` is set:
    from then on new connections are piped to the real Redis."""

    def __init__(self) -> None:
        self.connections = 0
        self.relay = False
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if not self.relay:
                while await reader.read(65536):
                    pass
                return
            up_reader, up_writer = await asyncio.open_connection(*REDIS)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def connected(self, count: int) -> None:
        """Until `count` connections have been made (a trial call is then in flight)."""
        while self.connections < count:
            await asyncio.sleep(0.001)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()

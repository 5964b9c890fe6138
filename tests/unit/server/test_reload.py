"""The reloader: SIGHUP storms coalesce into at most one more reload, a refused file leaves the
serving gateway in place, and a swapped-out gateway is closed once nothing runs on it."""

from __future__ import annotations

import asyncio

import pytest

from levergate.config import Settings
from levergate.errors import ConfigError
from levergate.gateway import Gateway
from levergate.server.asgi import App

UPSTREAM = "http://127.0.0.1:9/v1"


async def test_a_storm_of_signals_is_at_most_one_more_reload() -> None:
    loads = 0

    def load() -> Settings:
        nonlocal loads
        loads += 1
        return Settings.for_upstream(UPSTREAM)

    app = App(gateway(), load=load)
    assert app.reloader is not None
    first = app.gateway
    await first.start()
    # Signals before a reload has read the file are all answered by that reload.
    for _ in range(100):
        app.reloader.signal()
    assert app.reloader._signalled is not None
    await app.reloader._signalled
    assert loads == 1
    # Signals while one runs (here: waits its turn behind an admin reload) are one more.
    async with app.reloader._lock:
        app.reloader.signal()
        for _ in range(5):
            await asyncio.sleep(0)  # the signalled reload now waits for the lock
        for _ in range(99):
            app.reloader.signal()
    await app.reloader._signalled
    assert loads == 3
    assert app.reloader.reloads == 3
    assert app.gateway is not first
    await app.reloader.aclose()
    assert not first.ready  # retired: closed once nothing ran on it
    await app.gateway.aclose()


async def test_a_refused_file_keeps_the_serving_gateway() -> None:
    def load() -> Settings:
        return Settings.load(traffic={"max_queue": 0})

    app = App(gateway(), load=load)
    assert app.reloader is not None
    serving = app.gateway
    await serving.start()
    with pytest.raises(ConfigError, match=r"traffic\.max_queue"):
        await app.reloader.reload()
    assert app.gateway is serving
    assert serving.ready
    app.reloader.signal()  # the same through a signal: logged, not raised
    assert app.reloader._signalled is not None
    await app.reloader._signalled
    assert app.gateway is serving
    assert app.reloader.reloads == 0
    await asyncio.gather(app.reloader.aclose(), serving.aclose())


def gateway() -> Gateway:
    return Gateway(Settings.for_upstream(UPSTREAM))

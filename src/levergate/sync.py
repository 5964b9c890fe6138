"""`SyncGateway`: the library for scripts and notebooks, without `await`.

    from levergate import Settings
    from levergate.sync import SyncGateway

    with SyncGateway(Settings.for_upstream("http://127.0.0.1:8000/v1")) as gw:
        gw.chat(model="m", messages=[{"role": "user", "content": "hi"}])
        gw.map(prompts, model="m", max_concurrency=16, bar=True)

One event loop on a thread of its own runs an ordinary `Gateway`; each method hands its
coroutine to that loop and waits for the answer — no sync twin of the core. Because the loop
is not the caller's, it works where a loop is already running in the calling thread (Jupyter,
IPython's autoawait), where `asyncio.run` would refuse. Interrupting a call (Ctrl-C, a
notebook's stop button) cancels it on the loop: a `map` stops its in-flight items cleanly.
The gateway closes with `close()`, the `with` block, or at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import weakref
from collections.abc import AsyncIterator, Coroutine, Generator, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from levergate.gateway import Gateway

if TYPE_CHECKING:
    from levergate.config import Settings

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever on a daemon thread, and a way to wait for work on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="levergate-sync", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the loop and wait for its result. Interrupted here (Ctrl-C), it
        is cancelled there and waited for until it has unwound — in-flight calls cancelled,
        streams closed, a `map`'s `into` final — before the interrupt goes on; a second
        interrupt stops the wait. (Cancelling the future `run_coroutine_threadsafe` returns
        would not wait: that future is done the moment it is cancelled.)"""
        task = asyncio.run_coroutine_threadsafe(_as_task(coroutine), self.loop).result()
        finished = threading.Event()
        self.loop.call_soon_threadsafe(task.add_done_callback, lambda _: finished.set())
        try:
            finished.wait()
        except BaseException:
            self.loop.call_soon_threadsafe(task.cancel)
            finished.wait()
            raise
        return task.result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _as_task(coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """The coroutine as a task of the loop it is awaited on, handed back to the caller's
    thread to wait on and cancel."""
    return asyncio.get_running_loop().create_task(coroutine)


class SyncGateway:
    """A `Gateway` for synchronous code. Its methods take the same arguments as the async ones
    (`chat`, `complete`, `embed`, `map`, `list_models`); a streamed chat is a plain iterator."""

    def __init__(self, settings: Settings | Gateway | None = None) -> None:
        self._thread = _LoopThread()
        try:
            self.gateway = (
                _unstarted(settings) if isinstance(settings, Gateway) else self._make(settings)
            )
            self._thread.run(self.gateway.start())
        except BaseException:
            self._thread.stop()
            raise
        self._closed = False
        # At interpreter exit, close what the script forgot to (held weakly: no leak).
        self._exit = atexit.register(_close_ref, weakref.ref(self))

    def _make(self, settings: Settings | None) -> Gateway:
        # Built on the loop's thread: anything that binds to a loop binds to that one.
        async def build() -> Gateway:
            return Gateway(settings)

        return self._thread.run(build())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the gateway on its loop, then stop the loop and its thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._exit)
        try:
            self._thread.run(self.gateway.aclose())
        finally:
            self._thread.stop()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coroutine.close()
            raise RuntimeError("this SyncGateway is closed")
        return self._thread.run(coroutine)

    def chat(self, **kwargs: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """`Gateway.chat`; with `stream=True`, an iterator of chunk dicts."""
        reply = self._run(self.gateway.chat(**kwargs))
        if isinstance(reply, dict):
            return reply
        return self._iterate(reply)

    def complete(self, **kwargs: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """`Gateway.complete`; with `stream=True`, an iterator of chunk dicts."""
        reply = self._run(self.gateway.complete(**kwargs))
        if isinstance(reply, dict):
            return reply
        return self._iterate(reply)

    def embed(self, **kwargs: Any) -> dict[str, Any]:
        return self._run(self.gateway.embed(**kwargs))

    def map(
        self, items: Iterable[str | Mapping[str, Any]], **kwargs: Any
    ) -> list[dict[str, Any] | Exception]:
        """`Gateway.map`: every answer in input order (see levergate/fanout.py)."""
        return self._run(self.gateway.map(items, **kwargs))

    def imap(
        self, items: Iterable[str | Mapping[str, Any]], **kwargs: Any
    ) -> Generator[tuple[int, dict[str, Any] | Exception]]:
        """`Gateway.imap`: `(index, answer)` as items finish; leaving the loop early (or closing
        the iterator) cancels the items still running."""
        return self._iterate(self.gateway.imap(items, **kwargs))

    def list_models(self) -> list[dict[str, Any]]:
        return self._run(self.gateway.list_models())

    def _iterate(self, chunks: AsyncIterator[T]) -> Generator[T]:
        stream = aiter(chunks)
        try:
            while (chunk := self._run(anext(stream, None))) is not None:
                yield chunk
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None and not self._closed:
                self._run(aclose())


def _unstarted(gateway: Gateway) -> Gateway:
    if gateway.ready:
        raise RuntimeError(
            "this gateway is already started on an event loop; give SyncGateway settings or a "
            "gateway that is not started"
        )
    return gateway


def _close_ref(ref: weakref.ref[SyncGateway]) -> None:
    found = ref()
    if found is not None:
        found.close()

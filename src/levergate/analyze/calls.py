"""What the body levers' replays share (analyze/semantic.py, route.py, trim.py, cascade.py): a
logged request as the `Call` its layer sees, an answer standing in for the upstream's, the layers'
`Shared` state, and an embedder whose vectors were computed beforehand in batches.

The layers are the gateway's own, called as the pipeline calls them, with an inner service in
place of the rest of the pipeline: it records what reached it and answers with the logged tokens,
so nothing leaves the process.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from levergate.analyze.inputs import Req
from levergate.config import WILDCARD, ModelSettings, Settings
from levergate.core.call import Call, Context
from levergate.core.clock import Clock
from levergate.core.controls import DEFAULT_TENANT, Controls, Principal
from levergate.core.embedder import Embedder
from levergate.core.reply import Completed
from levergate.layers.shared import Shared

__all__ = ["BATCH", "Primed", "Queued", "answer", "call_of", "kind_of", "models_of",
           "queue_waits", "shared_of"]  # fmt: skip

BATCH = 64  # texts per embedding call while priming
TIMED = 16  # single-text embeddings timed (what a lookup or a score adds to a request)
Say = Callable[[str], None]


def kind_of(body: Mapping[str, Any]) -> str | None:
    """ "chat" or "completion" for a body a chat or completion route takes; None otherwise."""
    if isinstance(body.get("messages"), list):
        return "chat"
    return "completion" if body.get("prompt") is not None else None


def call_of(index: int, req: Req, body: Mapping[str, Any] | None = None) -> Call | None:
    """The call the layers see for logged request `index` (its tenant, feature and the model it
    asked for); None when it has no body of a routable kind."""
    given = body if body is not None else req.payload
    if given is None:
        return None
    kind = kind_of(given)
    if kind is None:
        return None
    ctx = Context(str(index), principal=Principal(tenant=req.tenant or DEFAULT_TENANT),
                  controls=Controls(feature=req.feature))  # fmt: skip
    return Call(kind=kind, body={**given, "model": req.model}, ctx=ctx)  # type: ignore[arg-type]


def answer(req: Req, *, alias: str = "") -> Completed:
    """A whole, finished chat answer with `req`'s logged token counts (what a cache stores)."""
    usage = {"prompt_tokens": req.prompt, "completion_tokens": req.output,
             "total_tokens": req.prompt + req.output,
             "prompt_tokens_details": {"cached_tokens": req.cached}}  # fmt: skip
    data = {"id": "chatcmpl-replay", "object": "chat.completion", "model": alias or req.alias,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "(replayed)"}}],
            "usage": usage}  # fmt: skip
    return Completed(data=data, usage=usage)


def models_of(settings: Settings) -> dict[str, ModelSettings]:
    return {m.name: m for m in settings.models}


def model_for(settings: Settings, alias: str) -> ModelSettings | None:
    """The model settings serving `alias`: its own, else the `*` catch-all's."""
    models = models_of(settings)
    return models.get(alias) or models.get(WILDCARD)


def shared_of(settings: Settings, clock: Clock) -> Shared:
    """The layers' shared state, as the pipeline builds it (stores are opened lazily; nothing
    here connects anywhere until used, and the replays use none)."""
    return Shared.build(settings, models=models_of(settings), clock=clock,
                        registry=CollectorRegistry())  # fmt: skip


class Primed:
    """An `Embedder` answering from vectors the gateway's own embedder computed beforehand, in
    batches of `BATCH` with progress (`prime`, on an ordinary event loop: a local embedder runs
    in a thread, which a virtual-time loop cannot wait for). A text it was not primed with is
    an embedding failure, which the layers treat as their embedder failing."""

    def __init__(self, embedder: Embedder) -> None:
        self._inner = embedder
        self._known: dict[str, list[float]] = {}
        self.each = 0.0  # seconds per text within the priming batches

    def __len__(self) -> int:
        return len(self._known)

    async def prime(self, texts: Iterable[str], *, say: Say, what: str) -> None:
        wanted = [t for t in dict.fromkeys(texts) if t not in self._known]
        done, started = 0, time.perf_counter()
        for part in _batches(wanted, BATCH):
            vectors = await self._inner.embed(list(part))
            self._known.update(zip(part, vectors, strict=True))
            done += len(part)
            say(f"{what}: embedded {done:,} of {len(wanted):,} prompts")
        if done:
            self.each = (time.perf_counter() - started) / done

    async def timed(self, texts: Sequence[str], most: int = TIMED) -> float:
        """The median seconds the gateway's embedder takes for one text, as the request path
        asks it (one text a call), over up to `most` of `texts`; 0 with none."""
        seconds = []
        for text in list(dict.fromkeys(texts))[:most]:
            started = time.perf_counter()
            await self._inner.embed([text])
            seconds.append(time.perf_counter() - started)
        return statistics.median(seconds) if seconds else 0.0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            return [self._known[t] for t in texts]
        except KeyError:
            raise LookupError("a text the replay's embedder was not primed with") from None


class Queued:
    """A primed embedder as the request path meets it, in virtual time: the gateway's local
    embedder runs one batch at a time (its micro-batcher's `max_running` 1), and the texts
    waiting when it frees are the next batch (at most `most`); a batch of k texts takes
    `first + (k - 1) x each` seconds (`first`: one text alone, `each`: a text within a batch,
    both timed here). So a lookup or a score waits behind the others when the traffic comes
    faster than the embedder, as it does live."""

    def __init__(self, primed: Primed, *, first: float, most: int) -> None:
        self._primed = primed
        self._first, self._each, self._most = first, min(primed.each, first), max(1, most)
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self._busy = False
        self._server: asyncio.Task[None] | None = None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._waiting.append((len(texts), ready))
        if not self._busy:
            self._busy = True
            self._server = loop.create_task(self._serve())
        await ready
        return await self._primed.embed(texts)

    async def _serve(self) -> None:
        while self._waiting:
            batch: list[asyncio.Future[None]] = []
            count = 0
            while self._waiting and (not batch or count + self._waiting[0][0] <= self._most):
                size, ready = self._waiting.pop(0)
                batch.append(ready)
                count += size
            await asyncio.sleep(self._first + max(0, count - 1) * self._each)
            for ready in batch:
                ready.set_result(None)
        self._busy = False


def queue_waits(arrivals: Sequence[tuple[int, float, str]], embedder: Queued) -> dict[int, float]:
    """The seconds each (key, arrival, text) waits for `embedder`'s answer, one embedding each,
    in arrival order on a virtual clock."""
    from levergate.testing import run_virtual

    waited: dict[int, float] = {}

    async def run() -> None:
        loop = asyncio.get_running_loop()

        async def one(key: int, text: str) -> None:
            started = loop.time()
            await embedder.embed([text])
            waited[key] = loop.time() - started

        tasks = []
        start = arrivals[0][1] if arrivals else 0.0
        for key, at, text in sorted(arrivals, key=lambda a: a[1]):
            if (wait := at - start - loop.time()) > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(one(key, text)))
        await asyncio.gather(*tasks)

    run_virtual(run())
    return waited


def _batches(items: Sequence[str], size: int) -> Iterable[tuple[str, ...]]:
    it = iter(items)
    while part := tuple(itertools.islice(it, size)):
        yield part


def run(coro: Any) -> Any:
    """`asyncio.run`, for the replays' ordinary (real-time) loops."""
    return asyncio.run(coro)

"""`LocalEndpoint`: the embedded engine as an `Endpoint`, at the bottom of the per-endpoint stack.

It does on the event loop only what is cheap and async: templating and tokenizing run in a
worker thread (they raise the 400s: context length, unsupported fields), the request is handed
to the engine thread, and the answer comes back item by item through an asyncio queue. Time
spent waiting on the engine is recorded as `trace.upstream_seconds`, exactly as the HTTP
upstream records time spent waiting on a provider, so gateway overhead is measured the same way.

A stream is returned once its first token exists (failures before it are plain HTTP errors).
Closing the stream, which the edge does when the client disconnects, cancels the sequence: the
engine stops decoding it and frees its slot at its next step.
"""

from __future__ import annotations

import asyncio
import re
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from levergate.config import LocalUpstreamSettings
from levergate.core.call import Call, Trace
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.errors import BadRequest, ConfigError
from levergate.protocol.anthropic.extensions import for_openai
from levergate.upstreams.embeddings_local import LocalEmbedder
from levergate.upstreams.local import params
from levergate.upstreams.local.engine import Engine
from levergate.upstreams.local.knobs import runtime_options, usable_cores
from levergate.upstreams.local.logprobs import Track
from levergate.upstreams.local.model import model_file
from levergate.upstreams.local.pieces import PieceTokenizer
from levergate.upstreams.local.prefix_cache import DirectorySpill, PrefixCache
from levergate.upstreams.local.replies import Shape, TextAssembler, usage_of
from levergate.upstreams.local.runtime import Runtime, import_llama
from levergate.upstreams.local.sequence import Failed, Finished, Item, Request, Ticket, Tokens
from levergate.upstreams.local.template import message_texts, render


@dataclass(frozen=True, slots=True)
class Prepared:
    request: Request
    stops: tuple[str, ...]


class Run:
    """One request in the engine, seen from the event loop."""

    def __init__(self, engine: Engine, request: Request, trace: Trace) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._trace = trace
        self.done = False
        self.ticket = Ticket(request, sink=self._sink)
        engine.submit(self.ticket)

    def _sink(self, item: Item) -> None:  # engine thread
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.ticket.cancelled = True

    async def next(self) -> Tokens | Finished:
        started = time.perf_counter()
        try:
            item = await self._queue.get()
        finally:
            self._trace.upstream_seconds += time.perf_counter() - started
        if isinstance(item, Failed):
            self.done = True
            raise item.error
        self.done = isinstance(item, Finished)
        return item

    def close(self) -> None:
        if not self.done:
            self.done = True
            self.ticket.cancel()


class LocalEndpoint:
    def __init__(self, settings: LocalUpstreamSettings) -> None:
        self.name = settings.name
        self._settings = settings
        options = runtime_options(settings, cores=usable_cores())
        path = model_file(settings)
        self.threads = options.threads
        runtime = Runtime(path, options)
        self.runtime = runtime
        self._llama = import_llama()
        self._template = runtime.chat_template()
        self._tokenize = PieceTokenizer(
            lambda text, add_special: runtime.tokenize(text, add_special=add_special),
            runtime.specials(),
        )
        self.context_limit = min(runtime.n_ctx, runtime.n_ctx_train)
        self.model_id = settings.model_name or model_id(settings.model_path or str(path))
        self.quantization = settings.requantize
        self.engine = Engine(
            runtime,
            cache=_prefix_cache(settings),
            name=settings.name,
            keep_cells=settings.prefix_cache.in_place,
            resident_cells=settings.prefix_cache.in_place_cells,
        )
        self.embedder, self._no_embedder = _embedder(settings)

    async def __call__(self, call: Call) -> Reply:
        trace = call.ctx.trace
        trace.upstream = self.name
        trace.upstream_model = call.model
        trace.attempts += 1
        if call.kind == "embedding":
            return await self._embeddings(call)
        if call.kind == "response":  # never sent here: a local upstream translates them
            raise BadRequest("The embedded engine does not serve the Responses API natively.")
        if call.ctx.extensions:
            # Another protocol's features (an Anthropic request), judged as for any upstream
            # that speaks the OpenAI API: hints dropped, a 400 naming what it cannot express.
            call = for_openai(call, upstream=self.name)
        prepared = await asyncio.to_thread(self._prepare, call)
        shape = Shape.new(call.kind, call.model or self.model_id)
        run = Run(self.engine, prepared.request, trace)
        try:
            first = await run.next()
            if call.stream:
                events = self._events(run, shape, prepared, first)
                # A stream closed before it was iterated never runs its `finally`: the
                # sequence is then cancelled when the generator is collected.
                weakref.finalize(events, run.close)
                return Stream(events)
            return await self._completed(run, shape, prepared, first)
        except BaseException:
            run.close()
            raise

    async def models(self) -> list[dict[str, Any]]:
        names = [self.model_id]
        if self.embedder is not None:
            names.append(self.embedder.settings.model_name)
        return [{"id": n, "object": "model", "created": 0, "owned_by": "levergate"} for n in names]

    async def aclose(self) -> None:
        if self.embedder is not None:
            await self.embedder.aclose()
        await asyncio.to_thread(self.engine.stop)

    async def _embeddings(self, call: Call) -> Completed:
        if self.embedder is None:
            raise BadRequest(
                f"local upstream {self.name!r} serves no embeddings: {self._no_embedder}",
                param="model",
            )
        started = time.perf_counter()
        try:
            data = await self.embedder.answer(call.body, model=call.model)
        finally:
            call.ctx.trace.upstream_seconds += time.perf_counter() - started
        return Completed(data=data)

    def _prepare(self, call: Call) -> Prepared:
        """Template, tokenize and check a call (in a worker thread: it is CPU work)."""
        body = call.body
        params.refuse_unsupported(body)
        if call.kind == "chat":
            text = render(
                message_texts(body["messages"]), template=self._template, llama=self._llama
            )
            prompt: list[int] = self._tokenize(text)
            where = "messages"
        else:
            given = params.completion_prompt(body)
            prompt = given if isinstance(given, list) else self._tokenize(given)
            where = "prompt"
        params.check_context(len(prompt), limit=self.context_limit, param=where)
        request = Request(
            prompt=tuple(prompt),
            max_tokens=params.max_tokens(
                body,
                prompt_tokens=len(prompt),
                limit=self.context_limit,
                default=self._settings.max_tokens,
                param=where,
            ),
            sampling=params.sampling(body, settings=self._settings),
            draft=params.draft_options(call, settings=self._settings),
            logprobs=params.logprobs(body, kind=call.kind),
        )
        return Prepared(request, params.stop_strings(body))

    async def _completed(
        self, run: Run, shape: Shape, prepared: Prepared, item: Tokens | Finished
    ) -> Completed:
        assembler = TextAssembler(prepared.stops)
        track = self._track(shape, prepared)
        parts: list[str] = []
        count, cached = 0, 0
        while isinstance(item, Tokens):
            count += len(item.ids)
            cached = item.cached
            if track is not None and item.scores is not None:
                track.add(item.ids, item.scores)
            parts.append(assembler.feed(item.text))
            if assembler.stopped:
                run.close()
                break
            item = await run.next()
        parts.append(assembler.flush())
        text = "".join(parts)
        reason = item.reason if isinstance(item, Finished) else "stop"
        usage = usage_of(prompt=len(prepared.request.prompt), completion=count, cached=cached)
        logprobs = None if track is None else track.shape(track.rest(len(text.encode())))
        return Completed(data=shape.completed(text, reason, usage, logprobs))

    async def _events(
        self, run: Run, shape: Shape, prepared: Prepared, item: Tokens | Finished
    ) -> EventSource:
        assembler = TextAssembler(prepared.stops)
        track = self._track(shape, prepared)
        count, cached, sent = 0, 0, 0
        try:
            if shape.kind == "chat":
                yield Event.of(shape.chunk(None))
            while isinstance(item, Tokens):
                count += len(item.ids)
                cached = item.cached
                text = assembler.feed(item.text)
                if track is None:
                    if text:
                        yield Event.of(shape.chunk(text))
                else:
                    if item.scores is not None:
                        track.add(item.ids, item.scores)
                    sent += len(text.encode())
                    if text:
                        yield Event.of(shape.chunk(text, None, track.shape(track.ready(sent))))
                if assembler.stopped:
                    run.close()
                    break
                item = await run.next()
            tail = assembler.flush()
            if track is not None:
                sent += len(tail.encode())
                if rest := track.rest(sent):
                    yield Event.of(shape.chunk(tail, None, track.shape(rest)))
                    tail = ""
            if tail:
                yield Event.of(shape.chunk(tail))
            reason = item.reason if isinstance(item, Finished) else "stop"
            yield Event.of(shape.chunk(None, reason))
            usage = usage_of(prompt=len(prepared.request.prompt), completion=count, cached=cached)
            yield Event.of(shape.usage_chunk(usage))
        finally:
            run.close()

    def _track(self, shape: Shape, prepared: Prepared) -> Track | None:
        """Where an answer's logprobs are gathered, None when the request asked for none."""
        if prepared.request.logprobs is None:
            return None
        return Track(kind=shape.kind, piece=self.runtime.piece)


def model_id(path: str) -> str:
    """`SmolLM2-135M-Instruct.Q4_1.gguf` -> `smollm2-135m-instruct`: the file's name without
    its quantization, which the gateway may change."""
    stem = Path(path).name.removesuffix(".gguf")
    return re.sub(r"[.-](q\d\w*|f16|f32|bf16)$", "", stem, flags=re.IGNORECASE).lower()


def _embedder(settings: LocalUpstreamSettings) -> tuple[LocalEmbedder | None, str]:
    """The MiniLM embedder when enabled and installed; otherwise None and the reason, which
    an embeddings request then gets as its error (the chat model still serves)."""
    if not settings.embeddings.enabled:
        return None, "embeddings are disabled in its settings"
    try:
        return LocalEmbedder(settings.embeddings), ""
    except ConfigError as exc:
        return None, exc.message


def _prefix_cache(settings: LocalUpstreamSettings) -> PrefixCache:
    cache = settings.prefix_cache
    spill = DirectorySpill(Path(cache.spill_dir).expanduser()) if cache.spill_dir else None
    return PrefixCache(
        ram_bytes=cache.ram_bytes,
        min_tokens=cache.min_tokens,
        spill=spill,
        spill_bytes=cache.spill_bytes,
    )

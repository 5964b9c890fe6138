"""`Gateway`: settings plus the built pipeline — the one core behind the library and the proxy.

Both edges (the ASGI app and the httpx transport) and the library methods go through
`Gateway.make_call` and `Gateway.serve`, so a request behaves the same whichever way it came in.

    async with Gateway(Settings.for_upstream("http://127.0.0.1:8000/v1")) as gw:
        reply = await gw.chat(model="m", messages=[{"role": "user", "content": "hi"}])
        async for chunk in await gw.chat(model="m", messages=[...], stream=True): ...

The in-process transports for the official SDKs are the edge's (levergate/server/transport.py,
sync_transport.py, httpx2_transport.py): `GatewayTransport(gw)` and its siblings. Features
(the Batch API...) are extensions (levergate/extension.py) the composition root passes in:
`levergate.app.build_gateway(settings)` builds the gateway with every feature its settings turn
on; this module imports no feature and no server module (tests/unit/test_import_direction.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from levergate import fanout
from levergate.config import WILDCARD, Settings
from levergate.config.environment import unknown_variables
from levergate.control_headers import (
    NO_OPTIONS,
    Options,
    parse_controls,
    priority_of,
    with_options,
)
from levergate.core.call import Call, Kind, Trace, new_call, new_context
from levergate.core.controls import ANONYMOUS, CachePolicy, Controls, Priority
from levergate.core.ids import IDS
from levergate.core.interactive import Interactive
from levergate.core.reply import Completed, Event, Reply, Stream
from levergate.errors import BadRequest, LevergateError
from levergate.fanout import OnError, Progress
from levergate.layers.traffic.readiness import Readiness, judge
from levergate.pipeline import Deps, Pipeline, build_pipeline
from levergate.protocol.openai.body import CheckedBodies, is_usage_only
from levergate.redact import Redactor
from levergate.redact import install as install_redaction
from levergate.workflow import Workflow, WorkflowTracing

if TYPE_CHECKING:
    from levergate.config import ModelSettings
    from levergate.core.clock import Clock
    from levergate.extension import Extension, ExtensionFactory
    from levergate.layers.keys.build import KeyKit
    from levergate.layers.measure.recorder import Recorder
    from levergate.layers.tiers.book import TierBook

log = logging.getLogger("levergate.gateway")

FanKind = Literal["chat", "completion", "embedding"]

REQUEST_ID_HEADER = "x-request-id"
# A client's x-request-id is kept only if it is this short and made of these characters (it is
# echoed in headers and written to logs); anything else gets a fresh id.
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class Gateway:
    def __init__(
        self,
        settings: Settings | None = None,
        *,
        deps: Deps | None = None,
        extensions: Sequence[ExtensionFactory] = (),
    ) -> None:
        self.settings = settings or Settings.load()
        self.settings.require_variables()
        for line in unknown_variables(type(self.settings)):
            log.warning("%s", line)
        self.pipeline: Pipeline = build_pipeline(self.settings, deps)
        # `clock`, read by `make_call` without the property's call (a frame a request).
        self._clock = self.pipeline.shared.clock
        # The request bodies already checked under this gateway's limits, by their raw bytes
        # (a repeated request, a cache hit above all, is not checked again).
        self._checked = CheckedBodies(self.settings.limits)
        # The tier policy plans for the client's own timeout (config/tiers.py).
        tiers = self.settings.tiers
        self._patience = tiers.enabled and tiers.client_timeout
        # Every configured secret, scrubbed from the errors `serve` hands out and from every
        # levergate log record, whose redactor also hides configured URLs' query strings
        # (levergate/redact.py; the filter holds it weakly: this attribute keeps it).
        self.redactor = Redactor.of(self.settings)
        self._log_redactor = Redactor.for_logs(self.settings)
        install_redaction(self._log_redactor)
        self.ready = False
        # Client requests in flight (the edge counts them): the batch runner yields to them.
        self.interactive = Interactive()
        # Set by the server when it begins to stop: /readyz answers 503 from then on.
        self.draining = False
        self._jobs: list[asyncio.Future[None]] = []
        # The features (levergate/extension.py), each built on this gateway as its `Host`.
        self.extensions: tuple[Extension, ...] = tuple(make(self) for make in extensions)

    @classmethod
    def from_config(cls, path: str | Path) -> Gateway:
        return cls(Settings.load(path))

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def start(self) -> None:
        """Start the pipeline's background jobs, each under the pipeline's supervisor (a crash is
        logged, counted and restarted); idempotent. The ASGI lifespan calls this too."""
        if self._jobs:
            return
        keep_running = self.pipeline.supervisor.keep_running
        added = [job for extension in self.extensions for job in extension.jobs()]
        background = [*self.pipeline.background, *added]
        self._jobs = [asyncio.ensure_future(keep_running(job)) for job in background]
        self.ready = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self.ready = False
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        # A call that just returned has its record written on the next loop turn (Measure);
        # let it out before the extensions that take records (tracing) close.
        await asyncio.sleep(0)
        for extension in reversed(self.extensions):
            await extension.aclose()
        await self.pipeline.aclose()

    # ---- the `Host` a feature sees (levergate/extension.py) ----------------------------------

    @property
    def clock(self) -> Clock:
        """The gateway's clock: every deadline is a time on it."""
        return self.pipeline.shared.clock

    @property
    def models(self) -> Mapping[str, ModelSettings]:
        return self.pipeline.models

    @property
    def keyring(self) -> KeyKit | None:
        """The gateway keys (auth or the admin API on): the admin API works on the same ones."""
        return self.pipeline.shared.keys

    @property
    def recorder(self) -> Recorder:
        return self.pipeline.recorder

    @property
    def tiers(self) -> TierBook:
        return self.pipeline.shared.tiers

    async def metrics(self) -> bytes:
        """The Prometheus exposition of this gateway's registry, for `/metrics`."""
        return await self.pipeline.telemetry.exposition()

    def readiness(self) -> Readiness:
        """Whether this gateway can serve, for `/readyz` (layers/traffic/readiness.py)."""
        pipeline = self.pipeline
        return judge(
            mode=self.settings.server.readiness, started=self.ready, draining=self.draining,
            models=pipeline.models, endpoints=pipeline.endpoints, now=self.clock.now(),
        )  # fmt: skip

    # ---- the core, shared by every edge -------------------------------------------------

    def make_call(
        self,
        kind: Kind,
        body: Any,
        *,
        headers: Mapping[str, str] | None = None,
        trace: Trace | None = None,
        raw: bytes | None = None,
        request_id: str | None = None,
        options: Options = NO_OPTIONS,
    ) -> Call:
        """Check the body and read the request's controls from its headers and metadata (the one
        parser: control_headers.py; a bad value is a 400 naming the header) and the library's
        typed `options` over them. `raw` is the JSON text the body was parsed from, if the
        caller has it (then a body whose bytes passed as this kind before is not checked
        again: `CheckedBodies`); `request_id` the id the edge already chose
        (`request_id_for`), else it is chosen here."""
        checked = self._checked
        limits = checked.limits
        if raw is None or checked.get(raw) != kind:  # the same bytes as the same kind: passed
            body = checked.check(kind, body, raw)
        headers = headers or {}
        metadata = body.get("metadata")
        # A deadline is on the gateway's clock, which every layer compares it with.
        now = self._clock.now()
        controls = parse_controls(headers, now=now, limits=limits,
                                  body_feature=metadata.get("feature") if isinstance(metadata, dict)
                                  else None, patience=self._patience)  # fmt: skip
        if options is not NO_OPTIONS:
            controls = with_options(controls, now=now, limits=limits, options=options)
        # `Context(...)` and `Call(...)` without their frozen `__init__`s (core/call.py).
        ctx = new_context(request_id or request_id_for(headers), ANONYMOUS, controls, headers,
                          trace or Trace.fresh())  # fmt: skip
        return new_call(kind, body, ctx, raw)

    async def serve(self, call: Call) -> Reply:
        """Run the call through the pipeline. A stream comes back with the usage chunk removed
        unless the client asked for it (the gateway always asks the upstream for it)."""
        try:
            reply = await self.pipeline.service(call)
        except LevergateError as exc:
            self.redactor.scrub_error(exc)
            raise
        if isinstance(reply, Stream) and not call.wants_usage_chunk:
            return reply.hiding(_is_usage_chunk)
        return reply

    async def list_models(self) -> list[dict[str, Any]]:
        """Configured aliases, plus the upstream's own list behind a `*` model."""
        listed = [
            {"id": name, "object": "model", "created": 0, "owned_by": "levergate"}
            for name in self.pipeline.models
            if name != WILDCARD
        ]
        wildcard = self.pipeline.models.get(WILDCARD)
        if wildcard is not None:
            # The upstream may not list models; the configured aliases still stand.
            with contextlib.suppress(LevergateError, OSError, ValueError):
                listed.extend(await self.pipeline.upstreams[wildcard.upstream].models())
        return listed

    # ---- the library surface ------------------------------------------------------------

    async def chat(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, object]],
        stream: bool = False,
        priority: Priority | str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline the pipeline enforces
        feature: str | None = None,
        cache: CachePolicy | bool | None = None,
        speculative: bool | None = None,
        controls: Controls | None = None,
        headers: Mapping[str, str] | None = None,
        **params: Any,
    ) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
        """`params` are further fields of the OpenAI request body (temperature, max_tokens...).
        The controls are typed (`priority="interactive"`, `timeout=` seconds, `feature=`,
        `cache=False` or a `CachePolicy`, `speculative=`), or one `controls=Controls(...)`;
        each is checked as its header would be. The answer is OpenAI's JSON as a plain dict
        (a stream: an async iterator of chunk dicts); typed objects come from the official SDK
        over `GatewayTransport(gw)`."""
        body = {**params, "model": model, "messages": list(messages), "stream": stream}
        options = Options(priority, timeout, feature, cache, speculative, controls)
        return await self._library_call("chat", body, headers, options)

    async def complete(
        self,
        *,
        model: str,
        prompt: str | list[str],
        stream: bool = False,
        priority: Priority | str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline the pipeline enforces
        feature: str | None = None,
        cache: CachePolicy | bool | None = None,
        speculative: bool | None = None,
        controls: Controls | None = None,
        headers: Mapping[str, str] | None = None,
        **params: Any,
    ) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
        """A completion, with the controls `chat` takes."""
        body = {**params, "model": model, "prompt": prompt, "stream": stream}
        options = Options(priority, timeout, feature, cache, speculative, controls)
        return await self._library_call("completion", body, headers, options)

    async def embed(
        self,
        *,
        model: str,
        input: str | list[str],  # noqa: A002 - the OpenAI field name
        priority: Priority | str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline the pipeline enforces
        feature: str | None = None,
        cache: CachePolicy | bool | None = None,
        controls: Controls | None = None,
        headers: Mapping[str, str] | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        """Embeddings, with the controls `chat` takes (speculation is for generation only)."""
        options = Options(priority, timeout, feature, cache, None, controls)
        body = {**params, "model": model, "input": input}
        reply = await self.serve(
            self.make_call("embedding", body, headers=headers, options=options)
        )
        if not isinstance(reply, Completed):
            raise BadRequest("embeddings cannot be streamed")
        return reply.data

    async def map(
        self,
        items: Iterable[str | Mapping[str, Any]],
        *,
        model: str | None = None,
        kind: FanKind = "chat",
        max_concurrency: int = 16,
        rate: float | None = None,
        on_error: OnError = "return",
        progress: Progress | None = None,
        bar: bool = False,
        priority: Priority | str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - each item's deadline
        feature: str | None = None,
        cache: CachePolicy | bool | None = None,
        workflow: str | None = None,
        controls: Controls | None = None,
        into: list[Any] | None = None,
        **params: Any,
    ) -> list[dict[str, Any] | Exception]:
        """Run every item through the pipeline, at most `max_concurrency` at once (and at most
        `rate` starts per second), and return the answers in input order; a failed item's
        slot holds its exception, or with `on_error="raise"` the first error cancels the rest
        and is raised. Items are prompts (with `model=`) or request bodies of `kind`. Pacing
        is the gateway's own limits (levergate/fanout.py); the items run at batch priority
        unless `priority=` (or `controls.priority`) says otherwise. `progress(done, total)`
        is called after each item; `bar=True` draws a `rich` progress bar. `params` are
        body fields for every item (max_tokens...), under the item's own. `timeout` is each
        item's; `controls=Controls(deadline=...)` is one deadline for the whole fan-out, at
        which `map` returns what finished. `into`, a list, receives each answer the moment it
        finishes: after a cancel (or an errgroup raise) it holds what finished, None elsewhere.

        Examples:
            >>> answers = await gw.map(["2+2?", "3+3?"], model="m")  # doctest: +SKIP
        """
        listed = list(items)
        fanout.check_bounds(max_concurrency, rate)
        run = self._item_runner(
            kind=kind, model=model, priority=priority, timeout=timeout, feature=feature,
            cache=cache, workflow=workflow, controls=controls, params=params,
        )  # fmt: skip
        close: Callable[[], None] | None = None
        if bar:
            progress, close = fanout.rich_progress(len(listed))
        try:
            return await fanout.collect(
                listed, run, clock=self.clock, max_concurrency=max_concurrency, rate=rate,
                on_error=on_error, progress=progress, into=into,
            )  # fmt: skip
        finally:
            if close is not None:
                close()

    async def imap(
        self,
        items: Iterable[str | Mapping[str, Any]],
        *,
        model: str | None = None,
        kind: FanKind = "chat",
        max_concurrency: int = 16,
        rate: float | None = None,
        on_error: OnError = "return",
        progress: Progress | None = None,
        priority: Priority | str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - each item's deadline
        feature: str | None = None,
        cache: CachePolicy | bool | None = None,
        workflow: str | None = None,
        controls: Controls | None = None,
        **params: Any,
    ) -> AsyncIterator[tuple[int, dict[str, Any] | Exception]]:
        """`map`, yielding `(index, answer)` as each item finishes. Leaving the loop early
        cancels the items still running (use `contextlib.aclosing` to do it at once)."""
        listed = list(items)
        fanout.check_bounds(max_concurrency, rate)
        run = self._item_runner(
            kind=kind, model=model, priority=priority, timeout=timeout, feature=feature,
            cache=cache, workflow=workflow, controls=controls, params=params,
        )  # fmt: skip
        stream = fanout.fan_out(
            listed, run, clock=self.clock, max_concurrency=max_concurrency, rate=rate,
            on_error=on_error, progress=progress,
        )  # fmt: skip
        async with contextlib.aclosing(stream):
            async for found in stream:
                yield found

    def workflow(
        self,
        workflow_id: str | None = None,
        *,
        timeout: float | None = None,
        max_parallel: int = 8,
        max_steps: int = 100,
        fail_fast: bool = True,
        priority: Priority | str = Priority.DEFAULT,
    ) -> Workflow:
        """A traced multi-step workflow (levergate/workflow.py): its steps run in parallel
        under one workflow id, one deadline and a step limit; each step's calls carry the id
        and the step's name as feature, so the records show the workflow together."""
        if not isinstance(priority, Priority):
            priority = priority_of(priority, where="priority")
        tracing = None
        if self.recorder.tracing:  # the workflow and its steps as spans, its calls under them
            recorder = self.recorder
            tracing = WorkflowTracing(
                sampled=random.random() < self.settings.otel.sample_ratio,  # noqa: S311 (sampling)
                export=lambda spans, now: recorder.trace_internal(spans, now=now),
            )
        return Workflow(
            self.clock, workflow_id, timeout=timeout, max_parallel=max_parallel,
            max_steps=max_steps, fail_fast=fail_fast, priority=priority, tracing=tracing,
        )  # fmt: skip

    def _item_runner(
        self,
        *,
        kind: FanKind,
        model: str | None,
        priority: Priority | str | None,
        timeout: float | None,
        feature: str | None,
        cache: CachePolicy | bool | None,
        workflow: str | None,
        controls: Controls | None,
        params: Mapping[str, Any],
    ) -> Callable[[int, object], Awaitable[dict[str, Any]]]:
        """What one fan-out item does: its body, the controls shared by all (checked here, so a
        bad one is an error at the call), one pass through the pipeline."""
        if kind not in ("chat", "completion", "embedding"):
            raise ValueError("kind must be 'chat', 'completion' or 'embedding'")
        base = controls or Controls()
        if priority is None and base.priority is Priority.DEFAULT:
            priority = Priority.BATCH
        if workflow is not None:
            base = dataclasses.replace(base, workflow=workflow)
        options = Options(priority, timeout, feature, cache, None, base)
        now, limits = self.clock.now(), self.settings.limits
        with_options(parse_controls({}, now=now, limits=limits), now=now, limits=limits,
                     options=options)  # fmt: skip

        async def run(_index: int, item: object) -> dict[str, Any]:
            body = fanout.item_body(kind, item, model, params)
            reply = await self.serve(self.make_call(kind, body, options=options))
            if not isinstance(reply, Completed):  # pragma: no cover - item_body refuses streams
                await reply.aclose()
                raise BadRequest("a fan-out item cannot stream")
            return reply.data

        return run

    async def _library_call(
        self, kind: Kind, body: dict[str, Any], headers: Mapping[str, str] | None, options: Options
    ) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
        reply = await self.serve(self.make_call(kind, body, headers=headers, options=options))
        if isinstance(reply, Completed):
            return reply.data
        return _chunks(reply)


async def _chunks(stream: Stream) -> AsyncIterator[dict[str, Any]]:
    try:
        async for event in stream:
            yield event.json()
    finally:
        await stream.aclose()


def _is_usage_chunk(event: Event) -> bool:
    """Asked only of events that carry a usage block (`Stream.hiding`), and decided on the parsed
    event, not on its bytes: upstreams write JSON in every spacing (`"usage": {` from Python's
    `json.dumps`), and a usage-only chunk that slips through has `choices: []`, which breaks the
    everyday `chunk.choices[0]` loop. The parse is cached on the event."""
    return is_usage_only(event.json())


def request_id_for(headers: Mapping[str, str]) -> str:
    """The client's `x-request-id` if it is safe to echo and log, else a fresh random one."""
    asked = headers.get(REQUEST_ID_HEADER)
    if asked is not None and _CLIENT_REQUEST_ID.fullmatch(asked) is not None:
        return asked
    # Time-ordered, 80 random bits, drawn in batches (core/ids.py), without a call of its own.
    fresh = next(IDS.ids, None)
    return fresh if fresh is not None else IDS.refill()

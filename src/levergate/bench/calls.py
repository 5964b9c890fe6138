"""Function calls per request on the gateway's in-process path: the work a request costs, counted
instead of timed, so a test can guard it on a shared, noisy machine (issue 22).

One gateway with the settings given, an upstream that answers from memory (no sockets, no other
process: nothing whose timing can change the count), and the official client path (`httpx` over
`GatewayTransport`). After a warm-up, `sys.setprofile` counts every Python and C function
call the loop makes while it serves `requests` distinct chat requests, whole or streamed; the
count per request is the guard's measure. Each request is distinct so the exact cache misses and
the default proxy path is what is counted; with `hit`, every request is the same deterministic
one (`HIT_BODY`), so after the warm-up's first each is an exact-cache hit.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal

import httpx
import orjson

from levergate.app import extensions_for
from levergate.config import Settings
from levergate.core.ids import IDS
from levergate.core.json_bound import parse_json
from levergate.gateway import Gateway
from levergate.pipeline import Deps
from levergate.server.run import serving
from levergate.server.transport import GatewayTransport
from levergate.upstreams.wire import HttpClient, HttpResponse

__all__ = ["FEATURE_KINDS", "KINDS", "WAYS", "CannedUpstream", "Counted", "calls_per_request",
           "count", "kinds", "module_of", "serve_requests"]  # fmt: skip

BASE_URL = "http://canned.invalid/v1"
# asyncio's timer heap orders `TimerHandle`s by Python methods, called from C (`heapq`) under
# whichever frame pushed a timer: how many a push makes depends on the heap's other timers'
# deadlines, so on the wall clock (a slow run left other deadlines between a count's own). The
# event loop's bookkeeping, not the gateway's (uvloop's timers are C), and not counted: with
# them the "deterministic" count differed by one in a loaded CI run (6,348 against 6,349).
_TIMER_ORDER = frozenset(
    getattr(asyncio.TimerHandle, name).__code__
    for name in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__")
)
CLIENT_URL = "http://levergate/v1"  # the in-process transport answers any host
WORDS = 16  # words in every answer, whole or streamed (a chunk a word)
# The request of `hit`: the same every time, deterministic (temperature 0), answered whole.
HIT_QUESTION = {"role": "user", "content": "the same question"}
HIT_BODY = orjson.dumps({"model": "m", "stream": False, "max_tokens": 16, "temperature": 0,
                         "messages": [HIT_QUESTION]})  # fmt: skip


def _answer(model: str) -> bytes:
    return orjson.dumps({
        "id": "chatcmpl-canned", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": " ".join(["word"] * WORDS)}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": WORDS, "total_tokens": 9 + WORDS},
    })  # fmt: skip


def _chunks(model: str) -> list[bytes]:
    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        data = {"id": "chatcmpl-canned", "object": "chat.completion.chunk", "created": 0,
                "model": model, "choices": [choice], **extra}  # fmt: skip
        return b"data: " + orjson.dumps(data) + b"\n\n"

    usage = {"prompt_tokens": 9, "completion_tokens": WORDS, "total_tokens": 9 + WORDS}
    return [
        event({"role": "assistant", "content": ""}),
        *(event({"content": " word" if i else "word"}) for i in range(WORDS)),
        event({}, "stop", usage=usage),
        b"data: [DONE]\n\n",
    ]


class CannedResponse:
    def __init__(self, body: bytes | None, chunks: list[bytes]) -> None:
        self.status = 200
        kind = "application/json" if body is not None else "text/event-stream"
        self.headers: Mapping[str, str] = {"content-type": kind}
        self._body = body
        self._chunks = chunks

    async def read(self) -> bytes:
        return self._body if self._body is not None else b"".join(self._chunks)

    def whole(self) -> bytes | None:
        """As `H1Client`'s: a whole answer is all there once its head is."""
        return self._body

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks if self._body is None else [self._body]:
            yield chunk

    async def aclose(self) -> None:
        return None


class CannedUpstream:
    """An `HttpClient` that answers every chat request from memory: a whole answer, or a stream
    of a chunk a word with usage at the end, as an OpenAI-compatible server sends them."""

    async def request(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse:
        del method, url, headers
        sent = parse_json(body or b"{}")
        model = str(sent.get("model", "m"))
        if sent.get("stream"):
            return CannedResponse(None, _chunks(model))
        return CannedResponse(_answer(model), [])

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class Counted:
    calls: int  # every call the process made
    gateway: int  # the calls made with a frame of the gateway on the stack (not the client's)
    requests: int
    # The gateway's calls by where they run: a Python function by its own module, a C function
    # by the module that called it (`levergate.layers.retry`, `httpx`, `asyncio`, ...).
    by_module: Counter[str]

    @property
    def per_request(self) -> float:
        return self.calls / self.requests

    @property
    def gateway_per_request(self) -> float:
        return self.gateway / self.requests


# The way requests reach the gateway: in-process (the library) or over HTTP (the proxy).
Way = Literal["inprocess", "http"]


async def serve_requests(
    during: AbstractContextManager[Any], *, stream: bool, requests: int, warmup: int,
    way: Way = "inprocess", features: bool = False, hit: bool = False, **values: Any,
) -> None:  # fmt: skip
    """Serve `warmup` then, inside `during`, `requests` distinct chat requests (`hit`: the
    same, `HIT_BODY`, so all but the warm-up's first are exact-cache hits) through a gateway
    built by `Settings.for_upstream` with `values` (its defaults when none) on `CannedUpstream`,
    with the features the settings turn on (`features`: the request log, the dashboard...; as
    `build_gateway` adds them) or only the core:
    in-process (`GatewayTransport`, the library's path) or over HTTP/1.1 on a loopback port with
    one keep-alive connection (the proxy's path: the server and its protocol included)."""
    canned = CannedUpstream()

    def client(_: object) -> HttpClient:
        return canned

    # The prefix linter samples a request a second by the wall clock, so whether a sample falls
    # in the count would depend on the machine's speed (4 calls in 6,500 under load): here it
    # samples the warm-up's first request only, unless the caller set it.
    values = {"server": {"port": 0}, "prompt_cache": {"lint": {"every_seconds": 1e9}}, **values}
    settings = Settings.for_upstream(BASE_URL, **values)
    extensions = extensions_for(settings) if features else ()
    async with Gateway(settings, deps=Deps(http_client=client), extensions=extensions) as gateway:
        send = _in_process(gateway) if way == "inprocess" else _over_http(gateway)
        async with send as one:
            for index in range(warmup):
                await one(HIT_BODY if hit else _body(index, stream))
            _settle(gateway)
            # A fresh batch of request ids (core/ids.py draws 256 at a time): where a batch ran
            # out within the count depended on the requests served before (a refill inside one
            # count and not the next was 4 calls apart).
            IDS.refill()
            with during:
                for index in range(warmup, warmup + requests):
                    await one(HIT_BODY if hit else _body(index, stream))
                _settle(gateway)


def _settle(gateway: Gateway) -> None:
    """The request log's rows and tracing's spans of the requests they hold (`LogWriter.settle`,
    `SpanExporter.settle`: built 32 at a time) built now: at the warm-up's end, so that the
    first build (the encoder's constant pieces) falls before the count, and at the count's
    end, so that it holds each of its requests' and no warm-up request's."""
    from levergate.otel.extension import tracing_of
    from levergate.requestlog.extension import log_of

    if (log := log_of(gateway.extensions)) is not None:
        log.writer.settle()
    if (tracing := tracing_of(gateway.extensions)) is not None:
        tracing.exporter.settle()


def _body(index: int, stream: bool) -> bytes:
    question = {"role": "user", "content": f"question number {index}"}
    return orjson.dumps({"model": "m", "stream": stream, "max_tokens": 16, "messages": [question]})


Send = Callable[[bytes], Awaitable[None]]


@asynccontextmanager
async def _in_process(gateway: Gateway) -> AsyncIterator[Send]:
    transport = GatewayTransport(gateway)
    async with httpx.AsyncClient(transport=transport, base_url="http://levergate/v1") as http:

        async def one(body: bytes) -> None:
            headers = {"content-type": "application/json"}
            reply = await http.post("/chat/completions", content=body, headers=headers)
            await reply.aread()
            reply.raise_for_status()
            # A turn of the loop, as a socket's read gives: from memory nothing here suspends,
            # so what the gateway defers to the loop's next turn (Measure's record, the request
            # log's row) waited for the gateway's close, outside the count (until 2026-12-05).
            await asyncio.sleep(0)

        yield one


@asynccontextmanager
async def _over_http(gateway: Gateway) -> AsyncIterator[Send]:
    async with serving(gateway) as url:
        host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))

        async def one(body: bytes) -> None:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: levergate\r\n"
                         b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                         % (len(body), body))  # fmt: skip
            await _read_response(reader)

        try:
            yield one
        finally:
            writer.close()
            await writer.wait_closed()


async def _read_response(reader: asyncio.StreamReader) -> None:
    """One HTTP/1.1 response off a keep-alive connection: by its length, or chunked to its end."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    if not head.startswith("http/1.1 200"):
        raise RuntimeError(f"the gateway answered {head.splitlines()[0]}")
    for line in head.splitlines():
        if line.startswith("content-length:"):
            await reader.readexactly(int(line.split(":", 1)[1]))
            return
    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
        await reader.readexactly(size + 2)
    await reader.readuntil(b"\r\n")


# The budget's kinds (tests/call_budget.json): each over both ways; and in-process only, whole
# answers with the request log on (`log`), and with tracing too (`traced`).
KINDS = ("whole", "stream", "hit")
FEATURE_KINDS = ("log", "traced")
WAYS: tuple[Way, ...] = ("inprocess", "http")


def kinds(way: Way) -> tuple[str, ...]:
    """The budget's kinds counted `way`."""
    return KINDS + FEATURE_KINDS if way == "inprocess" else KINDS


async def count(way: Way, kind: str, *, requests: int = 40) -> Counted:
    """The calls of one of the budget's kinds. The request log writes to SQLite in a temporary
    folder and tracing exports to a loopback port nobody listens on, neither within the count
    (a batch of 100,000 or a minute; an export every 10 minutes): what is counted is what
    they cost the request path, where the log's rows and the spans are made."""
    if kind not in FEATURE_KINDS:
        return await calls_per_request(stream=kind == "stream", hit=kind == "hit", way=way,
                                       requests=requests)  # fmt: skip
    # The collector's port: bound and not listening, so the export at the close is refused at
    # once, and no other process can take the port meanwhile.
    with tempfile.TemporaryDirectory(prefix="levergate-calls-") as folder, socket.socket() as port:
        port.bind(("127.0.0.1", 0))
        values: dict[str, Any] = {"request_log": {
            "enabled": True, "store": {"sqlite_path": f"{folder}/log.sqlite3"},
            "flush_seconds": 60, "batch_size": 100_000,
        }}  # fmt: skip
        if kind == "traced":
            values["otel"] = {"endpoint": f"http://127.0.0.1:{port.getsockname()[1]}",
                              "export_interval_seconds": 600, "timeout_seconds": 1}  # fmt: skip
        return await calls_per_request(stream=False, way=way, requests=requests, features=True,
                                       **values)  # fmt: skip


async def calls_per_request(
    *, stream: bool, requests: int = 40, warmup: int = 20, way: Way = "inprocess",
    hit: bool = False, **values: Any,
) -> Counted:  # fmt: skip
    """The calls made while serving `requests` distinct chat requests, or with `hit` the same
    one, each an exact-cache hit (see `serve_requests`)."""
    counting = _Counting()
    await serve_requests(
        counting, stream=stream, requests=requests, warmup=warmup, way=way, hit=hit, **values
    )
    by_module: Counter[str] = Counter()
    for path, calls in counting.by_file.items():
        by_module[module_of(path)] += calls
    return Counted(calls=counting.calls, gateway=counting.by_file.total(), requests=requests,
                   by_module=by_module)  # fmt: skip


def module_of(path: str) -> str:
    """A source file's module, for levergate's own (`levergate.layers.retry`); the package for
    an installed library (`httpx`); the top module for the standard library (`asyncio`)."""
    parts = path.replace("\\", "/").split("/")
    if "levergate" in parts:
        inside = parts[len(parts) - parts[::-1].index("levergate") :]
        return ".".join(["levergate", *inside]).removesuffix(".py").removesuffix(".__init__")
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1].removesuffix(".py")
    lib = [i for i, part in enumerate(parts[:-1]) if part.startswith("python3")]
    return parts[lib[-1] + 1].removesuffix(".py") if lib else path  # the standard library's


class _Counting:
    """`sys.setprofile` counting call events for the `with` block's duration, and by source file
    those made under one of the gateway's frames: a frame of levergate's code (not this
    module's client) somewhere down the stack from the call. A coroutine's stack runs down its
    awaiters, so the gateway's work is counted there, and the client's and the event loop's
    own bookkeeping is not, nor the timer heap's comparisons (`_TIMER_ORDER`). The collector
    is off inside the block (after one collection): a collection runs finalizers and
    `gc.callbacks` (Hypothesis installs one) under whichever frame allocated last, so the
    count would depend on the process's history."""

    def __init__(self) -> None:
        self.calls = 0
        self.by_file: Counter[str] = Counter()
        self._own: dict[str, bool] = {}
        self._before: Callable[..., Any] | None = None
        self._collecting = True

    def _is_own(self, path: str) -> bool:
        own = self._own.get(path)
        if own is None:
            own = self._own[path] = "levergate" in path.replace("\\", "/").split("/") and (
                module_of(path) != __name__
            )
        return own

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        del arg
        if event not in {"call", "c_call"} or frame.f_code in _TIMER_ORDER:
            return
        self.calls += 1
        below: FrameType | None = frame
        while below is not None:
            if self._is_own(below.f_code.co_filename):
                self.by_file[frame.f_code.co_filename] += 1
                return
            below = below.f_back

    def __enter__(self) -> None:
        self._collecting = gc.isenabled()
        gc.collect()
        gc.disable()
        self._before = sys.getprofile()
        sys.setprofile(self._profile)

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._before)
        if self._collecting:
            gc.enable()

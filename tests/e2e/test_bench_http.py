"""The bench's HTTP sender against a tiny OpenAI-like aiohttp server on loopback.

`FakeOpenAI` is also the target of the CLI end-to-end tests. In lock-step mode it waits, before
each stream write, until the client has read the previous one (the client reads its clock once
per socket read), then sets the client's clock: token timestamps are then exact, not timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from levergate.bench import BenchConfig
from levergate.bench.client import HttpSender, open_session
from levergate.protocol.sse import DONE_FRAME, encode


class StepClock:
    """`now()` returns `value` and counts the calls, so the server can tell a read happened."""

    def __init__(self) -> None:
        self.value = 0.0
        self.calls = 0

    def now(self) -> float:
        self.calls += 1
        return self.value

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_calls(self, count: int) -> None:
        while self.calls < count:
            await asyncio.sleep(0.001)


class FakeOpenAI:
    """Chat, completions and embeddings; every `fail_every`-th request answers 429; paths
    containing `hang`, `garbage`, `cut` or `status-500` misbehave accordingly."""

    def __init__(self, *, tokens: int = 3, fail_every: int = 0, lockstep: StepClock | None = None):
        self.tokens = tokens
        self.fail_every = fail_every
        self.lockstep = lockstep
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.release = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        path = request.path
        if self.fail_every and len(self.bodies) % self.fail_every == 0:
            return web.json_response({"error": {"message": "slow down"}}, status=429)
        if "status-500" in path:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        if "hang" in path:
            await self.release.wait()
        if "garbage" in path:
            return web.Response(body=b"not json", content_type="application/json")
        if path.endswith("/embeddings"):
            return web.json_response(
                {"data": [{"embedding": [0.1, 0.2]}], "usage": {"prompt_tokens": 7}}
            )
        if body.get("stream"):
            return await self.stream(request, body, cut="cut" in path)
        return web.json_response(self.whole(body, chat=path.endswith("/chat/completions")))

    def whole(self, body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
        count = min(self.tokens, body.get("max_tokens") or self.tokens)
        text = " ".join(["tok"] * count)
        choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        usage = {"prompt_tokens": 11, "completion_tokens": count, "total_tokens": 11 + count}
        usage["prompt_tokens_details"] = {"cached_tokens": 4}
        return {"choices": [{"index": 0, **choice, "finish_reason": "stop"}], "usage": usage}

    async def stream(
        self, request: web.Request, body: dict[str, Any], *, cut: bool
    ) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        chat = request.path.endswith("/chat/completions")
        count = min(self.tokens, body.get("max_tokens") or self.tokens)
        head = [{"delta": {"role": "assistant"}}, {"delta": {"content": ""}}] if chat else []
        frames = [encode(orjson.dumps({"choices": [c]})) for c in head]
        await self.write(reply, b"".join(frames) or b": keep-alive\n\n", step=0)
        for i in range(1, count + 1):
            choice = {"delta": {"content": f" t{i}"}} if chat else {"text": f" t{i}"}
            await self.write(reply, encode(orjson.dumps({"choices": [choice]})), step=i)
        if cut:
            return reply
        usage = {"prompt_tokens": 11, "completion_tokens": count}
        end = {"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": usage}
        await self.write(reply, encode(orjson.dumps(end)) + DONE_FRAME, step=count + 1)
        return reply

    async def write(self, reply: web.StreamResponse, data: bytes, *, step: int) -> None:
        if self.lockstep is not None:
            await self.lockstep.wait_calls(step)
            self.lockstep.value = float(step)
        await reply.write(data)


async def serve(fake: FakeOpenAI) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    server = FakeOpenAI(tokens=3, lockstep=StepClock())
    runner, url = await serve(server)
    yield server, url
    server.release.set()
    await runner.cleanup()


async def send_one(url: str, clock: StepClock, **values: Any) -> Any:
    config = BenchConfig(url=url, **values)
    async with open_session(config) as session:
        sender = HttpSender.of(session, config, clock=clock)
        return await sender.send(
            orjson.dumps({"model": "m", "max_tokens": 3, "stream": config.stream})
        )


async def test_ttft_is_the_first_generated_token_not_the_role_chunk(
    fake: tuple[FakeOpenAI, str],
) -> None:
    server, url = fake
    assert server.lockstep is not None
    outcome = await send_one(url, server.lockstep, stream=True)
    assert outcome.error is None
    # Step 0 (role + empty content) was read at clock 0; the first token was written at 1.
    assert outcome.first_token_at == 1.0
    assert outcome.itls == [1.0, 1.0]
    assert outcome.end_at == 4.0
    assert outcome.output_tokens == 3
    assert outcome.prompt_tokens == 11


async def test_completions_stream_counts_text_chunks(fake: tuple[FakeOpenAI, str]) -> None:
    server, url = fake
    assert server.lockstep is not None
    outcome = await send_one(url, server.lockstep, stream=True, endpoint="completions")
    assert outcome.error is None
    assert outcome.first_token_at == 1.0
    assert len(outcome.itls) == 2


async def test_whole_answers_report_usage(fake: tuple[FakeOpenAI, str]) -> None:
    server, url = fake
    assert server.lockstep is not None
    outcome = await send_one(url, server.lockstep, api_key=None, headers=(("X-T", "1"),))
    assert outcome.error is None
    assert outcome.first_token_at is None
    assert (outcome.output_tokens, outcome.prompt_tokens, outcome.cached_tokens) == (3, 11, 4)
    assert server.headers[-1]["X-T"] == "1"


@pytest.mark.parametrize(
    ("path", "values", "kind"),
    [
        ("/status-500", {}, "http_500"),
        ("/garbage", {}, "protocol"),
        ("/cut", {"stream": True}, "protocol"),
        ("/hang", {"timeout_s": 0.2}, "timeout"),
    ],
)
async def test_failures_are_classified_by_kind(
    fake: tuple[FakeOpenAI, str], path: str, values: dict[str, Any], kind: str
) -> None:
    server, url = fake
    server.lockstep = None
    outcome = await send_one(url + path + "/v1", StepClock(), **values)
    assert outcome.error == kind


async def test_a_refused_connection_is_a_connection_error() -> None:
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    outcome = await send_one(f"http://127.0.0.1:{port}", StepClock())
    assert outcome.error == "connection"


async def test_embeddings_are_sent_whole(fake: tuple[FakeOpenAI, str]) -> None:
    _, url = fake
    outcome = await send_one(url, StepClock(), endpoint="embeddings")
    assert outcome.error is None
    assert outcome.prompt_tokens == 7
    assert outcome.output_tokens is None

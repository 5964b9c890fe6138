"""Test doubles for the cache tests: a scriptable upstream and ready-made cache layers."""

from __future__ import annotations

import asyncio
from typing import Any

from levergate.config import Cache
from levergate.core.call import Call, Context
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.core.service import Service
from levergate.errors import UpstreamUnavailable
from levergate.layers.cache.entries import Entries
from levergate.layers.cache.exact import ExactCache
from levergate.layers.cache.stats import CacheStats
from levergate.stores.kv import KV
from levergate.stores.kv_memory import MemoryKV
from levergate.testing import ManualClock

USER = [{"role": "user", "content": "What is the capital of France?"}]


def chat(
    *,
    stream: bool = False,
    headers: dict[str, str] | None = None,
    tenant: str = "default",
    feature: str = "",
    **body: Any,
) -> Call:
    merged = {"model": "m", "messages": USER, "temperature": 0, "stream": stream, **body}
    ctx = Context("r", tenant=tenant, feature=feature, headers=headers or {})
    return Call(kind="chat", body=merged, ctx=ctx)


class FakeUpstream:
    """Answers every chat call with `words`, whole or as a stream of one chunk per word.

    `gate` holds every answer until set; `fail` raises before answering; `cut_after` breaks a
    stream after that many words; `finish` and `tool_call` shape the answer."""

    def __init__(
        self,
        *,
        words: tuple[str, ...] = ("Paris", "is", "the", "capital."),
        finish: str = "stop",
        tool_call: bool = False,
        fail: Exception | None = None,
        cut_after: int | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.words = words
        self.finish = finish
        self.tool_call = tool_call
        self.fail = fail
        self.cut_after = cut_after
        self.gate = gate
        self.calls: list[Call] = []
        self.closed = 0
        self.served_chunks = 0

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(call)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        if call.stream:
            return Stream(self._events())
        message: dict[str, Any] = {"role": "assistant", "content": " ".join(self.words)}
        if self.tool_call:
            message = {"role": "assistant", "content": None, "tool_calls": [_TOOL_CALL]}
        return Completed(
            data={
                "id": "cmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": self.finish}],
                "usage": {"prompt_tokens": 7, "completion_tokens": len(self.words),
                          "total_tokens": 7 + len(self.words)},
            }
        )  # fmt: skip

    async def _events(self) -> EventSource:
        head = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        try:
            yield Event.of({**head, "choices": [_choice({"role": "assistant", "content": ""})]})
            for i, word in enumerate(self.words):
                if self.cut_after is not None and i >= self.cut_after:
                    raise UpstreamUnavailable("cut", code="stream_interrupted")
                if self.gate is not None:
                    await self.gate.wait()
                self.served_chunks += 1
                text = word if i == 0 else " " + word
                yield Event.of({**head, "choices": [_choice({"content": text})]})
            if self.tool_call:
                yield Event.of(
                    {**head, "choices": [_choice({"tool_calls": [{**_TOOL_CALL, "index": 0}]})]}
                )
            yield Event.of({**head, "choices": [_choice({}, finish=self.finish)]})
            yield Event.of({**head, "choices": [], "usage": {"prompt_tokens": 7,
                            "completion_tokens": len(self.words), "total_tokens": 7}})  # fmt: skip
        finally:
            self.closed += 1


_TOOL_CALL = {"id": "call_1", "type": "function",
              "function": {"name": "lookup", "arguments": '{"city":"Paris"}'}}  # fmt: skip


def _choice(delta: dict[str, Any], *, finish: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def exact_cache(
    inner: Service,
    *,
    store: KV | None = None,
    settings: Cache | None = None,
    stats: CacheStats | None = None,
    clock: ManualClock | None = None,
) -> tuple[ExactCache, CacheStats]:
    stats = stats or CacheStats()
    kv = store if store is not None else MemoryKV(max_bytes=10_000_000, clock=ManualClock())
    layer = ExactCache(
        inner,
        settings=settings or Cache(),
        entries=Entries(kv, cache="exact", stats=stats),
        stats=stats,
        resolve=lambda alias: alias,
        clock=clock,
    )
    return layer, stats


async def drain(reply: Reply) -> list[dict[str, Any]]:
    assert isinstance(reply, Stream)
    try:
        return [event.json() async for event in reply]
    finally:
        await reply.aclose()


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )

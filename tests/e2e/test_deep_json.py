"""Deep JSON on every route JSON enters by (issue 20, items 1 and 2): one nesting bound at parse
time (`MAX_JSON_DEPTH`), below what every serializer on the way out accepts.

For each route a body is nested to exactly the bound — and then it must be answered, which
proves every writer behind the route (the upstream request, the stored response, the batch
result line, the translated tool schema, the async job) takes it — and one level deeper, and
300 deep (orjson parses 1,024 levels but writes only 254, so these used to be 500s with a
traceback, one of them after the upstream was paid): a 400 naming the bound, before any
upstream call. A real gateway on loopback, the simulator as the provider, raw HTTP as client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from levergate.config import MAX_JSON_DEPTH
from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_batch_api import batch_settings

Body = Callable[[Any], dict[str, Any]]
USER = [{"role": "user", "content": "hi"}]


PLACE = "__deep__"


def depth(value: Any, *, of: Any = None) -> int:
    """How deep `value` nests; with `of`, the number of containers around that value."""
    todo, deepest = [(value, 1)], 0
    while todo:
        item, level = todo.pop()
        if of is not None and item == of:
            return level - 1
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            todo += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest


def nested_to(total: int, body: Body) -> bytes:
    """`body` as JSON text, its placeholder an object nested so that the whole body is `total`
    levels deep (written as text: no serializer writes 1,000 levels)."""
    levels = total - depth(body(PLACE), of=PLACE)
    inner = b'{"d":' * (levels - 1) + b"{}" + b"}" * (levels - 1)
    text = orjson.dumps(body(PLACE)).replace(orjson.dumps(PLACE), inner)
    if total < 250:
        assert depth(orjson.loads(text)) == total
    return text


def schema(inner: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {}, "x-deep": inner}


ROUTES: dict[str, tuple[str, Body, int]] = {
    "chat tools": ("/v1/chat/completions", lambda d: {
        "model": "m", "messages": USER, "max_tokens": 2,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema(d)}}]}, 200),
    "chat stream tools": ("/v1/chat/completions", lambda d: {
        "model": "m", "messages": USER, "max_tokens": 2, "stream": True,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema(d)}}]}, 200),
    "embeddings extra field": ("/v1/embeddings", lambda d: {
        "model": "m", "input": "hi", "x_extra": d}, 200),
    "responses input item": ("/v1/responses", lambda d: {
        "model": "m", "input": [{"role": "user", "content": "hi", "x_extra": d}]}, 200),
    "responses tools": ("/v1/responses", lambda d: {
        "model": "m", "input": "hi",
        "tools": [{"type": "function", "name": "f", "parameters": schema(d)}]}, 200),
    "messages input_schema": ("/v1/messages", lambda d: {
        "model": "m", "max_tokens": 2, "messages": USER,
        "tools": [{"name": "f", "input_schema": schema(d)}]}, 200),
    "async submit": ("/v1/async/chat/completions", lambda d: {
        "model": "m", "messages": USER, "max_tokens": 2,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema(d)}}]}, 202),
}  # fmt: skip


@pytest.fixture(params=["translate", "native"])
async def gateway(
    request: pytest.FixtureRequest, sim: SimHandle, gateway_for: GatewayFactory, tmp_path: Path
) -> AsyncIterator[str]:
    upstream = {"name": "sim", "base_url": sim.base_url, "responses": request.param}
    async with gateway_for(
        upstreams=[upstream], models=[{"name": "*", "upstream": "sim"}],
        batch=batch_settings(tmp_path), async_requests={"enabled": True},
    ) as url:  # fmt: skip
        yield url.removesuffix("/v1")


def upstream_calls(sim: SimHandle) -> int:
    return sum(sim.simulator.stats.requests.values())


@pytest.mark.parametrize("route", sorted(ROUTES))
async def test_json_at_the_bound_is_answered_and_deeper_is_a_400_before_the_upstream(
    route: str, gateway: str, sim: SimHandle
) -> None:
    path, body, ok = ROUTES[route]
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        answer = await http.post(path, content=nested_to(MAX_JSON_DEPTH, body))
        assert answer.status_code == ok, answer.text
        for total in (MAX_JSON_DEPTH + 1, 300, 1000):
            before = upstream_calls(sim)
            refused = await http.post(path, content=nested_to(total, body))
            assert refused.status_code == 400, (total, refused.text)
            assert f"deeper than {MAX_JSON_DEPTH} levels" in refused.text
            assert upstream_calls(sim) == before


def line_with(inner: Any) -> dict[str, Any]:  # a Body: the chat route's, as a batch line
    body = ROUTES["chat tools"][1](inner)
    return {"custom_id": "deep", "method": "POST", "url": "/v1/chat/completions", "body": body}


async def upload(http: httpx.AsyncClient, lines: list[bytes]) -> httpx.Response:
    data = b"".join(item + b"\n" for item in lines)
    return await http.post("/v1/files", data={"purpose": "batch"},
                           files={"file": ("in.jsonl", data)})  # fmt: skip


async def test_a_batch_line_at_the_bound_runs_and_a_deeper_upload_is_refused(
    gateway: str,
) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        for total in (MAX_JSON_DEPTH + 1, 300):
            refused = await upload(http, [nested_to(total, line_with)])
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["code"] == "json_too_deep"
        uploaded = await upload(http, [nested_to(MAX_JSON_DEPTH, line_with)])
        assert uploaded.status_code == 200, uploaded.text
        made = await http.post("/v1/batches", json={
            "input_file_id": uploaded.json()["id"], "endpoint": "/v1/chat/completions",
            "completion_window": "24h"})  # fmt: skip
        batch = made.json()
        for _ in range(600):
            batch = (await http.get(f"/v1/batches/{batch['id']}")).json()
            if batch["status"] in ("completed", "failed"):
                break
            await asyncio.sleep(0.05)
        assert batch["status"] == "completed", batch
        assert batch["request_counts"] == {"total": 1, "completed": 1, "failed": 0}

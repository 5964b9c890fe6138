"""Canary secrets: unique canaries planted as every kind of secret the gateway holds — an upstream
key from the environment, one from the config file, several keys of one upstream, credentials in
a `base_url`, a client key — while an upstream that echoes whatever it receives drives every
error path (4xx/5xx JSON errors, an HTML error page, a mid-stream error event, a malformed
chunk, rate-limit headers, a hang, an unreachable endpoint). No canary may appear in any
response body or header, any log line of the gateway process, or `/metrics`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml
from aiohttp import web

from levergate.testing.ports import free_port
from tests.e2e.test_cli import LEVERGATE, wait_for

SECRETS = ("env", "config", "list1", "list2", "url", "client", "dead_url", "dead_key", "metrics")
CANARIES = {name: f"cnry-{name}-{uuid.uuid4().hex}" for name in SECRETS}
MODES = ("ok", "json400", "json500", "html502", "midstream", "malformed", "hang")
STREAM_MODES = ("midstream", "malformed", "json500")


async def _echo(request: web.Request) -> web.StreamResponse:
    """Answers as its `model` says, echoing every header it received into the answer."""
    body = await request.json()
    mode = str(body.get("model", "ok")).rsplit("-", 1)[-1]
    seen = " ".join(f"{k}={v}" for k, v in request.headers.items())
    if mode == "hang":
        await asyncio.sleep(30)
    if mode == "json400":
        error = {"message": f"bad request; you sent {seen}", "type": "invalid_request_error",
                 "param": request.headers.get("authorization"), "code": "echo"}  # fmt: skip
        return web.json_response({"error": error}, status=400)
    if mode == "json500":
        return web.json_response({"error": {"message": f"internal error: {seen}"}}, status=500)
    if mode == "html502":
        return web.Response(text=f"<html><body>proxy saw {seen}</body></html>", status=502,
                            content_type="text/html")  # fmt: skip
    if mode in {"midstream", "malformed"}:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"choices": [{"index": 0, "delta": {"content": "hello"}}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if mode == "midstream":
            event = {"error": {"message": f"upstream broke: {seen}", "type": "server_error"}}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        else:
            await response.write(f"data: not json at all {seen}\n\n".encode())
        return response
    answer = {"id": "x", "object": "chat.completion", "model": body.get("model"),
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                           "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip
    echoed = request.headers.get("authorization", "")
    return web.json_response(
        answer, headers={"x-ratelimit-remaining-requests": echoed, "x-request-id": echoed}
    )


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _echo)
    runner = web.AppRunner(app, shutdown_timeout=0.5)  # the "hang" handler is not waited for
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port
    await runner.cleanup()


def _settings(echo: int, port: int) -> dict[str, object]:
    c = CANARIES
    base = f"http://127.0.0.1:{echo}/v1"
    fast = {"connect": 1, "ttfb": 1, "idle": 1, "total": 2}
    upstreams: list[dict[str, object]] = [
        {"name": "env", "base_url": base, "api_key_env": "LG_CANARY_KEY"},
        {"name": "config", "base_url": base, "api_key": c["config"]},
        {"name": "list", "base_url": base, "api_keys": [c["list1"], c["list2"]]},
        {"name": "url", "base_url": f"http://lguser:{c['url']}@127.0.0.1:{echo}/v1"},
        {"name": "dead", "api_key": c["dead_key"],
         "base_url": f"http://lguser:{c['dead_url']}@127.0.0.1:{free_port()}/v1"},
    ]  # fmt: skip
    for upstream in upstreams:
        upstream["timeouts"] = fast
    models = [
        {"name": f"{u['name']}-{mode}", "upstream": u["name"]} for u in upstreams for mode in MODES
    ]
    return {
        "server": {"port": port},
        "upstreams": upstreams,
        "models": models,
        "auth": {"enabled": True, "keys": [{"key": c["client"], "tenant": "t"}]},
        "metrics": {"token": c["metrics"]},
        "traffic": {"retry": {"max_attempts": 2}},
    }


async def test_no_canary_leaves_the_gateway(
    tmp_path: Path, echo_port: int, processes: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    config = tmp_path / "levergate.yaml"
    config.write_text(yaml.safe_dump(_settings(echo_port, port)))
    env = {**os.environ, "LG_CANARY_KEY": CANARIES["env"]}
    with (tmp_path / "gateway.log").open("wb") as log:
        gateway = subprocess.Popen([*LEVERGATE, "serve", "--config", str(config)], env=env,
                                   stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    processes.append(gateway)
    wait_for(port, gateway)

    seen: list[str] = []
    base = f"http://127.0.0.1:{port}"
    client_auth = {"authorization": f"Bearer {CANARIES['client']}"}
    async with httpx.AsyncClient(base_url=base, timeout=20) as http:

        async def send(model: str, *, stream: bool, headers: dict[str, str]) -> None:
            body = {"model": model, "stream": stream, "max_tokens": 2,
                    "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
            response = await http.post("/v1/chat/completions", json=body, headers=headers)
            seen.append(response.text)
            seen.extend(f"{k}: {v}" for k, v in response.headers.items())

        for upstream in ("env", "config", "list", "url", "dead"):
            for mode in MODES:
                model = f"{upstream}-{mode}"
                await send(model, stream=False, headers=client_auth)
                if mode in STREAM_MODES:
                    await send(model, stream=True, headers=client_auth)
        # A wrong client key that is itself a secret-looking canary, and the real one mangled.
        await send("env-ok", stream=False, headers={"authorization": "Bearer " + uuid.uuid4().hex})
        await send("env-ok", stream=False, headers={"authorization": CANARIES["client"]})
        for path in ("/v1/models", "/healthz"):
            response = await http.get(path, headers=client_auth)
            assert response.status_code == 200
            seen.append(response.text)
        metrics = await http.get(
            "/metrics", headers={"authorization": f"Bearer {CANARIES['metrics']}"}
        )
        assert metrics.status_code == 200, "the /metrics check would prove nothing"
        assert "levergate_requests" in metrics.text
        seen.append(metrics.text)
    gateway.terminate()
    gateway.wait(timeout=15)
    logged = (tmp_path / "gateway.log").read_text(errors="replace")
    assert logged.strip(), "the gateway logged nothing: the log check would prove nothing"
    for name, canary in CANARIES.items():
        leaks = [text[:300] for text in seen if canary in text]
        assert not leaks, f"canary {name!r} reached a client: {leaks[:3]}"
        lines = [line for line in logged.splitlines() if canary in line]
        assert not lines, f"canary {name!r} reached the log: {lines[:3]}"

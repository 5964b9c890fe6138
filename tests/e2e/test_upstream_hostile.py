"""A hostile upstream (tests/e2e/hostile_upstream.py) against the real gateway on loopback.

Canary secrets are planted as an environment key, a config key and URL credentials, and as a
client key; the upstream echoes what it was sent in 4xx, 5xx and HTML error bodies and in a
mid-stream error event. No canary may reach any response body, header, SSE event or log line
(pytest's capture and the real `levergate serve` stderr). And the upstream's answers are
bounded: a huge error body, a huge answer and an event that never ends cost the gateway at
most its caps, and a malformed chunk ends the stream with an error event."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from tests.e2e.conftest import USER, GatewayFactory
from tests.e2e.hostile_upstream import Hostile, hostile_upstream

ENV_CANARY = "sk-canary-env-4f1d9a7c2b"
CONFIG_CANARY = "sk-canary-config-8e2a6b0d13"
EXTRA_CANARY = "sk-canary-extra-51c7e9f0aa"
URL_PASSWORD = "canary-url-pass-77b3"  # noqa: S105 - a planted canary, not a credential
CLIENT_CANARY = "lg-canary-client-0c9d2e"
# The Basic credential a client derives from the URL's `gateway:<password>`.
URL_BASIC = base64.b64encode(f"gateway:{URL_PASSWORD}".encode()).decode()
CANARIES = (ENV_CANARY, CONFIG_CANARY, EXTRA_CANARY, URL_PASSWORD, URL_BASIC, CLIENT_CANARY)
ECHOES = ("echo-400", "echo-401", "echo-422", "echo-500", "echo-503", "echo-html")


FLOODS = ("huge-error", "huge-body", "unterminated", "trickle")


def hostile_settings(upstream: Hostile, **env_upstream: Any) -> dict[str, Any]:
    url = f"http://gateway:{URL_PASSWORD}@127.0.0.1:{upstream.port}/v1"
    upstreams = [
        {
            "name": "env",
            "base_url": upstream.base_url,
            "api_key_env": "LG_TEST_CANARY_KEY",
            **env_upstream,
        },
        {
            "name": "cfg",
            "base_url": upstream.base_url,
            "api_key": CONFIG_CANARY,
            "api_keys": [EXTRA_CANARY],
        },
        {"name": "url", "base_url": url},
    ]
    names = [u["name"] for u in upstreams]
    behaviours = [*ECHOES, "echo-midstream", "malformed-chunk", *FLOODS]
    return {
        "upstreams": upstreams,
        "models": [{"name": f"{n}/{b}", "upstream": n} for n in names for b in behaviours],
        "auth": {"enabled": True, "keys": [{"key": CLIENT_CANARY, "tenant": "t"}]},
        "traffic": {"retry": {"enabled": False}, "ejection": {"enabled": False}},
        "log_level": "debug",
    }


@pytest.fixture
async def hostile(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Hostile]:
    monkeypatch.setenv("LG_TEST_CANARY_KEY", ENV_CANARY)
    async with hostile_upstream() as upstream:
        yield upstream


def leaks(text: str) -> list[str]:
    return [canary for canary in CANARIES if canary in text]


async def exchange(proxy: str, model: str, *, stream: bool) -> tuple[httpx.Response, str]:
    """One request; the response and everything it carried (status line aside) as text."""
    body = {"model": model, "messages": USER, "stream": stream}
    headers = {"authorization": f"Bearer {CLIENT_CANARY}"}
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", f"{proxy}/chat/completions", json=body, headers=headers) as response,
    ):
        raw = await response.aread()
    seen = "".join(f"{k}: {v}\n" for k, v in response.headers.items()) + raw.decode()
    return response, seen


async def test_no_canary_reaches_a_response_a_stream_or_a_log_line(
    hostile: Hostile, gateway_for: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with gateway_for(**hostile_settings(hostile)) as proxy:
        for upstream in ("env", "cfg", "url"):
            for behaviour in (*ECHOES, "echo-midstream"):
                for stream in (False, True):
                    response, seen = await exchange(proxy, f"{upstream}/{behaviour}", stream=stream)
                    assert "you sent authorization=" in seen or response.status_code in {200, 502}
                    assert leaks(seen) == [], (upstream, behaviour, stream)
    assert "you sent authorization=" in caplog.text  # the echoes were logged, scrubbed
    assert leaks(caplog.text) == []
    # The upstream's text cannot start a log line of its own.
    assert all("\n" not in r.getMessage() and "\r" not in r.getMessage() for r in caplog.records)


async def test_the_upstreams_error_object_reaches_the_client_intact(
    hostile: Hostile, gateway_for: GatewayFactory
) -> None:
    async with gateway_for(**hostile_settings(hostile)) as proxy:
        response, _ = await exchange(proxy, "env/echo-400", stream=False)
        key_fault, _ = await exchange(proxy, "cfg/echo-401", stream=False)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith("you sent authorization=Bearer [redacted] host=127.0.0.1:")
    assert (error["type"], error["param"], error["code"]) == ("upstream_type", "messages", "echoed")
    assert error["levergate"] == {"upstream": "env", "status": 400}
    # The gateway's own key refused: not the caller's fault, and not the caller's to read.
    assert key_fault.status_code == 502
    fault = key_fault.json()["error"]
    assert fault["message"] == "The upstream refused the gateway's credentials."
    assert fault["levergate"]["status"] == 401


async def test_a_malformed_chunk_ends_the_stream_with_an_error_event_not_done(
    hostile: Hostile, gateway_for: GatewayFactory
) -> None:
    async with gateway_for(**hostile_settings(hostile)) as proxy:
        response, seen = await exchange(proxy, "env/malformed-chunk", stream=True)
        _, midstream = await exchange(proxy, "env/echo-midstream", stream=True)
    assert response.status_code == 200  # the first token had gone out already
    assert '"content":"hello"' in seen
    assert "not json" not in seen
    assert "[DONE]" not in seen
    last = orjson.loads(seen.rstrip().rpartition("data: ")[2])
    assert last["error"]["code"] == "malformed_stream_event"
    assert "[DONE]" not in midstream
    assert '"levergate":{"upstream":"env","status":null}' in midstream


FLOOD_CASES = {  # behaviour: (streamed, status, error code)
    "huge-error": (False, 502, None),
    "huge-body": (False, 502, "upstream_response_too_large"),
    "unterminated": (True, 200, "upstream_event_too_large"),
    "trickle": (True, 200, "upstream_timeout"),
}


@pytest.mark.parametrize("behaviour", FLOOD_CASES)
async def test_an_upstreams_answer_costs_at_most_its_caps_and_its_total_timeout(
    hostile: Hostile, gateway_for: GatewayFactory, behaviour: str
) -> None:
    stream, status, code = FLOOD_CASES[behaviour]
    limits = {"body_bytes": 1 << 20, "error_body_bytes": 64 << 10, "event_bytes": 256 << 10}
    timeouts: dict[str, float] = {}
    if behaviour == "trickle":  # ~3 MB/s: under every cap, over the total timeout
        limits["event_bytes"] = 1 << 30
        timeouts["total"] = 1.0
    settings = hostile_settings(hostile, response_limits=limits, timeouts=timeouts)
    async with gateway_for(**settings) as proxy:
        response, seen = await exchange(proxy, f"env/{behaviour}", stream=stream)
        await asyncio.wait_for(hostile.flood_over.wait(), 30)
    # The gateway stopped reading and dropped the connection: the 64 MiB were never all sent.
    assert hostile.finished[behaviour] is False
    assert response.status_code == status
    assert len(seen) < 64 << 10  # what reached the client is a short error, not the flood
    error = orjson.loads(seen.rstrip().rpartition("data: ")[2] if stream else response.content)
    assert error["error"]["code"] == code
    assert "[DONE]" not in seen
    if behaviour == "huge-error":
        assert error["error"]["levergate"] == {"upstream": "env", "status": 500}


async def test_the_real_log_output_and_start_up_line_hold_no_canary(
    hostile: Hostile, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    settings = hostile_settings(hostile)
    port = _free_port()
    settings["server"] = {"port": port}
    config = tmp_path / "levergate.yaml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    log = tmp_path / "stderr.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "levergate.cli.main", "serve", "--config", str(config)],
            stderr=sink,
            stdout=subprocess.DEVNULL,
            env=os.environ.copy(),
        )
        processes.append(proc)
        proxy = f"http://127.0.0.1:{port}/v1"
        await _wait_ready(proxy)
        for model in ("env/echo-500", "cfg/echo-html", "url/echo-400", "url/echo-midstream"):
            _, seen = await exchange(proxy, model, stream=model.endswith("midstream"))
            assert leaks(seen) == []
        proc.terminate()
        proc.wait(timeout=15)
    text = log.read_text(encoding="utf-8")
    assert "levergate: serving on" in text
    assert "url=http://***@127.0.0.1:" in text  # URL credentials masked in the start-up line
    assert "answered 500: you sent authorization=Bearer [redacted]" in text
    assert leaks(text) == []
    assert "\nWARNING levergate.edge: forged line" not in text


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_ready(base: str) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            try:
                if (await http.get(base.removesuffix("/v1") + "/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("levergate serve did not start")

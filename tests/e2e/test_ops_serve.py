"""`levergate serve` as a real process, as an operator runs it: the access log (text and JSON
lines, secrets redacted) and the drain of a rolling restart (after SIGTERM `/readyz` answers 503
on new connections while requests are still served, then the process stops)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from levergate.testing.ports import free_port
from tests.e2e.conftest import USER
from tests.e2e.test_cli import LEVERGATE, start, wait_for
from tests.e2e.test_ops_cli import environment

SECRET = "sk-upstream-secret-0123456789"  # noqa: S105 - a test value
PATIENCE = 30.0


def serve(
    tmp_path: Path, sim_port: int, env: dict[str, str], processes: list[subprocess.Popen[bytes]]
) -> tuple[int, Path, subprocess.Popen[bytes]]:
    config = tmp_path / "levergate.yaml"
    config.write_text(
        f"upstreams: [{{name: sim, base_url: 'http://127.0.0.1:{sim_port}/v1', "
        f"api_key: {SECRET}}}]\nmodels: [{{name: '*', upstream: sim}}]\n"
    )
    port, log = free_port(), tmp_path / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*LEVERGATE, "serve", "--config", str(config), "--port", str(port)],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    processes.append(proc)
    wait_for(port, proc)
    return port, log, proc


@pytest.mark.parametrize("form", ["text", "json"])
async def test_the_access_log_has_a_line_per_request_with_its_request_id(
    form: str, processes: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    sim_port = free_port()
    start(["sim", "--port", str(sim_port)], processes)
    # At log level warning: the access log is asked for by name and written anyway.
    env = environment(LEVERGATE_SERVER__ACCESS_LOG="true", LEVERGATE_LOG_FORMAT=form,
                      LEVERGATE_LOG_LEVEL="warning")  # fmt: skip
    port, log, proc = serve(tmp_path, sim_port, env, processes)
    base = f"http://127.0.0.1:{port}"
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0) as sdk:
        await sdk.chat.completions.create(
            model="m", messages=USER, max_tokens=3, extra_headers={"x-request-id": "ops-whole"}
        )
        stream = await sdk.chat.completions.create(
            model="m", messages=USER, max_tokens=3, stream=True,
            extra_headers={"x-request-id": "ops-stream"},
        )  # fmt: skip
        assert [chunk async for chunk in stream]
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{base}/healthz?token={SECRET}")).status_code == 200
        assert (await http.get(f"{base}/nowhere")).status_code == 404
    proc.send_signal(signal.SIGTERM)
    await asyncio.to_thread(proc.wait, PATIENCE)
    text = log.read_text()
    assert SECRET not in text
    lines = text.splitlines()
    if form == "json":
        entries = [json.loads(line) for line in lines]  # every line is JSON, the banner too
        access = [e for e in entries if e["logger"] == "levergate.access"]
        assert any("serving on" in e["message"] for e in entries)
        whole = next(e for e in access if e["request_id"] == "ops-whole")
        assert (whole["method"], whole["path"], whole["status"]) == (
            "POST", "/v1/chat/completions", 200,
        )  # fmt: skip
        assert whole["duration_ms"] > 0
        assert whole["client"].startswith("127.0.0.1:")
        assert next(e for e in access if e["request_id"] == "ops-stream")["status"] == 200
        assert {(e["path"], e["status"]) for e in access} >= {
            ("/healthz?token=[redacted]", 200), ("/nowhere", 404),
        }  # fmt: skip
    else:
        access = [line for line in lines if "levergate.access" in line]
        assert any('"POST /v1/chat/completions" 200' in line and "ops-whole" in line
                   for line in access)  # fmt: skip
        assert any('"GET /healthz?token=[redacted]" 200' in line for line in access)
        assert any('"GET /nowhere" 404' in line for line in access)


async def test_after_sigterm_readyz_says_draining_while_requests_are_still_served(
    processes: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    sim_port = free_port()
    start(["sim", "--port", str(sim_port)], processes)
    env = environment(LEVERGATE_SERVER__DRAIN_SECONDS="60")
    port, log, proc = serve(tmp_path, sim_port, env, processes)
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{base}/readyz")).json() == {"status": "ok"}
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(PATIENCE):
            while (answer := await http.get(f"{base}/readyz")).status_code == 200:
                await asyncio.sleep(0.05)
        assert (answer.status_code, answer.json()) == (503, {"status": "draining"})
    # A new connection, after the signal: still served.
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0) as sdk:
        reply = await sdk.chat.completions.create(model="m", messages=USER, max_tokens=3)
        assert reply.choices[0].message.content
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)  # a second signal ends the drain at once
    assert await asyncio.to_thread(proc.wait, PATIENCE) in (0, -signal.SIGTERM, -signal.SIGINT)
    text = log.read_text()
    assert "draining: /readyz answers 503 for 60.0 s" in text
    assert "Traceback" not in text

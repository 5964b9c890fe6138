"""The gateway stopped while requests outlast `graceful_shutdown_seconds`: a stream's client gets
an OpenAI-style `shutting_down` error event (real processes: `levergate sim` decoding slowly,
`levergate serve` sent SIGTERM, the OpenAI SDK as the client), a request not yet answered gets a
503, and the log has one summary line and no traceback."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from pathlib import Path

import openai
import pytest

from levergate.simulator import LatencySettings, SimHandle, SimSettings, run_simulator
from levergate.testing.ports import free_port
from tests.e2e.conftest import USER, GatewayFactory
from tests.e2e.raw_http import BODY, MARGIN, connect, post_head, read_error
from tests.e2e.test_cli import LEVERGATE, start, wait_for

GRACE = 1.0


async def test_a_stream_that_outlasts_the_graceful_shutdown_ends_with_an_error_event(
    processes: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    sim_port, gw_port = free_port(), free_port()
    start(["sim", "--port", str(sim_port), "--tokens-per-second", "4"], processes)
    log_path = tmp_path / "gateway.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
    env["LEVERGATE_SERVER__GRACEFUL_SHUTDOWN_SECONDS"] = str(GRACE)
    with log_path.open("wb") as log:
        gateway = subprocess.Popen(
            [*LEVERGATE, "serve", "--upstream", f"http://127.0.0.1:{sim_port}/v1",
             "--port", str(gw_port)],
            env=env, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    processes.append(gateway)
    wait_for(gw_port, gateway)
    async with openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{gw_port}/v1", api_key="x", max_retries=0
    ) as sdk:
        stream = await sdk.chat.completions.create(
            model="anything", messages=USER, max_tokens=400, stream=True
        )  # 100 s of decoding at 4 tokens a second
        chunks = aiter(stream)
        first = await asyncio.wait_for(anext(chunks), MARGIN)
        assert first.choices
        gateway.send_signal(signal.SIGTERM)
        with pytest.raises(openai.APIError, match="server shutting down") as raised:
            await asyncio.wait_for(drain(chunks), GRACE + MARGIN)
        assert raised.value.code == "shutting_down"
    # uvicorn re-raises the signal it caught once it has shut down.
    assert await asyncio.to_thread(gateway.wait, MARGIN) in (0, -signal.SIGTERM)
    text = log_path.read_text()
    assert "Traceback" not in text
    ended = [line for line in text.splitlines() if "still running after" in line]
    assert len(ended) == 1
    assert "1 stream(s) and 0 other request(s)" in ended[0]


async def drain(chunks: object) -> None:
    async for _ in chunks:  # type: ignore[attr-defined]
        pass


async def test_a_request_not_yet_answered_at_the_end_of_the_grace_period_gets_a_503(
    gateway_at: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with run_simulator(SimSettings(port=0, latency=LatencySettings(ttft_ms=600_000))) as sim:
        server = {"graceful_shutdown_seconds": 0.2}
        async with gateway_at(sim.base_url, server=server) as url:
            reader, writer = await connect(url)
            writer.write(post_head() + BODY)
            await asyncio.wait_for(upstream_busy(sim), MARGIN)
        # Leaving the block stopped the server; the answer was written before it returned.
        status, error = await read_error(reader, within=MARGIN)
        writer.close()
    assert status == 503
    assert error["code"] == "shutting_down"
    assert "0 stream(s) and 1 other request(s)" in caplog.text
    assert "Traceback" not in caplog.text


async def upstream_busy(sim: SimHandle) -> None:
    while sim.simulator.stats.in_flight < 1:
        await asyncio.sleep(0.01)

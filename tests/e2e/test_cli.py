"""The commands as a user runs them: `levergate sim` and `levergate serve --upstream` as real
processes on loopback ports, driven by the OpenAI SDK."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai

from levergate.testing.ports import free_port
from tests.e2e.conftest import USER

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]


def wait_for(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"port {port} never opened")


def start(args: list[str], processes: list[subprocess.Popen[bytes]]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
    proc = subprocess.Popen(
        [*LEVERGATE, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    processes.append(proc)
    wait_for(int(args[args.index("--port") + 1]), proc)


async def test_serve_in_front_of_sim_as_real_processes(
    processes: list[subprocess.Popen[bytes]],
) -> None:
    sim_port, gw_port = free_port(), free_port()
    start(["sim", "--port", str(sim_port)], processes)
    start(
        ["serve", "--upstream", f"http://127.0.0.1:{sim_port}/v1", "--port", str(gw_port)],
        processes,
    )
    async with openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{gw_port}/v1", api_key="x", max_retries=0
    ) as sdk:
        reply = await sdk.chat.completions.create(model="anything", messages=USER, max_tokens=3)
        assert reply.usage is not None
        assert reply.usage.completion_tokens == 3
        stream = await sdk.chat.completions.create(
            model="anything", messages=USER, max_tokens=3, stream=True
        )
        assert len([c async for c in stream]) >= 3


def test_a_bad_config_file_is_one_clear_line_and_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("server: {port: 'eighty'}\n")
    result = subprocess.run(
        [*LEVERGATE, "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "server.port" in result.stderr
    assert "Traceback" not in result.stderr

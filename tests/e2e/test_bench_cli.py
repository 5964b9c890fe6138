"""`levergate bench` as a user runs it: a real process against a loopback OpenAI-like server."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from levergate.simulator import SimHandle
from tests.e2e.test_bench_http import FakeOpenAI, serve

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]


@pytest.fixture
async def server() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI(tokens=4, fail_every=5)
    runner, url = await serve(fake)
    yield fake, url
    fake.release.set()
    await runner.cleanup()


async def bench(*argv: str) -> tuple[int, str, str]:
    """Run the CLI without blocking the loop that serves it; returns (code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
    proc = await asyncio.create_subprocess_exec(
        *LEVERGATE,
        "bench",
        *argv,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(path.read_bytes())
    return data


async def test_closed_loop_streaming_run_writes_json_and_markdown(
    server: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    fake, url = server
    code, out, err = await bench(
        url, "--concurrency", "4", "--requests", "40", "--stream", "--max-tokens", "4",
        "--prompt-tokens", "50", "--api-key", "sk-bench", "--header", "X-Feature: bench",
        "--json", "--markdown", str(tmp_path / "r.md"),
    )  # fmt: skip
    assert code == 0, err
    result = orjson.loads(out)  # stdout is exactly one JSON document (`| jq` works)
    # stderr is not a terminal: progress comes as plain lines, never a rewritten one.
    assert "\r" not in err
    assert "\x1b" not in err
    assert err.startswith("sent ")
    assert (result["mode"], result["sent"], result["completed"]) == ("closed", 40, 40)
    assert result["errors"] == {"http_429": 8}
    assert result["ok"] == 32
    assert result["ttft_ms"]["count"] == 32
    assert result["itl_ms"]["count"] == 32 * 3
    assert result["mean_output_tokens"] == 4
    assert result["ttft_ms"]["p50"] <= result["total_ms"]["p50"]
    assert result["client_cpu_ms_per_request"] > 0
    assert result["incomplete"] == result["dropped"] == 0
    markdown = (tmp_path / "r.md").read_text()
    assert markdown.startswith("| mode | target rps | achieved rps |")
    assert "| closed c=4 |" in markdown
    assert "http_429: 8" in markdown
    # What the server saw: 40 distinct prompts, the key, the extra header, the stream flag.
    prompts = [body["messages"][0]["content"] for body in fake.bodies]
    assert len(set(prompts)) == 40
    assert all(h["Authorization"] == "Bearer sk-bench" for h in fake.headers)
    assert all(h["X-Feature"] == "bench" for h in fake.headers)
    assert all(body["stream"] and body["max_tokens"] == 4 for body in fake.bodies)


async def test_open_loop_prints_only_json_with_json_and_only_markdown_without(
    server: tuple[FakeOpenAI, str],
) -> None:
    fake, url = server
    fake.fail_every = 0
    args = (url + "/v1", "--rate", "100", "--requests", "30", "--endpoint", "completions")
    code, markdown, err = await bench(*args, "--quiet")
    assert code == 0, err
    assert markdown.startswith("| mode |")
    code, out, err = await bench(*args, "--quiet", "--json")
    assert code == 0, err
    result = orjson.loads(out)
    assert result["mode"] == "rate"
    assert result["target_rps"] == 100
    assert result["achieved_rps"] > 0
    assert result["sent"] == result["ok"] == 30
    assert result["ttft_ms"] == {"count": 0}
    assert result["total_ms"]["count"] == 30
    assert result["mean_output_tokens"] == 4
    assert "open uniform" in markdown
    assert all("prompt" in body for body in fake.bodies)


async def test_trace_replay_takes_lengths_and_shared_prefixes_from_the_trace(
    server: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    fake, url = server
    fake.fail_every = 0
    trace = tmp_path / "trace.jsonl"
    lines = [
        {"timestamp": 0, "input_length": 1100, "output_length": 2, "hash_ids": [1, 2, 3]},
        {"timestamp": 500, "input_length": 1300, "output_length": 3, "hash_ids": [1, 2, 4]},
        {"timestamp": 1000, "input_length": 300, "output_length": 1, "hash_ids": [5]},
    ]
    trace.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    code, _, err = await bench(
        url, "--trace", str(trace), "--time-scale", "0.01", "--repeat-rate", "0",
        "--json-out", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"), "--quiet",
    )  # fmt: skip
    assert code == 0, err
    assert err == ""  # --quiet: no progress
    result = load(tmp_path / "r.json")
    assert (result["mode"], result["sent"], result["ok"]) == ("trace", 3, 3)
    assert result["target_rps"] == pytest.approx(2 / 0.01)
    # Each trace line's request, found by its output length: at --time-scale 0.01 they are sent
    # 5 ms apart, and a loaded machine may deliver them in another order.
    by_output = {body["max_tokens"]: body for body in fake.bodies}
    assert sorted(by_output) == [1, 2, 3]
    first, second, third = (by_output[n]["messages"][0]["content"] for n in (2, 3, 1))
    shared = first.split(" <3> ")[0]
    assert second.startswith(shared)
    assert len(shared.split()) > 1000  # two 512-token blocks in common
    assert not third.startswith(first[:10])


async def test_an_unreachable_target_exits_1_with_connection_errors(tmp_path: Path) -> None:
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    code, out, _ = await bench(f"http://127.0.0.1:{port}", "--requests", "3", "--json")
    assert code == 1
    result = orjson.loads(out)
    assert result["errors"] == {"connection": 3}
    assert result["ok"] == 0


async def test_against_the_provider_simulator(sim: SimHandle, tmp_path: Path) -> None:
    code, out, err = await bench(
        sim.base_url, "--model", "sim-small", "--rate", "50", "--requests", "10", "--stream",
        "--max-tokens", "8", "--json-out", str(tmp_path / "r.json"), "--quiet",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("|")
    assert "\n| " in out
    result = load(tmp_path / "r.json")
    assert (result["sent"], result["ok"], result["errors"]) == (10, 10, {})
    assert result["ttft_ms"]["count"] == 10
    assert 0 < result["mean_output_tokens"] <= 8

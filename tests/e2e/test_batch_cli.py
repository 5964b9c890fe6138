"""`levergate batch run | status | cancel` as real processes: against a real `levergate serve`
on loopback with the simulator behind it, and in-process (`--config`). The CLI is SIGKILLed
mid-run and run again: every input line is in the output exactly once, and the rerun attached
to the same batch instead of starting another. Bad input gets a one-line message and its exit
code, never a traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import yaml

from levergate.simulator import LatencySettings, SimHandle, SimSettings, run_simulator
from levergate.testing.batch_crash import Gateway, requests, submit, write_config
from levergate.testing.ports import free_port

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
LINES = 300
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def slow_sim() -> AsyncIterator[SimHandle]:
    # 40 ms a request, 4 lines at a time: the batch lasts a few seconds, long enough to kill.
    async with run_simulator(SimSettings(port=0, latency=LatencySettings(ttft_ms=40.0))) as handle:
        yield handle


def write_input(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(item) + b"\n" for item in lines))
    return path


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEVERGATE_", "OPENAI_"))}
    env["COLUMNS"] = "120"
    return env


def start_cli(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(  # the test runs the real CLI
            [*LEVERGATE, "batch", *args], env=cli_env(), stdout=sink, stderr=sink
        )


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # the test runs the real CLI
        [*LEVERGATE, "batch", *args], env=cli_env(), capture_output=True, text=True,
        timeout=150, cwd=cwd, check=False,
    )  # fmt: skip


def upstream_calls(sim: SimHandle) -> int:
    return sum(sim.simulator.stats.requests.values())


async def kill_when(proc: subprocess.Popen[bytes], sim: SimHandle, *, after_calls: int) -> bool:
    """SIGKILL `proc` once the simulator has answered `after_calls` requests; False if the run
    ended first."""
    for _ in range(3000):
        if proc.poll() is not None:
            return False
        if upstream_calls(sim) >= after_calls:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        await asyncio.sleep(0.02)
    proc.kill()
    raise AssertionError("the CLI never got going")


def check_output(out: Path, lines: list[dict[str, Any]]) -> None:
    found = [orjson.loads(raw) for raw in out.read_bytes().splitlines() if raw.strip()]
    seen = Counter(item["custom_id"] for item in found)
    assert set(seen) == {item["custom_id"] for item in lines}
    assert max(seen.values()) == 1, [cid for cid, n in seen.items() if n > 1]
    by_id = {item["custom_id"]: item for item in lines}
    for item in found:
        usage = item["response"]["body"]["usage"]
        assert item["response"]["status_code"] == 200
        assert usage["completion_tokens"] == by_id[item["custom_id"]]["body"]["max_tokens"]


async def batch_ids(url: str) -> list[str]:
    async with openai.AsyncOpenAI(base_url=url, api_key="x") as client:
        return [batch.id async for batch in client.batches.list(limit=100)]


async def test_run_against_a_gateway_killed_and_rerun_attaches_to_the_same_batch(
    slow_sim: SimHandle, tmp_path: Path
) -> None:
    port = free_port()
    store = {"backend": "sqlite", "sqlite_path": str(tmp_path / "batch.sqlite3")}
    config = write_config(tmp_path / "gw.yaml", sim_url=slow_sim.base_url, port=port,
                          store=store, files=tmp_path / "files", concurrency=4)  # fmt: skip
    gateway = Gateway(config, port, tmp_path / "gw.log")
    lines = requests(LINES)
    source, out = write_input(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    await gateway.start()
    try:
        first = start_cli(
            "run", str(source), "-o", str(out), "--url", gateway.url, log=tmp_path / "1.log"
        )
        assert await kill_when(first, slow_sim, after_calls=LINES // 4)
        assert not out.exists()  # the output is written once the batch has ended
        again = await asyncio.to_thread(
            run_cli, "run", str(source), "-o", str(out), "--url", gateway.url
        )
        assert again.returncode == 0, again.stderr
        assert "resuming batch" in again.stderr
        assert f"batch completed: {LINES} completed, 0 failed" in again.stdout
        assert "errors: none" in again.stdout
        check_output(out, lines)
        assert len(await batch_ids(gateway.url)) == 1
        assert upstream_calls(slow_sim) == LINES  # the gateway ran on: no line ran twice
    finally:
        gateway.stop()


def in_process_config(tmp_path: Path, sim: SimHandle) -> Path:
    config = {
        "upstreams": [{"name": "sim", "base_url": sim.base_url}],
        "models": [{"name": "*", "upstream": "sim",
                    "price": {"input": 1.0, "output": 4.0, "cached_input": 0.25}}],
        "batch": {"enabled": True, "dir": str(tmp_path / "files"), "concurrency": 4,
                  "store": {"sqlite_path": str(tmp_path / "batch.sqlite3")},
                  "lease_seconds": 1.0, "poll_seconds": 0.05},
    }  # fmt: skip
    path = tmp_path / "inproc.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_in_process_run_killed_twice_resumes_from_its_store(
    slow_sim: SimHandle, tmp_path: Path
) -> None:
    config = in_process_config(tmp_path, slow_sim)
    lines = requests(LINES)
    source, out = write_input(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    args = (str(source), "-o", str(out), "--config", str(config))
    kills = 0
    for step in (1, 2):
        proc = start_cli("run", *args, log=tmp_path / f"{step}.log")
        kills += await kill_when(proc, slow_sim, after_calls=step * LINES // 3)
    assert kills == 2
    assert not out.exists()
    done = await asyncio.to_thread(run_cli, "run", *args)
    assert done.returncode == 0, done.stderr
    assert "resuming batch" in done.stderr
    assert f"batch completed: {LINES} completed, 0 failed" in done.stdout
    check_output(out, lines)
    # Lines in flight at each kill may have run twice upstream: at most the concurrency.
    assert LINES <= upstream_calls(slow_sim) <= LINES + kills * 4
    # Every line's usage is priced, whichever run answered it.
    cost_line = next(line for line in done.stdout.splitlines() if line.startswith("cost: $"))
    assert float(cost_line.split("$")[1].split()[0]) > 0
    # Running it once more is a no-op: nothing runs upstream, the same output.
    calls = upstream_calls(slow_sim)
    once_more = await asyncio.to_thread(run_cli, "run", *args)
    assert once_more.returncode == 0, once_more.stderr
    assert upstream_calls(slow_sim) == calls
    check_output(out, lines)


async def test_status_and_cancel_of_a_batch_on_a_gateway(
    slow_sim: SimHandle, tmp_path: Path
) -> None:
    port = free_port()
    store = {"backend": "sqlite", "sqlite_path": str(tmp_path / "batch.sqlite3")}
    config = write_config(tmp_path / "gw.yaml", sim_url=slow_sim.base_url, port=port,
                          store=store, files=tmp_path / "files", concurrency=1)  # fmt: skip
    gateway = Gateway(config, port, tmp_path / "gw.log")
    await gateway.start()
    try:
        batch_id = await submit(gateway.url, requests(500))
        shown = await asyncio.to_thread(run_cli, "status", batch_id, "--url", gateway.url)
        assert shown.returncode == 0, shown.stderr
        assert f"id: {batch_id}" in shown.stdout
        assert "total: " in shown.stdout
        as_json = await asyncio.to_thread(
            run_cli, "status", batch_id, "--url", gateway.url, "--json"
        )
        assert as_json.returncode == 0, as_json.stderr
        assert orjson.loads(as_json.stdout)["id"] == batch_id
        cancelled = await asyncio.to_thread(run_cli, "cancel", batch_id, "--url", gateway.url)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "status: cancelling" in cancelled.stdout or "status: cancelled" in cancelled.stdout
        for _ in range(300):
            shown = await asyncio.to_thread(run_cli, "status", batch_id, "--url", gateway.url)
            if "status: cancelled" in shown.stdout:
                break
            await asyncio.sleep(0.1)
        assert "status: cancelled" in shown.stdout
        unknown = await asyncio.to_thread(run_cli, "status", "batch_nope", "--url", gateway.url)
        assert unknown.returncode == 2
        assert "404" in unknown.stderr
        assert "Traceback" not in unknown.stderr
    finally:
        gateway.stop()


async def test_in_process_summary_counts_the_exact_cache_savings(
    slow_sim: SimHandle, tmp_path: Path
) -> None:
    config = in_process_config(tmp_path, slow_sim)
    lines = requests(40)
    for i, item in enumerate(lines):  # lines 20-39 ask what lines 0-19 asked: cache hits
        item["body"]["temperature"] = 0
        item["body"]["messages"][0]["content"] = f"line {i % 20}"
        item["body"]["max_tokens"] = 1 + (i % 20) % 7
    source, out = write_input(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    done = await asyncio.to_thread(run_cli, "run", str(source), "-o", str(out), "--config",
                                   str(config), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    check_output(out, lines)
    assert upstream_calls(slow_sim) < len(lines)
    assert "saved by exact: $" in done.stdout
    assert "answered by the gateway's caches" in done.stdout


async def test_run_over_url_prices_from_the_builtin_catalog(sim: SimHandle, tmp_path: Path) -> None:
    """Over --url the gateway's aliases are unknown; the lines name catalog models, so the
    summary prices them from the built-in table (it printed "not priced" unless --prices)."""
    port = free_port()
    store = {"backend": "sqlite", "sqlite_path": str(tmp_path / "batch.sqlite3")}
    config = write_config(tmp_path / "gw.yaml", sim_url=sim.base_url, port=port,
                          store=store, files=tmp_path / "files", concurrency=4)  # fmt: skip
    gateway = Gateway(config, port, tmp_path / "gw.log")
    lines = requests(6)
    for line in lines:
        line["body"]["model"] = "gpt-4o-mini"
    lines[-1]["body"]["model"] = "house-model"  # in no catalog: named, not priced
    source, out = write_input(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    await gateway.start()
    try:
        done = await asyncio.to_thread(run_cli, "run", str(source), "-o", str(out),
                                       "--url", gateway.url,
                                       "--no-progress")  # fmt: skip  # --quiet's old name
    finally:
        gateway.stop()
    assert done.returncode == 0, done.stderr
    answers = [orjson.loads(raw) for raw in out.read_bytes().splitlines()]
    usages = [a["response"]["body"]["usage"] for a in answers if a["custom_id"] != "line-5"]
    # gpt-4o-mini in models.yaml: $0.15 / $0.60 per million input / output tokens.
    expected = sum(u["prompt_tokens"] * 0.15 + u["completion_tokens"] * 0.60 for u in usages) / 1e6
    cost = next(line for line in done.stdout.splitlines() if line.startswith("cost: "))
    assert cost.startswith("cost: $"), done.stdout
    assert float(cost.split("$")[1].split()[0]) == pytest.approx(expected, abs=1e-6)
    assert "the built-in catalog" in cost
    assert "not priced (not in the built-in catalog): house-model" in done.stdout


async def test_run_json_is_one_document_on_stdout_and_progress_plain_lines_on_stderr(
    sim: SimHandle, tmp_path: Path
) -> None:
    """`--json`: the summary as one JSON document on stdout, nothing else there; off a terminal
    the progress is plain lines on stderr (the first at once), and `--quiet` hides them. A batch
    with a failed line exits 1, with or without `--json`."""
    config = in_process_config(tmp_path, sim)
    lines = requests(5)
    lines[4]["body"]["messages"] = "not a list"  # the gateway answers this line 400
    source, out = write_input(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    args = ("run", str(source), "-o", str(out), "--config", str(config))
    done = await asyncio.to_thread(run_cli, *args, "--json")
    assert done.returncode == 1, done.stderr
    summary = orjson.loads(done.stdout)  # exactly one document: anything more would not parse
    assert set(summary) >= {"id", "status", "endpoint", "completed", "failed", "tokens",
                            "cost_usd", "savings_usd", "output", "errors", "output_file_id",
                            "error_file_id"}  # fmt: skip
    assert summary["id"].startswith("batch_")
    assert (summary["status"], summary["completed"], summary["failed"]) == ("completed", 4, 1)
    assert summary["output"] == str(out)
    assert summary["errors"] == f"{out}.errors.jsonl"
    assert summary["cost_usd"] > 0
    assert f"started batch {summary['id']}" in done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("batch ")]
    assert progress, done.stderr  # plain lines, no terminal codes
    assert all("\x1b" not in line and " lines" in line for line in progress)
    assert "{" not in done.stderr
    again = await asyncio.to_thread(run_cli, *args, "--quiet")
    assert again.returncode == 1
    assert again.stdout.startswith("batch completed: 4 completed, 1 failed")
    assert again.stderr.splitlines() == [f"resuming batch {summary['id']} (/v1/chat/completions)"]

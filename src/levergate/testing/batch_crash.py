"""Kill-and-resume for the batch runner, shared by the e2e test (20 kills) and
benchmarks/batch_kill.py (100): real `levergate serve --config` processes in front of the
simulator, a batch submitted through the OpenAI SDK, SIGKILL at random moments, restarts, and
then every line of the output checked against the input."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import orjson
import yaml

from levergate.core.json_bound import parse_json

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]


def write_config(
    path: Path,
    *,
    sim_url: str,
    port: int,
    store: dict[str, Any],
    files: Path,
    concurrency: int,
    stores: dict[str, Any] | None = None,
) -> Path:
    config: dict[str, Any] = {
        "stores": stores or {},
        "server": {"port": port},
        "upstreams": [{"name": "sim", "base_url": sim_url}],
        "models": [{"name": "*", "upstream": "sim"}],
        "batch": {
            "enabled": True,
            "dir": str(files),
            "store": store,
            "concurrency": concurrency,
            "lease_seconds": 1.0,
            "poll_seconds": 0.05,
            "retry_seconds": 0.1,
        },
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Gateway:
    """One `levergate serve` process, started and killed at will."""

    def __init__(self, config: Path, port: int, log: Path) -> None:
        self.config, self.port, self.log = config, port, log
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*LEVERGATE, "serve", "--config", str(self.config)], env=env, stdout=log, stderr=log
            )
        for _ in range(600):
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited with {self.proc.returncode}: {self.log}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            await asyncio.sleep(0.05)
        raise AssertionError("the gateway never opened its port")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def requests(n: int) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "m",
                "max_tokens": 1 + i % 7,
                "messages": [{"role": "user", "content": f"line {i}"}],
            },
        }
        for i in range(n)
    ]


@dataclass
class Record:
    kills: int = 0
    kills_mid_batch: int = 0
    lines: int = 0
    lost: int = 0
    duplicated_in_output: int = 0
    mismatched: int = 0
    statuses: Counter[str] = field(default_factory=Counter)


async def submit(url: str, lines: list[dict[str, Any]], *, key: str = "x") -> str:
    data = b"".join(orjson.dumps(item) + b"\n" for item in lines)
    async with openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=5) as client:
        uploaded = await client.files.create(file=("in.jsonl", data), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        return batch.id


async def status(url: str, batch_id: str) -> str:
    async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=5) as client:
        return (await client.batches.retrieve(batch_id)).status


async def finish(
    url: str, batch_id: str, *, seconds: float = 120, key: str = "x"
) -> tuple[Any, list[Any]]:
    """Wait for the batch to end; (batch, every output and error line)."""
    async with openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=5) as client:
        for _ in range(int(seconds / 0.1)):
            batch = await client.batches.retrieve(batch_id)
            if batch.status in ("completed", "failed", "expired", "cancelled"):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the batch never ended: {batch.status}")
        found: list[Any] = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                content = (await client.files.content(file_id)).content
                found += [parse_json(raw) for raw in content.splitlines() if raw.strip()]
        return batch, found


def check(lines: list[dict[str, Any]], found: list[Any], record: Record) -> None:
    """Every custom_id exactly once across output and error, each answer the request's."""
    wanted = {item["custom_id"]: item for item in lines}
    seen = Counter(item["custom_id"] for item in found)
    record.lines = len(lines)
    record.lost = len(set(wanted) - set(seen))
    record.duplicated_in_output = sum(n - 1 for n in seen.values() if n > 1)
    for item in found:
        request = wanted.get(item["custom_id"])
        response = item.get("response") or {}
        body = response.get("body") or {}
        usage = body.get("usage") or {}
        ok = (
            request is not None
            and response.get("status_code") == 200
            and usage.get("completion_tokens") == request["body"]["max_tokens"]
        )
        record.mismatched += not ok


async def kill_loop(
    gateways: list[Gateway],
    *,
    batch_id: str,
    kills: int,
    rng: random.Random,
    record: Record,
    restart: bool = True,
) -> None:
    """Kill a random one of `gateways` at a random moment, `kills` times, restarting it."""
    for _ in range(kills):
        await asyncio.sleep(rng.uniform(0.05, 0.8))
        victim = rng.choice(gateways)
        survivor = next((g for g in gateways if g is not victim), victim)
        if await status(survivor.url if survivor is not victim else victim.url, batch_id) in (
            "validating",
            "in_progress",
            "finalizing",
        ):
            record.kills_mid_batch += 1
        victim.kill()
        record.kills += 1
        if restart:
            await victim.start()

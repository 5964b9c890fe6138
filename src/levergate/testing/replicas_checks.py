"""What a three-replica deployment (levergate/testing/replicas.py) is shown to do, through the load
balancer only; each check returns what it measured, the e2e test asserts on it and
benchmarks/replicas.py reports it."""

from __future__ import annotations

import asyncio
import math
import signal
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import openai

from levergate.testing.batch_crash import Record, check, finish, requests, submit
from levergate.testing.replicas import Deployment

# The provider's limits: 100 requests and 16,000 tokens in any 10 s (a minute, compressed six
# times), per provider key. The simulator enforces 2% more on its own sliding windows, so a 429
# from it means the replicas together let through more than 1.02x a limit in some window.
# Requests of 8 output tokens (~18 in all) meet the RPM limit first, of 300 (~310) the TPM one.
RPM, TPM, WINDOW = 100, 16_000, 10.0
KEY_LIMITS = {"rpm": RPM, "tpm": TPM, "window_seconds": WINDOW}
SIM_LIMITS = ("--rpm", str(math.floor(RPM * 1.02)), "--tpm", str(math.floor(TPM * 1.02)))
PHASES = {"rpm": (8, RPM / WINDOW), "tpm": (300, TPM / 310 / WINDOW)}


def sdk(d: Deployment, key: str | None = None, retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=d.url, api_key=key or d.key, max_retries=retries,
                              timeout=60)  # fmt: skip


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


@dataclass
class Load:
    offered: int = 0
    ok: int = 0
    limited: int = 0  # shed by the gateway: the shared limit at work
    failures: list[str] = field(default_factory=list)


async def offered_load(d: Deployment, *, rate: float, seconds: float, max_tokens: int = 8) -> Load:
    """Open-loop: a request every 1/rate seconds, whatever the answers (unique and sampled, so
    no cache answers any)."""
    load = Load()
    async with sdk(d) as client:

        async def one(i: int) -> None:
            try:
                text = f"load {max_tokens} {i}"
                await client.chat.completions.create(model="m", messages=ask(text),
                                                     max_tokens=max_tokens)  # fmt: skip
                load.ok += 1
            except openai.APIStatusError as exc:
                # The shared limit at work: a 429, or a 503 when the upstream is at capacity
                # for longer than the request may wait (traffic.max_wait).
                if exc.status_code == 429 or "at capacity" in exc.message:
                    load.limited += 1
                else:
                    load.failures.append(repr(exc))
            except openai.APIError as exc:
                load.failures.append(repr(exc))

        tasks = []
        n = int(rate * seconds)
        for i in range(n):
            tasks.append(asyncio.create_task(one(i)))
            await asyncio.sleep(1 / rate)
        load.offered = n
        await asyncio.gather(*tasks)
    return load


@dataclass
class Limited:
    limit: str  # which limit binds: rpm or tpm
    load: Load
    upstream_requests: int  # reached the provider during the phase
    upstream_429s: int  # the provider refused: over 1.02x the limit in some window


async def shared_limits(
    d: Deployment, *, windows: int, seconds: float | None = None
) -> list[Limited]:
    """Each limit in turn at 3x its rate for `windows` windows, through the balancer; or for
    `seconds` (at 3x its rate, a limit sheds from the first second)."""
    await d.sim_config({"limits": {"window_seconds": WINDOW}})
    found = []
    for name, (max_tokens, rate) in PHASES.items():
        before = await d.sim_stats()
        load = await offered_load(d, rate=3 * rate, seconds=seconds or windows * WINDOW,
                                  max_tokens=max_tokens)  # fmt: skip
        after = await d.sim_stats()
        found.append(Limited(name, load, generations(after) - generations(before),
                             after["rate_limited"] - before["rate_limited"]))  # fmt: skip
    return found


def generations(stats: dict[str, Any]) -> int:
    return int(stats["requests_by_endpoint"].get("/v1/chat/completions", 0))


async def exact_cache(d: Deployment) -> tuple[tuple[str, str], tuple[str, str], int]:
    """A question asked twice through the balancer: ((replica, cache) of each, upstream calls
    made by the second)."""
    messages = ask(f"exact {uuid.uuid4().hex}")
    async with sdk(d) as client:
        create = client.chat.completions.with_raw_response.create
        first = await create(model="m", messages=messages, temperature=0)
        before = generations(await d.sim_stats())
        second = await create(model="m", messages=messages, temperature=0)
        calls = generations(await d.sim_stats()) - before
    return (
        (first.headers["x-replica"], first.headers["x-levergate-cache"]),
        (second.headers["x-replica"], second.headers["x-levergate-cache"]),
        calls,
    )


async def semantic_cache(d: Deployment, *, tries: int = 600) -> dict[str, str]:
    """An answer stored through one replica, then its paraphrase through the balancer until
    every replica has answered it: {replica: its x-levergate-cache}."""
    feature = {"x-levergate-feature": "faq"}
    async with sdk(d) as client:
        await client.chat.completions.create(
            model="m", messages=ask("What is the capital of France?"), temperature=0,
            max_tokens=8, extra_headers=feature)  # fmt: skip
        seen: dict[str, str] = {}
        for _ in range(tries):
            # no-store: a miss (the index not yet caught up) stores nothing of its own.
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=ask("what's the capital of France"), temperature=0,
                max_tokens=8, extra_headers={**feature, "cache-control": "no-store"},
            )  # fmt: skip
            replica, outcome = raw.headers["x-replica"], raw.headers["x-levergate-cache"]
            if seen.get(replica) != "semantic":
                seen[replica] = outcome
            if len(seen) == len(d.replicas) and set(seen.values()) == {"semantic"}:
                break
            await asyncio.sleep(0.02)
    return seen


async def keys_everywhere(d: Deployment) -> tuple[Counter[str], Counter[str]]:
    """A key made through the admin API answers on every replica, and its revocation holds on
    every replica: (replicas that served it, replicas that refused it once revoked)."""
    key, key_id = await d.new_key()
    served: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    async with sdk(d, key) as client:
        for i in range(2 * len(d.replicas)):
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=ask(f"key {i}"), max_tokens=4)  # fmt: skip
            served[raw.headers["x-replica"]] += 1
        assert (await d.admin("DELETE", f"/admin/keys/{key_id}")).status_code == 200
        for i in range(2 * len(d.replicas)):
            try:
                await client.chat.completions.create(model="m", messages=ask(f"k{i}"))
            except openai.AuthenticationError as exc:
                refused[exc.response.headers.get("x-replica", "?")] += 1
    return served, refused


@dataclass
class Budget:
    budget: float
    cost: float  # of one request (all alike)
    admitted: int
    spent: float
    refused: int


async def budget(d: Deployment, *, requests_worth: int = 12, clients: int = 3) -> Budget:
    """A key whose daily budget holds `requests_worth` requests, spent by `clients` concurrent
    clients through the balancer until every one is refused."""
    probe, probe_id = await d.new_key()
    async with sdk(d, probe) as client:
        await client.chat.completions.create(model="m", messages=ask("budget 0"), max_tokens=8)
    cost = await spent(d, probe_id, above=0.0)
    limit = cost * (requests_worth - 0.5)
    key, key_id = await d.new_key(daily_budget_usd=limit)
    admitted = refused = 0

    async def spender(_client: int) -> None:
        nonlocal admitted, refused
        # Retries: a 503 while the provider's shared rate limit is spent charges nothing.
        async with sdk(d, key, retries=8) as client:
            for i in range(10 * requests_worth):
                try:
                    await client.chat.completions.create(
                        model="m", messages=ask(f"budget {i % 10}"), max_tokens=8)  # fmt: skip
                    admitted += 1
                except openai.RateLimitError as exc:
                    if exc.code != "budget_exceeded":
                        raise
                    refused += 1
                    return

    await asyncio.gather(*(spender(c) for c in range(clients)))
    total = await spent(d, key_id, above=0.0)
    return Budget(limit, cost, admitted, total, refused)


async def spent(d: Deployment, key_id: str, *, above: float) -> float:
    for _ in range(200):
        found = (await d.admin("GET", f"/admin/keys/{key_id}/spend")).json()["day"]["spent_usd"]
        if found is not None and found > above:
            return float(found)
        await asyncio.sleep(0.05)
    raise AssertionError("no spend recorded")


async def batch_with_a_kill(d: Deployment, *, lines: int, victim: int = 1) -> Record:
    """A Batch API job created through the balancer; one replica SIGKILLed once lines are
    being answered, started again; every line checked once the job ends."""
    record = Record()
    wanted = requests(lines)
    batch_id = await submit_as(d, wanted)
    async with sdk(d, retries=5) as client:
        for _ in range(1200):
            job = await client.batches.retrieve(batch_id)
            if job.request_counts and job.request_counts.completed > 0:
                break
            await asyncio.sleep(0.05)
    replica = d.replicas[victim]
    assert replica.proc is not None
    replica.proc.send_signal(signal.SIGKILL)
    replica.proc.wait()
    record.kills = 1
    record.kills_mid_batch = int(job.status == "in_progress")
    await replica.start()
    _, found = await finish_as(d, batch_id)
    check(wanted, found, record)
    return record


async def submit_as(d: Deployment, lines: list[dict[str, Any]]) -> str:
    return await submit(d.url, lines, key=d.key)


async def finish_as(d: Deployment, batch_id: str) -> tuple[Any, list[Any]]:
    return await finish(d.url, batch_id, key=d.key, seconds=240)


async def rolling_restart(
    d: Deployment, *, clients: int = 6, reload: bool = True, restarts: int | None = None
) -> Load:
    """Steady load (half of it streams) through the balancer while each replica in turn (the
    first `restarts` of them, if given) is restarted (SIGTERM, drain, start), then each is sent
    SIGHUP (a reload): what clients saw."""
    load = Load()
    stop = asyncio.Event()

    async def client_loop(c: int) -> None:
        async with sdk(d) as client:
            i = 0
            while not stop.is_set():
                i += 1
                load.offered += 1
                try:
                    if c % 2:
                        stream = await client.chat.completions.create(
                            model="m", messages=ask(f"roll {c} {i}"), max_tokens=16, stream=True
                        )
                        chunks = [chunk async for chunk in stream]  # fmt: skip
                        assert chunks[-1].choices[0].finish_reason == "length"
                    else:
                        await client.chat.completions.create(
                            model="m", messages=ask(f"roll {c} {i}"), max_tokens=16)  # fmt: skip
                    load.ok += 1
                except (openai.APIError, AssertionError) as exc:
                    load.failures.append(repr(exc))

    tasks = [asyncio.create_task(client_loop(c)) for c in range(clients)]
    try:
        for index in range(len(d.replicas) if restarts is None else restarts):
            await d.restart(index)
        if reload:
            for replica in d.replicas:
                assert replica.proc is not None
                replica.proc.send_signal(signal.SIGHUP)
                await asyncio.sleep(0.3)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    return load

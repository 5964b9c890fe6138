"""The soak (issue 20's acceptance run): a real `levergate serve` on loopback with every feature on
(exact and embeddings caches in Redis, shared rate limits, the Batch API on PostgreSQL or SQLite
with per-tenant quotas, the Responses store, uploads, async requests, webhooks) in front of
`levergate sim`, two tenants with keys of their own, and blocks alternating solo / attacked:

- the victim (tenant `victim`) sends ordinary chat, streamed chat and embeddings requests at a
  steady, modest rate in every block (open loop: each request starts on its schedule, whatever
  the others do), and each one must succeed;
- in the attacked blocks the hostile tenant (`soak_attack` beside this module, a process of its
  own on 127.0.0.2, so the per-peer connection limit counts it apart) does issue 20's items 1,
  3, 4, 5 and 6 at once: deep-nested batch lines, Responses chains of large turns, thousands of
  queued batch lines and async requests whose webhook receiver hangs, upload floods to the quotas
  and stalled uploads, and duplicate-heavy embeddings at the bound read slowly; open loop too,
  at fixed rates (`soak_attack.RATES`), so every code under test gets the same attack;
- before each solo block, a quiet wait: until the gateway and the simulator are idle (what an
  attack left behind, its cancelled batches' last lines and its queued async requests, done), so
  a solo block measures the victim alone.

The verdict is the victim's: 0 errors, and its p99 over the attacked blocks against its p99 over
the solo blocks (alternating cancels the machine's drift). tests/e2e/test_soak.py runs it for a
few minutes; benchmarks/soak.py for as long as it is asked to.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from collections import Counter
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from levergate.testing.ports import free_port

# The folder holding this levergate package (a checkout's src/): the processes started here
# import this copy, not whichever one the interpreter has installed.
SRC = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
ATTACKER = "levergate.testing.soak_attack"
LEVERGATE = [PYTHON, "-m", "levergate.cli.main"]
VICTIM_KEY, HOSTILE_KEY = "lg-soak-victim-key", "lg-soak-hostile-key"
HOSTILE_ADDRESS = "127.0.0.2"
REDIS_URL = "redis://127.0.0.1:6379/0"
WEBHOOK_SECRET = "soak-webhook-secret"  # noqa: S105 - a test receiver's
# The provider: a realistic (if fast) model, 40 ms to the first token and 1,000 tokens a
# second, 1,536-dimension embeddings (text-embedding-3-small's width: the attack's answers are
# as large as a real provider's would be).
SIM_ARGS = ("--ttft-ms", "40", "--tokens-per-second", "1000", "--embedding-dim", "1536")
# The gateway's own time in a request (its pipeline's, the upstream's wait excluded): where a
# slow victim answer spent its time, the gateway or what is behind it.
OVERHEAD_HEADER = "x-levergate-overhead-ms"


@dataclass(frozen=True, slots=True)
class Plan:
    """How long and how hard: blocks alternate solo, attacked, solo, attacked, ..."""

    block_seconds: float = 30.0
    rounds: int = 2
    victim_rate: float = 16.0  # requests a second, split chat / stream / embeddings
    settle_seconds: float = 4.0  # after an attack is stopped and cleaned up, before a solo block
    quiet_seconds: float = 30.0  # then at most this long until the gateway and simulator idle
    warmup_seconds: float = 3.0  # after an attack starts, before the victim's block counts
    postgres_dsn: str | None = None  # None: the job store in SQLite
    only: str = ""  # the attack's items, comma-separated (soak_attack.py); "": all
    # The CPUs the attacker may run on (`taskset -c`, e.g. "1"), "": any. A diagnosis, not the
    # acceptance run: how much of the victim's tail is the attacker's own client work competing
    # with the gateway for this machine's cores, which a real attacker's machine would not.
    attacker_cpus: str = ""


@dataclass
class Block:
    kind: str  # "solo" or "attacked"
    latencies: dict[str, list[float]] = field(default_factory=dict)
    # Per answered request: (ms, kind, overhead ms, seconds into the block it started).
    samples: list[tuple[float, str, float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    attack: dict[str, Any] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds the block took per process
    # The machine's 1-minute load average as the block ended: on a shared machine, the other
    # tenants' load inflates solo and attacked blocks alike and flattens their ratio.
    load: float = 0.0
    quiet_wait: float = 0.0  # seconds waited for the gateway and simulator to idle before it

    def all_ms(self) -> list[float]:
        return sorted(ms for values in self.latencies.values() for ms in values)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _redis_stores(prefix: str) -> dict[str, Any]:
    """The cache, the limits and the Responses store in the Redis shared by the replicas."""
    return {
        "cache": {
            "enabled": True,
            "store": {
                "backend": "redis",
                "redis_url": REDIS_URL,
                "redis_prefix": f"{prefix}cache:",
            },
        },
        "traffic": {
            "store": "redis",
            "redis_url": REDIS_URL,
            "redis_prefix": f"{prefix}{{limits}}:",
        },
        "responses": {
            "store": {
                "backend": "redis",
                "redis_url": REDIS_URL,
                "redis_prefix": f"{prefix}{{responses}}:",
                "tenant_bytes": 32 << 20,
                "max_bytes": 128 << 20,
            }
        },
    }


def gateway_config(tmp: Path, *, sim_port: int, port: int, hook_port: int, plan: Plan,
                   prefix: str) -> Path:  # fmt: skip
    """Every feature on, the quotas and bounds small enough that the attack reaches them."""
    store: dict[str, Any] = {"sqlite_path": str(tmp / "jobs.sqlite3")}
    if plan.postgres_dsn:
        store = {"backend": "postgres", "postgres_dsn": plan.postgres_dsn, "timeout_seconds": 5}
    settings = {
        # Large bodies (the attack's Responses turns and embeddings at the bound; the victim's
        # are ~200 bytes) one at a time per tenant (server/large.py).
        "server": {
            "port": port,
            "max_connections_per_peer": 256,
            "large_requests": {"min_bytes": 16 << 10, "per_tenant": 1},
        },
        "upstreams": [
            {
                "name": "sim",
                "base_url": f"http://127.0.0.1:{sim_port}/v1",
                "key_limits": {"rpm": 60_000},
            }
        ],
        "models": [{"name": "*", "upstream": "sim"}],
        "auth": {
            "enabled": True,
            "keys": [
                {"key": VICTIM_KEY, "tenant": "victim"},
                {"key": HOSTILE_KEY, "tenant": "hostile"},
            ],
        },
        **_redis_stores(prefix),
        "batch": {
            "enabled": True,
            "dir": str(tmp / "files"),
            "store": store,
            "concurrency": 64,
            "sweep_seconds": 10,
            "quotas": {
                "stored_bytes": 256 << 20,
                "files": 40,
                "queued_batches": 6,
                "pending_async_requests": 300,
            },
        },
        "async_requests": {"enabled": True},
        "webhooks": {
            "targets": {
                "hang": {
                    "url": f"http://127.0.0.1:{hook_port}/hook",
                    "secret": WEBHOOK_SECRET,
                    "timeout_seconds": 60,
                }
            }
        },
    }
    path = tmp / "levergate.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


# The victim: ordinary requests, each different (so the upstream answers them, not the cache).


async def _chat(http: httpx.AsyncClient, n: int) -> httpx.Response:
    body = {"model": "gpt-4o-mini", "max_tokens": 16,
            "messages": [{"role": "user", "content": f"victim question {n}"}]}  # fmt: skip
    answer = await http.post("/chat/completions", json=body)
    if answer.status_code != 200 or not answer.json()["choices"][0]["message"]["content"]:
        raise RuntimeError(f"chat: {answer.status_code} {answer.text[:200]}")
    return answer


async def _stream(http: httpx.AsyncClient, n: int) -> httpx.Response:
    body = {"model": "gpt-4o-mini", "max_tokens": 16, "stream": True,
            "messages": [{"role": "user", "content": f"victim stream {n}"}]}  # fmt: skip
    async with http.stream("POST", "/chat/completions", json=body) as answer:
        text = (await answer.aread()).decode()
    if answer.status_code != 200 or not text.rstrip().endswith("data: [DONE]"):
        raise RuntimeError(f"stream: {answer.status_code} {text[-200:]}")
    if '"error"' in text:
        raise RuntimeError(f"stream: an error event: {text[-300:]}")
    return answer


async def _embed(http: httpx.AsyncClient, n: int) -> httpx.Response:
    body = {"model": "text-embedding-3-small", "input": [f"victim text {n} {i}" for i in range(4)]}
    answer = await http.post("/embeddings", json=body)
    if answer.status_code != 200 or len(answer.json()["data"]) != 4:
        raise RuntimeError(f"embeddings: {answer.status_code} {answer.text[:200]}")
    return answer


VICTIM_MIX = (("chat", _chat), ("stream", _stream), ("chat", _chat), ("embeddings", _embed))


async def victim(port: int, seconds: float, rate: float, block: Block, start: int) -> None:
    """`rate` requests a second for `seconds`, open loop, into `block`."""
    headers = {"authorization": f"Bearer {VICTIM_KEY}"}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1", headers=headers,
                                 timeout=60, limits=limits) as http:  # fmt: skip

        async def one(n: int) -> None:
            kind, call = VICTIM_MIX[n % len(VICTIM_MIX)]
            started = time.perf_counter()
            try:
                answer = await call(http, n)
            except (httpx.HTTPError, RuntimeError, ValueError, KeyError) as exc:
                block.errors.append(f"{kind}: {exc!r}"[:400])
                return
            ms = (time.perf_counter() - started) * 1000
            block.latencies.setdefault(kind, []).append(ms)
            overhead = float(answer.headers.get(OVERHEAD_HEADER, "nan"))
            block.samples.append((ms, kind, overhead, started - began))

        tasks = []
        began = time.perf_counter()
        for n in range(int(seconds * rate)):
            await asyncio.sleep(max(0.0, began + n / rate - time.perf_counter()))
            tasks.append(asyncio.create_task(one(start + n)))
        await asyncio.gather(*tasks)


# The processes.


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=SRC)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 60.0) -> None:
    import socket

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None:
            raise RuntimeError(f"the process for port {port} exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open within {seconds:g} s")


@dataclass
class Rig:
    tmp: Path
    port: int
    gateway: subprocess.Popen[bytes]
    sim: subprocess.Popen[bytes]
    prefix: str


@contextmanager
def rig(tmp: Path, plan: Plan) -> Any:
    """The simulator, the hanging webhook receiver and the gateway, stopped afterwards (and the
    run's Redis keys removed)."""
    sim_port, hook_port, port = free_port(), free_port(), free_port()
    prefix = f"levergate:soak:{uuid.uuid4().hex[:12]}:"
    started: list[subprocess.Popen[bytes]] = []
    try:
        # The provider's workers for large requests are up before the first block, as a
        # provider's hardware is (simulator/isolation.py): their start is not the attack's.
        sim_config = tmp / "sim.yaml"
        sim_config.write_text(yaml.safe_dump({"isolation": {"prestart": True}}))
        started.append(_spawn([*LEVERGATE, "sim", *SIM_ARGS, "--config", str(sim_config),
                               "--port", str(sim_port)], tmp / "sim.log"))  # fmt: skip
        _wait_port(sim_port, started[-1])
        started.append(_spawn([PYTHON, "-m", ATTACKER, "hang", "--port",
                               str(hook_port)], tmp / "hook.log"))  # fmt: skip
        _wait_port(hook_port, started[-1])
        config = gateway_config(tmp, sim_port=sim_port, port=port, hook_port=hook_port,
                                plan=plan, prefix=prefix)  # fmt: skip
        started.append(_spawn([*LEVERGATE, "serve", "--config", str(config)], tmp / "gw.log"))
        _wait_port(port, started[-1])
        yield Rig(tmp, port, started[-1], started[0], prefix)
    finally:
        for proc in reversed(started):
            _stop(proc)
        _forget_redis(prefix)


def _forget_redis(prefix: str) -> None:
    import redis

    with suppress(redis.RedisError):
        client = redis.Redis.from_url(REDIS_URL)
        for name in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(name)
        client.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    """This process's CPU seconds: the victim client's (the blocks run one at a time)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


# Idle: the gateway and the simulator together under this many CPU seconds in a second (their
# background loops use ~0.01; the victim's 16 requests a second ~0.07).
QUIET_CPU = 0.05


def quiet(r: Rig, seconds: float) -> float:
    """Wait, at most `seconds`, for a second in which the gateway and the simulator were idle
    (`QUIET_CPU`); the seconds waited."""
    began = time.monotonic()
    used = cpu_seconds(r.gateway.pid) + cpu_seconds(r.sim.pid)
    while time.monotonic() - began < seconds:
        time.sleep(1.0)
        before, used = used, cpu_seconds(r.gateway.pid) + cpu_seconds(r.sim.pid)
        if used - before < QUIET_CPU:
            break
    return round(time.monotonic() - began, 1)


def rss_mib(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1]) // 1024
    return 0


def run_block(r: Rig, plan: Plan, kind: str, index: int) -> Block:
    block = Block(kind)
    start = index * 1_000_000
    if kind == "solo":
        block.quiet_wait = quiet(r, plan.quiet_seconds)
    before = cpu_seconds(r.gateway.pid), cpu_seconds(r.sim.pid), _own_cpu()
    try:
        _run_block(r, plan, block, start, index)
    finally:
        block.cpu.update(gateway=round(cpu_seconds(r.gateway.pid) - before[0], 1),
                         sim=round(cpu_seconds(r.sim.pid) - before[1], 1),
                         victim=round(_own_cpu() - before[2], 1))  # fmt: skip
        block.load = round(os.getloadavg()[0], 2)
    return block


def _run_block(r: Rig, plan: Plan, block: Block, start: int, index: int) -> None:
    kind = block.kind
    if kind == "solo":
        asyncio.run(victim(r.port, plan.block_seconds, plan.victim_rate, block, start))
        return
    out = r.tmp / f"attack-{index}.json"
    attack_seconds = plan.warmup_seconds + plan.block_seconds
    args = ["attack", "--port", str(r.port), "--key", HOSTILE_KEY, "--only", plan.only,
            "--seconds", f"{attack_seconds:.1f}", "--out", str(out)]  # fmt: skip
    pinned = ["taskset", "-c", plan.attacker_cpus] if plan.attacker_cpus else []
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    attacker = _spawn([*pinned, PYTHON, "-m", ATTACKER, *args], r.tmp / f"attack-{index}.log")
    try:
        time.sleep(plan.warmup_seconds)
        asyncio.run(victim(r.port, plan.block_seconds, plan.victim_rate, block, start))
        attacker.wait(timeout=plan.block_seconds + 120)
    finally:
        if attacker.poll() is None:
            _stop(attacker)
    # The only child waited for in the block: its CPU time is the attacker's.
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    block.cpu["attacker"] = round(after.ru_utime + after.ru_stime - children.ru_utime
                                  - children.ru_stime, 1)  # fmt: skip
    if out.exists():
        block.attack = json.loads(out.read_text())
    else:
        block.attack = {"error": (r.tmp / f"attack-{index}.log").read_text()[-2000:]}
    time.sleep(plan.settle_seconds)


def soak(tmp: Path, plan: Plan) -> dict[str, Any]:
    """Run the blocks; the summary (see `summarize`)."""
    blocks: list[Block] = []
    with rig(tmp, plan) as r:
        # One warm-up request of each kind: connection pools and the first compilations.
        warm = Block("warmup")
        asyncio.run(victim(r.port, 2.0, plan.victim_rate, warm, 10_000_000))
        rss = [rss_mib(r.gateway.pid)]
        for index in range(plan.rounds * 2):
            kind = ("solo", "attacked")[index % 2]
            blocks.append(run_block(r, plan, kind, index))
            rss.append(rss_mib(r.gateway.pid))
        alive = r.gateway.poll() is None
    log = (tmp / "gw.log").read_text(errors="replace")
    return summarize(blocks, plan, alive=alive, tracebacks=log.count("Traceback"), rss=rss)


def summarize(blocks: list[Block], plan: Plan, *, alive: bool, tracebacks: int,
              rss: list[int]) -> dict[str, Any]:  # fmt: skip
    def pooled(kind: str) -> list[float]:
        return [ms for b in blocks if b.kind == kind for ms in b.all_ms()]

    solo, attacked = pooled("solo"), pooled("attacked")
    attack_totals: Counter[str] = Counter()
    for b in blocks:
        for name, value in b.attack.get("outcomes", {}).items():
            attack_totals[name] += value
    p99_solo, p99_attacked = percentile(solo, 0.99), percentile(attacked, 0.99)
    return {
        "plan": {
            "block_seconds": plan.block_seconds,
            "rounds": plan.rounds,
            "victim_rate": plan.victim_rate,
            "job_store": "postgres" if plan.postgres_dsn else "sqlite",
            "sim": " ".join(SIM_ARGS),
            "attack_items": plan.only or "1,3,4,5,6",
            "attacker_cpus": plan.attacker_cpus or "any",
            "attack_rates": _rates(),
            "quiet_seconds": plan.quiet_seconds,
        },
        "blocks": [_block_row(b) for b in blocks],
        "victim_requests": {"solo": len(solo), "attacked": len(attacked)},
        "victim_errors": [e for b in blocks for e in b.errors],
        "victim_p50_ms": {
            "solo": round(percentile(solo, 0.5), 1),
            "attacked": round(percentile(attacked, 0.5), 1),
        },
        "victim_p99_ms": {"solo": round(p99_solo, 1), "attacked": round(p99_attacked, 1)},
        "p99_ratio": round(p99_attacked / p99_solo, 2),
        "attack_outcomes": dict(sorted(attack_totals.items())),
        "gateway_alive": alive,
        "tracebacks": tracebacks,
        "gateway_rss_mib": rss,
    }


def _block_row(b: Block) -> dict[str, Any]:
    ms = b.all_ms()
    return {
        "kind": b.kind,
        "requests": len(ms),
        "errors": len(b.errors),
        "p50_ms": round(percentile(ms, 0.5), 1),
        "p99_ms": round(percentile(ms, 0.99), 1),
        "max_ms": round(max(ms, default=float("nan")), 1),
        "p99_by_kind_ms": {
            k: round(percentile(v, 0.99), 1) for k, v in sorted(b.latencies.items())
        },
        # The gateway's own share of the victim's time, and the slowest answers: (ms, kind, the
        # gateway's ms of it, seconds into the block).
        "overhead_p99_ms": round(percentile([s[2] for s in b.samples], 0.99), 1),
        "slowest": [
            (round(ms, 1), kind, round(overhead, 1), round(at, 1))
            for ms, kind, overhead, at in sorted(b.samples, reverse=True)[:5]
        ],
        "attack_requests": sum(b.attack.get("outcomes", {}).values()),
        "cpu_seconds": b.cpu,
        "load_1m": b.load,
        "quiet_wait_s": b.quiet_wait,
    }


_CPU = ("gateway", "sim", "attacker", "victim")


def _rates() -> str:
    from levergate.testing.soak_attack import RATES

    return ", ".join(f"{kind} {rate:g}/s" for kind, rate in RATES.items())


def markdown(result: dict[str, Any], *, load: str) -> str:
    plan = result["plan"]
    rows = [
        f"| {i + 1} | {b['kind']} | {b['requests']} | {b['errors']} | {b['p50_ms']} | "
        f"{b['p99_ms']} | {b['max_ms']} | {b['overhead_p99_ms']} | {b['attack_requests']} | "
        f"{' / '.join(str(b['cpu_seconds'].get(p, '-')) for p in _CPU)} | {b['load_1m']} | "
        f"{b['quiet_wait_s'] if b['kind'] == 'solo' else '-'} |"
        for i, b in enumerate(result["blocks"])
    ]
    p50, p99 = result["victim_p50_ms"], result["victim_p99_ms"]
    head = (
        "Two tenants on one `levergate serve` with every feature on (exact and embeddings caches "
        f"and shared limits in Redis, the Batch API on {plan['job_store']} with per-tenant "
        "quotas, the Responses store, uploads, async requests, webhooks) in front of `levergate "
        f"sim {plan['sim']}`. The victim sends chat / stream / chat / embeddings at "
        f"{plan['victim_rate']:g} requests/s (open loop) in every block of "
        f"{plan['block_seconds']:g} s; in the attacked blocks the hostile tenant does issue 20's "
        f"items {plan['attack_items']} at once (levergate/testing/soak_attack.py), open loop at "
        f"{plan['attack_rates']}; before each solo block the gateway and the simulator are let "
        f"go idle (at most {plan['quiet_seconds']:g} s, the seconds in the table). Gateway p99 "
        "is the victim's `x-levergate-overhead-ms` (the gateway's own time, the upstream's "
        "excluded); CPU seconds are the gateway's / the simulator's / the attacker's / the "
        "victim client's during the block; load is the machine's 1-minute "
        f"load average as the block ended. Machine load: {load}."
    )
    verdict = (
        f"Victim p99 solo {p99['solo']} ms, attacked {p99['attacked']} ms: "
        f"**{result['p99_ratio']}x** (bound 2x); p50 {p50['solo']} / {p50['attacked']} ms. "
        f"Victim errors: {len(result['victim_errors'])}. Gateway alive: "
        f"{result['gateway_alive']}, tracebacks in its log: {result['tracebacks']}, RSS after "
        f"each block (MiB): {result['gateway_rss_mib']}."
    )
    columns = ("block", "kind", "victim requests", "errors", "p50 ms", "p99 ms", "max ms",
               "gateway p99 ms", "hostile", "CPU s", "load", "quiet s")  # fmt: skip
    table = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    outcomes = f"What the hostile tenant got: {result['attack_outcomes']}"
    lines = [f"# Soak ({result['date']}, {result['machine']})", "", head, "", *table, *rows]
    return "\n".join([*lines, "", verdict, "", outcomes, ""])

"""Three `levergate serve` replicas behind a real HAProxy, sharing Redis and PostgreSQL through
`stores.default`, with `levergate sim` as the provider: the rig of tests/e2e/test_replicas.py
and benchmarks/replicas.py. Clients talk to HAProxy only; HAProxy (started here in the
foreground, `-db`, from a generated file) sends a replica traffic while its `/readyz` answers
200 and names the replica that answered in `x-replica`."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from redis.asyncio import Redis

from levergate.testing.batch_crash import Gateway
from levergate.testing.ports import free_port

REDIS_URL = "redis://127.0.0.1:6379/15"
ADMIN = "admin-token-0123456789"
AS_ADMIN = {"authorization": f"Bearer {ADMIN}"}
PROVIDER_KEY = "sk-provider"
# $100 per million tokens: a simulated answer of ~30 tokens costs ~$0.003.
PRICE = {"input": 100.0, "output": 100.0}
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists()
                                        else None)  # fmt: skip
    if found is None:
        raise RuntimeError("haproxy is not installed (.ci/run installs Debian's package)")
    return found


def haproxy_config(port: int, replicas: list[int]) -> str:
    servers = "\n".join(
        f"  server r{i} 127.0.0.1:{p} check inter 200ms fall 2 rise 1"
        for i, p in enumerate(replicas)
    )
    return f"""global
  maxconn 4096
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  # A busy replica answers /readyz late, not never: a slow check is no reason to drain it.
  timeout check 2s
  # A connection refused, or closed with no answer (a replica going away between HAProxy's
  # checks), is retried on another replica; an answer begun is never retried.
  retries 3
  option redispatch 1
  retry-on conn-failure empty-response
frontend levergate
  bind 127.0.0.1:{port}
  default_backend replicas
backend replicas
  balance roundrobin
  option httpchk GET /readyz
  http-check expect status 200
  http-response set-header x-replica %s
{servers}
"""


@dataclass
class Deployment:
    url: str  # the load balancer's /v1
    sim_url: str
    replicas: list[Gateway]
    space: str
    key: str = ""  # a gateway key made through the admin API, for clients
    logs: list[Path] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.url.removesuffix("/v1")

    async def sim_stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            return dict((await http.get(f"{self.sim_url.removesuffix('/v1')}/sim/stats")).json())

    async def sim_config(self, patch: dict[str, Any]) -> None:
        async with httpx.AsyncClient() as http:
            done = await http.post(f"{self.sim_url.removesuffix('/v1')}/sim/config", json=patch)
            done.raise_for_status()

    async def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=30) as http:
            return await http.request(method, path, headers=AS_ADMIN, **kwargs)

    async def new_key(self, **policy: Any) -> tuple[str, str]:
        made = await self.admin("POST", "/admin/keys", json={"tenant": "acme", **policy})
        assert made.status_code == 201, made.text
        return str(made.json()["key"]), str(made.json()["id"])

    async def restart(self, index: int) -> None:
        """SIGTERM one replica (it drains: /readyz 503, then closes), start it again, and wait
        until the balancer sends it traffic."""
        replica = self.replicas[index]
        assert replica.proc is not None
        replica.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(replica.proc.wait, 60)
        await replica.start()
        await self.wait_in_rotation({f"r{index}"})

    async def wait_in_rotation(self, names: set[str], *, seconds: float = 60) -> None:
        """Until each named replica has answered a request through the balancer."""
        seen: set[str] = set()
        deadline = time.monotonic() + seconds
        async with httpx.AsyncClient(base_url=self.base) as http:
            while not names <= seen:
                assert time.monotonic() < deadline, f"never in rotation: {names - seen}"
                try:
                    reply = await http.get("/readyz")
                except httpx.TransportError:  # the balancer itself still starting
                    reply = None
                if reply is not None and reply.status_code == 200:
                    seen.add(reply.headers.get("x-replica", ""))
                await asyncio.sleep(0.02)


def replica_config(
    path: Path, *, port: int, sim_url: str, dsn: str, space: str, files: Path,
    key_limits: dict[str, Any] | None,
) -> Path:  # fmt: skip
    upstream: dict[str, Any] = {"name": "sim", "base_url": sim_url, "api_key": PROVIDER_KEY}
    if key_limits is not None:
        upstream["key_limits"] = key_limits
    config = {
        "server": {"port": port, "drain_seconds": 1.0, "graceful_shutdown_seconds": 20},
        "stores": {"default": {"redis_url": REDIS_URL, "postgres_dsn": dsn}},
        "upstreams": [upstream],
        "models": [{"name": "m", "upstream": "sim", "price": PRICE}],
        "admin": {"enabled": True, "token": ADMIN},
        # Key prefixes of this run's own (isolation from other runs on one Redis only).
        "auth": {"enabled": True,
                 "store": {"redis_prefix": f"t:{{{space}}}:keys:", "cache_seconds": 0},
                 "spend": {"redis_prefix": f"t:{space}:spend:", "flush_seconds": 0.02}},
        "cache": {"store": {"redis_prefix": f"t:{space}:cache:"},
                  "features": {"faq": {"semantic": True}}, "semantic": {"threshold": 0.8}},
        "traffic": {"redis_prefix": f"t:{{{space}}}:limits:",
                    "max_wait": {"interactive": 0.2, "default": 0.2, "batch": 0.2}},
        "responses": {"store": {"redis_prefix": f"t:{{{space}}}:responses:"}},
        "batch": {"enabled": True, "dir": str(files), "concurrency": 4, "lease_seconds": 1.0,
                  "poll_seconds": 0.05, "retry_seconds": 0.1},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


async def sim_process(
    stack: AsyncExitStack, workdir: Path, *flags: str
) -> str:  # the provider as its own process
    log = (workdir / "sim.log").open("wb")
    stack.callback(log.close)
    proc = await asyncio.create_subprocess_exec(
        *LEVERGATE, "sim", "--port", "0", *flags, stdout=asyncio.subprocess.PIPE, stderr=log
    )

    async def stop() -> None:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)

    stack.push_async_callback(stop)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    match = re.search(r"(http://\S+/v1)", line)
    assert match, line
    return match.group(1)


def start_haproxy(stack: AsyncExitStack, workdir: Path, port: int, replicas: list[int]) -> None:
    config = workdir / "haproxy.cfg"
    config.write_text(haproxy_config(port, replicas))
    log = (workdir / "haproxy.log").open("wb")
    stack.callback(log.close)
    proc = subprocess.Popen([haproxy_binary(), "-db", "-f", str(config)], stdout=log, stderr=log)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    stack.callback(stop)


def stop_all(gateways: list[Gateway]) -> None:
    """SIGTERM to every replica at once, then wait for each: their drains overlap."""
    for gateway in gateways:
        if gateway.proc is not None and gateway.proc.poll() is None:
            gateway.proc.terminate()
    for gateway in gateways:
        gateway.stop()  # waits for it (the signal again is harmless), kills it after 15 s


async def purge(space: str) -> None:
    raw = Redis.from_url(REDIS_URL)
    names = [n async for n in raw.scan_iter(match=f"t:*{space}*")]
    if names:
        await raw.delete(*names)
    await raw.aclose()


@asynccontextmanager
async def deployment(
    workdir: Path, dsn: str, *, sim_flags: tuple[str, ...] = (),
    key_limits: dict[str, Any] | None = None, replicas: int = 3,
) -> AsyncIterator[Deployment]:  # fmt: skip
    space = uuid.uuid4().hex
    async with AsyncExitStack() as stack:
        stack.push_async_callback(purge, space)
        sim_url = await sim_process(stack, workdir, *sim_flags)
        ports = [free_port() for _ in range(replicas)]
        gateways: list[Gateway] = []
        stack.callback(stop_all, gateways)
        for i, port in enumerate(ports):
            config = replica_config(workdir / f"r{i}.yaml", port=port, sim_url=sim_url, dsn=dsn,
                                    space=space, files=workdir / "files",
                                    key_limits=key_limits)  # fmt: skip
            gateways.append(Gateway(config, port, workdir / f"r{i}.log"))
        # Started at once: the job store's tables are made under a lock (batch/stores/postgres.py).
        await asyncio.gather(*(gateway.start() for gateway in gateways))
        lb = free_port()
        start_haproxy(stack, workdir, lb, ports)
        found = Deployment(f"http://127.0.0.1:{lb}/v1", sim_url, gateways, space,
                           logs=[g.log for g in gateways])  # fmt: skip
        await found.wait_in_rotation({f"r{i}" for i in range(replicas)})
        found.key, _ = await found.new_key()
        yield found

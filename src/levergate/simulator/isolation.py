"""Large requests prepared in worker processes (`SimSettings.isolation`).

A hosted provider serves each request on hardware of its own, so one customer's huge prompt
never makes another customer's small request wait. The simulator answers on one event loop,
and a chat request carrying a 32 MiB conversation costs it a few hundred milliseconds of CPU
(parsing the JSON, rendering the prompt, hashing every prompt-cache prefix, hashing the prompt
for the answer's words): measured in the soak (benchmarks/soak.py), every other request on the
loop waited for it. So the work that is a pure function of the request and the settings is
split from the work on the simulator's state:

- `parse` (pure): the body parsed and checked, the caller's key, the answer's `Spec`, its tier.
  The loop runs it for a small request; `prepare` runs it in a worker process for a large one
  and adds the expensive products of the prompt's text — its prompt-cache prefix digests, the
  answer's words, the per-request latency draws — then drops the text, so only a few bytes per
  thousand prompt tokens come back.
- `Simulator.answer_parsed` (state: stats, admission, the prompt cache, ids) runs on the loop,
  with those products when they were computed elsewhere. The answer is the same either way.

Chat and completion requests go to a worker from `min_bytes` (they are what carries a
conversation), embeddings requests from `embeddings_min_bytes`: there the worker computes the
whole reply (the vectors and their JSON), the loop only admits and times it.

A body of `SHARED_FILE_BYTES` or more reaches its worker as a file in /dev/shm (memory, not
disk) that the worker reads and removes, not through the pool's pipe: the pipe's feeder thread
pickles the body and writes it 64 KiB at a time, holding the GIL between writes, and the loop
waited on it; the file is written by a thread, whose `write` lets go of the GIL.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import tempfile
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from levergate.simulator import embeddings, generate, tiers
from levergate.simulator.faults import FAULT_HEADER, Fault
from levergate.simulator.prompt_cache import prefix_digests
from levergate.simulator.responses import Reply, SimError
from levergate.simulator.settings import SimSettings

# Bodies at least this large go to a worker as a file in `SHARED_DIR`; None there: the pipe.
SHARED_FILE_BYTES = 1 << 20
SHARED_DIR = "/dev/shm" if Path("/dev/shm").is_dir() else None  # noqa: S108 - mkstemp's: 0600
ISOLATED_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completion",
                  "/v1/embeddings": "embedding"}  # fmt: skip


@dataclass(slots=True)
class Parsed:
    """A generation request as far as it is known without the simulator's state. `error`: the
    request is refused (what was known before the refusal is kept, for the stats)."""

    key: str | None = None
    cache_key: str | None = None
    forced: Fault | None = None
    body: dict[str, Any] | None = None  # an embeddings request's body
    spec: generate.Spec | None = None
    tier: tiers.SimTier = tiers.SimTier.DEFAULT
    error: Reply | None = None
    # Computed in a worker from the prompt's text (then dropped from `spec.prompts`):
    digests: list[list[bytes]] | None = None  # each prompt's prompt-cache prefix digests
    choices: list[list[str]] | None = None  # the answer's words (generate.choose)
    rng: random.Random | None = None  # the per-request latency draws (tiers.request_rng)
    # An embeddings request's reply and prompt tokens (embeddings.embeddings_reply).
    embedded: tuple[Reply, int] | None = None


def parse(
    kind: str, headers: Mapping[str, str], raw: bytes | bytearray, settings: SimSettings
) -> Parsed:
    """Route -> parse + validate, a provider's checks in a provider's order."""
    parsed = Parsed()
    try:
        body = generate.check_request(kind, generate.parse_json(raw))
        _check_model(body["model"], settings)
        parsed.key = generate.bearer_key(headers.get("authorization"))
        if "prompt_cache_key" in body:
            parsed.cache_key = generate.prompt_cache_key(body["prompt_cache_key"])
        if FAULT_HEADER in headers:
            parsed.forced = generate.forced_fault(headers[FAULT_HEADER])
        if kind == "embedding":
            parsed.body = body
            return parsed
        spec = generate.parse_spec(chat=kind == "chat", body=body, settings=settings,
                                   natural=headers.get(generate.OUTPUT_TOKENS_HEADER))  # fmt: skip
        parsed.tier = tiers.asked(body, settings.tiers, model=spec.model)
        parsed.spec = spec
    except SimError as exc:
        parsed.error = exc.reply()
    return parsed


def _check_model(model: str, settings: SimSettings) -> None:
    if settings.strict_models and model not in settings.models:
        raise SimError(404, f"The model '{model}' does not exist", code="model_not_found",
                       param="model")  # fmt: skip


def prepare(
    kind: str, headers: Mapping[str, str], raw: bytes | bytearray, settings: SimSettings
) -> Parsed:
    """`parse`, then everything the answer needs from the prompt's text (a worker's job)."""
    parsed = parse(kind, headers, raw, settings)
    if parsed.body is not None and parsed.error is None:  # embeddings: the whole reply
        try:
            parsed.embedded = embeddings.embeddings_reply(body=parsed.body, settings=settings)
        except SimError as exc:
            parsed.error = exc.reply()
        return parsed
    spec = parsed.spec
    if spec is None or parsed.key is None:
        return parsed
    cache = settings.prompt_cache
    scope = f"{parsed.key}\x00{spec.model}"
    parsed.digests = [
        prefix_digests(scope=scope, text=text, settings=cache)
        if cache.enabled and count >= cache.min_tokens
        else []
        for text, count in spec.prompts
    ]
    parsed.choices = generate.choose(spec=spec, seed=settings.seed)
    if settings.latency.per_request:
        parsed.rng = tiers.request_rng(settings.seed, model=spec.model, tier=parsed.tier,
                                       prompt=spec.prompts[0][0])  # fmt: skip
    spec.prompts = [("", count) for _, count in spec.prompts]
    return parsed


def prepare_file(kind: str, headers: Mapping[str, str], path: str, settings: SimSettings) -> Parsed:
    """`prepare` of the body in the file at `path` (a worker's job), the file removed."""
    try:
        raw = Path(path).read_bytes()
    finally:
        Path(path).unlink(missing_ok=True)
    return prepare(kind, headers, raw, settings)


def _write(fd: int, raw: bytes | bytearray) -> None:
    with os.fdopen(fd, "wb") as file:
        file.write(raw)


def _lower_priority(nice: int) -> None:
    """A worker's initializer: bulk work yields the CPU to the loop (IsolationSettings.nice)."""
    os.nice(nice)


OVERLOADED = SimError(503, "The server is overloaded or not ready yet.", error_type="server_error")


class Isolation:
    """The worker processes, started with the first large request (or with the server:
    `prestart`), stopped with the server."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        # Large requests being prepared or waiting for a worker (IsolationSettings.max_waiting).
        self.waiting = 0

    def wanted(self, settings: SimSettings, *, method: str, path: str, size: int) -> str | None:
        """The kind of a request to prepare in a worker, or None (on the loop)."""
        isolation = settings.isolation
        kind = ISOLATED_PATHS.get(path)
        if kind is None or isolation.min_bytes is None or method != "POST":
            return None
        bound = isolation.embeddings_min_bytes if kind == "embedding" else isolation.min_bytes
        return kind if bound is not None and size >= bound else None

    async def start(self, settings: SimSettings) -> None:
        """Every worker started and ready now (`IsolationSettings.prestart`)."""
        pool = self._pool_for(settings)
        loop = asyncio.get_running_loop()
        ready = [loop.run_in_executor(pool, os.getpid) for _ in range(settings.isolation.workers)]
        await asyncio.gather(*ready)

    def _pool_for(self, settings: SimSettings) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: a fork of a process running an event loop (and its threads) is unsafe.
            spawn = multiprocessing.get_context("spawn")
            isolation = settings.isolation
            self._pool = ProcessPoolExecutor(
                isolation.workers, mp_context=spawn, initializer=_lower_priority,
                initargs=(isolation.nice,),
            )  # fmt: skip
        return self._pool

    async def prepare(
        self, kind: str, headers: Mapping[str, str], raw: bytes | bytearray, settings: SimSettings
    ) -> Parsed:
        """`prepare` in a worker; the 503 reply (`OVERLOADED`) when `max_waiting` large
        requests are already in or waiting for one. A pool whose worker died (killed, out of
        memory) is broken for good: it is replaced, and the request tried once more on the new
        one."""
        if self.waiting >= settings.isolation.max_waiting:
            return Parsed(error=OVERLOADED.reply())
        self.waiting += 1
        try:
            return await self._prepare(kind, headers, raw, settings)
        finally:
            self.waiting -= 1

    async def _prepare(
        self, kind: str, headers: Mapping[str, str], raw: bytes | bytearray, settings: SimSettings
    ) -> Parsed:
        loop = asyncio.get_running_loop()
        for attempt in (0, 1):
            pool = self._pool_for(settings)
            path = None
            try:
                if SHARED_DIR is not None and len(raw) >= SHARED_FILE_BYTES:
                    # A file only this user reads, written off the loop (`write` lets go of
                    # the GIL; 32 MiB took ~20 ms), removed here too if the request is
                    # cancelled or the worker dies before it reads it.
                    fd, path = tempfile.mkstemp(prefix="levergate-sim-", dir=SHARED_DIR)
                    await asyncio.to_thread(_write, fd, raw)
                    return await loop.run_in_executor(pool, prepare_file, kind, headers, path,
                                                      settings)  # fmt: skip
                return await loop.run_in_executor(pool, prepare, kind, headers, raw, settings)
            except BrokenProcessPool:
                if self._pool is pool:
                    self._pool = None
                    pool.shutdown(wait=False, cancel_futures=True)
                if attempt:
                    raise
            finally:
                if path is not None:  # the worker removed it, unless it never read it
                    Path(path).unlink(missing_ok=True)  # noqa: ASYNC240 - one unlink
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        """Stop the workers (waiting, off the loop, for one still preparing a request)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

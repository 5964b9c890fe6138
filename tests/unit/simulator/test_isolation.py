"""Large requests prepared in worker processes (simulator/isolation.py): the answer is the one the
loop would have given, byte for byte, state included (the prompt cache, ids, limits, stats),
and over HTTP a large request really goes to a worker and comes back whole."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
from pathlib import Path
from typing import Any

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from levergate.simulator import SimSettings, Simulator, run_simulator
from levergate.simulator.isolation import (
    SHARED_DIR,
    SHARED_FILE_BYTES,
    Isolation,
    parse,
    prepare,
)
from levergate.simulator.responses import Reply
from levergate.simulator.settings import IsolationSettings
from levergate.testing import ManualClock

PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
WORDS = st.text(alphabet="abc xyz", min_size=0, max_size=40)


def make(**values: Any) -> Simulator:
    return Simulator(settings=SimSettings.model_validate(values), clock=ManualClock(),
                     wall=lambda: 1_700_000_000.0)  # fmt: skip


def shown(reply: Reply) -> tuple[Any, ...]:
    return (reply.status, reply.body, reply.events, reply.event_delays, reply.delay,
            reply.headers, reply.hang, reply.holds_slot)  # fmt: skip


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, dict[str, str], bytes]:
    """Chat and completion requests, long prompts sharing prefixes (prompt-cache hits), several
    choices or prompts, the fields that shape an answer, and broken ones."""
    kind = draw(st.sampled_from(["chat", "completion"]))
    base = "shared prefix " * draw(st.integers(0, 700))
    body: dict[str, Any] = {"model": draw(st.sampled_from(["m", "gpt-4o-mini"]))}
    if kind == "chat":
        turns = draw(st.lists(WORDS, min_size=1, max_size=3))
        body["messages"] = [{"role": "user", "content": base + t} for t in turns]
    else:
        prompts = draw(st.lists(WORDS, min_size=1, max_size=3))
        body["prompt"] = [base + p for p in prompts] if len(prompts) > 1 else base + prompts[0]
    for name, values in (("n", st.integers(1, 3)), ("max_tokens", st.integers(1, 40)),
                         ("stream", st.booleans()), ("seed", st.integers(0, 5)),
                         ("service_tier", st.sampled_from(["auto", "flex", "priority"])),
                         ("prompt_cache_key", st.sampled_from(["k", 7]))):  # fmt: skip
        if draw(st.booleans()):
            body[name] = draw(values)
    headers = {"authorization": f"Bearer {draw(st.sampled_from(['a', 'b']))}"}
    if draw(st.booleans()):
        headers["x-sim-output-tokens"] = str(draw(st.integers(1, 30)))
    raw = orjson.dumps(body)
    if draw(st.integers(0, 9)) == 0:
        raw = raw[: len(raw) // 2]  # not JSON: the 400 comes from wherever it is parsed
    return kind, headers, raw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=st.lists(requests(), min_size=1, max_size=6),
    per_request=st.booleans(),
    latency=st.booleans(),
)
def test_a_prepared_request_is_answered_as_on_the_loop(
    batch: list[tuple[str, dict[str, str], bytes]], per_request: bool, latency: bool
) -> None:
    values: dict[str, Any] = {"prompt_cache": {"min_tokens": 1024, "increment": 128}}
    if latency:
        values["latency"] = {"ttft_ms": 40, "tokens_per_second": 500, "jitter": 0.3,
                             "per_request": per_request}  # fmt: skip
    here, there = make(**values), make(**values)
    for kind, headers, raw in batch:
        loop = here.answer_parsed(parse(kind, headers, raw, here.settings))
        # As a worker process would: pickled there and back, the prompt's text dropped.
        sent = pickle.dumps(prepare(kind, headers, raw, there.settings))
        prepared = pickle.loads(sent)  # noqa: S301 - our own bytes
        if prepared.spec is not None:
            assert all(text == "" for text, _ in prepared.spec.prompts)
        elsewhere = there.handle_parsed(PATHS[kind], prepared)
        assert shown(loop) == shown(elsewhere)
        here.finish(loop)
        there.finish(elsewhere)
    assert here.snapshot()["prompt_cache"] == there.snapshot()["prompt_cache"]
    assert here.stats.keys == there.stats.keys
    assert here.stats.prompt_tokens == there.stats.prompt_tokens


async def test_a_large_request_is_prepared_in_a_worker_and_answered_whole() -> None:
    """Over HTTP, with the bound at its lowest: a 2 MB conversation goes to a worker process (as
    a file in /dev/shm, over SHARED_FILE_BYTES, removed once read) and its answer is the loop's;
    a small request beside it and a broken large one are answered."""
    messages = [{"role": "user", "content": f"turn {i} " + "x" * 4000} for i in range(500)]
    body = {"model": "m", "max_tokens": 12, "messages": messages}
    answers = []
    before = len(multiprocessing.active_children())
    assert len(orjson.dumps(body)) >= SHARED_FILE_BYTES
    files = set(Path(SHARED_DIR).glob("levergate-sim-*")) if SHARED_DIR else set()
    for bound in (1024, None):
        isolation = IsolationSettings(min_bytes=bound, workers=1)
        async with run_simulator(SimSettings(isolation=isolation, seed=3)) as sim:
            async with httpx.AsyncClient(base_url=sim.base_url, timeout=60) as http:
                large = await http.post("/chat/completions", json=body)
                workers = len(multiprocessing.active_children()) - before
                small = await http.post("/chat/completions", json={**body, "messages": [
                    {"role": "user", "content": "hi"}]})  # fmt: skip
                broken = await http.post("/chat/completions", content=orjson.dumps(body)[:-1],
                                         headers={"content-type": "application/json"})  # fmt: skip
                again = await http.post("/chat/completions", json=body)
            stats = sim.stats()
        assert (large.status_code, small.status_code, broken.status_code) == (200, 200, 400)
        assert "not valid JSON" in broken.json()["error"]["message"]
        assert workers == (1 if bound else 0)
        assert stats["requests_by_endpoint"]["/v1/chat/completions"] == 4
        assert stats["responses_by_status"] == {"200": 3, "400": 1}
        assert stats["in_flight"] == 0
        # The second identical conversation hits the prompt cache: the state is the loop's.
        cached = again.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > 500_000
        answers.append([drop_ids(r.json()) for r in (large, small, again)])
    assert answers[0] == answers[1]
    if SHARED_DIR:  # every body handed over as a file was removed
        assert set(Path(SHARED_DIR).glob("levergate-sim-*")) == files
    # The workers stopped with the simulator.
    assert len(multiprocessing.active_children()) == before


def drop_ids(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("id", "created")}


async def test_a_worker_that_died_is_replaced() -> None:
    """A worker killed between requests (out of memory, an operator): the next large request is
    answered by a new one, not a 500 for every large request from then on."""
    body = {"model": "m", "max_tokens": 4,
            "messages": [{"role": "user", "content": "y" * 4096}]}  # fmt: skip
    before = set(multiprocessing.active_children())
    isolation = IsolationSettings(min_bytes=1024, workers=1)
    async with (
        run_simulator(SimSettings(isolation=isolation)) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=60) as http,
    ):
        first = await http.post("/chat/completions", json=body)
        (worker,) = set(multiprocessing.active_children()) - before
        worker.kill()
        worker.join()
        again = await http.post("/chat/completions", json=body)
        (replaced,) = set(multiprocessing.active_children()) - before
    assert (first.status_code, again.status_code) == (200, 200)
    assert replaced.pid != worker.pid
    assert first.json()["choices"] == again.json()["choices"]
    # The state stayed on the loop: the repeated prompt hits the prompt cache.
    assert again.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 1024


def large_chat(size: int) -> bytes:
    return orjson.dumps({"model": "m", "max_tokens": 4,
                         "messages": [{"role": "user", "content": "z" * size}]})  # fmt: skip


async def test_workers_run_at_a_lower_priority() -> None:
    """The workers' bulk work yields the CPU to the loop (IsolationSettings.nice): a worker's
    niceness is the simulator's plus `nice`."""
    settings = SimSettings(isolation=IsolationSettings(min_bytes=1024, workers=1, nice=7))
    before = set(multiprocessing.active_children())
    isolation = Isolation()
    try:
        parsed = await isolation.prepare("chat", {"authorization": "Bearer k"}, large_chat(4096),
                                         settings)  # fmt: skip
        (worker,) = set(multiprocessing.active_children()) - before
        niceness = os.getpriority(os.PRIO_PROCESS, worker.pid or 0)
    finally:
        await isolation.close()
    assert parsed.error is None
    assert parsed.spec is not None
    assert niceness == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 7)


async def test_large_requests_beyond_the_waiting_bound_are_answered_overloaded() -> None:
    """With `max_waiting` large requests in or waiting for a worker, one more is a 503 at once
    (not held in memory behind them); once they are done, the next is prepared again."""
    settings = SimSettings(isolation=IsolationSettings(min_bytes=1024, workers=1, max_waiting=2))
    headers, raw = {"authorization": "Bearer k"}, large_chat(4096)
    isolation = Isolation()
    try:
        first, second, third = await asyncio.gather(
            *(isolation.prepare("chat", headers, raw, settings) for _ in range(3))
        )
        later = await isolation.prepare("chat", headers, raw, settings)
    finally:
        await isolation.close()
    assert first.error is None
    assert second.error is None
    assert later.error is None
    assert third.error is not None
    assert third.error.status == 503
    assert orjson.loads(third.error.body)["error"]["type"] == "server_error"
    assert isolation.waiting == 0


async def test_an_embeddings_request_of_many_inputs_is_answered_by_a_worker() -> None:
    """128 short inputs are 128 vectors of work: from `embeddings_min_bytes` the reply is made
    in a worker, and it is the loop's, byte for byte; a refused one is the same refusal."""
    body = {"model": "text-embedding-3-small", "input": [f"text {i}" for i in range(128)]}
    refused = {**body, "dimensions": 0}
    answers = []
    before = len(multiprocessing.active_children())
    for bound in (64, None):
        isolation = IsolationSettings(embeddings_min_bytes=bound, workers=1)
        async with run_simulator(SimSettings(isolation=isolation, embedding_dim=64)) as sim:
            async with httpx.AsyncClient(base_url=sim.base_url, timeout=60) as http:
                answered = await http.post("/embeddings", json=body)
                workers = len(multiprocessing.active_children()) - before
                bad = await http.post("/embeddings", json=refused)
                small = await http.post("/embeddings", json={**body, "input": "x"})
            stats = sim.stats()
        assert (answered.status_code, bad.status_code, small.status_code) == (200, 400, 200)
        assert workers == (1 if bound else 0)
        assert stats["tokens"]["prompt"] > 128
        assert stats["in_flight"] == 0
        assert stats["responses_by_status"] == {"200": 2, "400": 1}
        answers.append((answered.content, bad.json(), small.content, stats["tokens"]))
    assert answers[0] == answers[1]


async def test_prestarted_workers_are_up_before_the_first_large_request() -> None:
    """`prestart`: the workers (and their imports) start with the server, not inside the first
    large request."""
    before = set(multiprocessing.active_children())
    isolation = IsolationSettings(workers=2, prestart=True)
    async with run_simulator(SimSettings(isolation=isolation)):
        started = set(multiprocessing.active_children()) - before
    assert len(started) == 2
    assert set(multiprocessing.active_children()) == before

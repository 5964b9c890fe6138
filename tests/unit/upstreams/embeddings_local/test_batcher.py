"""Micro-batching: how a batch is gathered (max size, max wait) and that concurrent callers
share batches while each gets its own rows back."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable

import numpy as np
import pytest

from levergate.upstreams.embeddings_local.batcher import Job, MicroBatcher, gather
from levergate.upstreams.embeddings_local.minilm import Embedded


def job(count: int) -> Job:
    return Job([f"t{i}" for i in range(count)], lambda outcome: None)


def test_gather_stops_at_max_size() -> None:
    waiting = [job(2), job(3), job(1)]
    batch = gather(job(1), lambda timeout: waiting.pop(0) if waiting else None,
                   max_size=5, max_wait=1.0, now=lambda: 0.0)  # fmt: skip
    assert [len(j.texts) for j in batch] == [1, 2, 3]
    assert len(waiting) == 1


def test_gather_stops_when_the_wait_is_over() -> None:
    clock = [0.0]
    timeouts: list[float] = []

    def take(timeout: float) -> Job | None:
        timeouts.append(timeout)
        clock[0] += 0.004
        return job(1) if clock[0] < 0.01 else None

    batch = gather(job(1), take, max_size=100, max_wait=0.01, now=lambda: clock[0])
    assert len(batch) == 3
    assert timeouts[0] == pytest.approx(0.01)
    assert all(later < earlier for earlier, later in itertools.pairwise(timeouts))


def fake_encode(calls: list[int]) -> Callable[[list[str]], Embedded]:
    lock = threading.Lock()

    def encode(texts: list[str]) -> Embedded:
        with lock:
            calls.append(len(texts))
        vectors = np.array([[float(t[1:]), 1.0] for t in texts], dtype=np.float32)
        return Embedded(vectors, np.ones(len(texts), dtype=np.int64))

    return encode


async def test_concurrent_callers_share_batches_and_get_their_own_rows() -> None:
    calls: list[int] = []
    batcher = MicroBatcher(fake_encode(calls), max_size=8, max_wait=0.05)
    try:
        results = await asyncio.gather(
            *[batcher.encode([f"x{i}", f"x{i + 100}"]) for i in range(12)]
        )
    finally:
        await asyncio.to_thread(batcher.close)
    for i, result in enumerate(results):
        assert result.vectors[:, 0].tolist() == [i, i + 100]
    assert sum(calls) == 24
    assert max(calls) <= 8
    assert batcher.batches < 12  # merged: fewer model runs than requests


async def test_a_failing_batch_fails_each_caller_and_the_thread_goes_on() -> None:
    state = {"fail": True}

    def encode(texts: list[str]) -> Embedded:
        if state["fail"]:
            raise ValueError("boom")
        return Embedded(
            np.zeros((len(texts), 2), dtype=np.float32), np.ones(len(texts), dtype=np.int64)
        )

    batcher = MicroBatcher(encode, max_size=4, max_wait=0.0)
    try:
        with pytest.raises(ValueError, match="boom"):
            await batcher.encode(["a"])
        state["fail"] = False
        assert (await batcher.encode(["b"])).vectors.shape == (1, 2)
    finally:
        await asyncio.to_thread(batcher.close)

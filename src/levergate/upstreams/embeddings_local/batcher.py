"""Dynamic micro-batching of concurrent embedding requests onto one model thread.

Many callers each embedding one text (the semantic cache embeds one question per request) waste
the model: a batch of 32 short texts costs little more than one. A dedicated thread owns the
model; it sleeps until a request arrives, then keeps collecting until `max_size` texts wait or
`max_wait` seconds have passed since the first, runs them as one batch, and hands each caller
its rows. The event loop never blocks on the model, and a lone request pays at most `max_wait`.

A caller that gives up (cancelled) is simply not answered: its rows are computed and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from levergate.upstreams.embeddings_local.minilm import Embedded

Outcome = Embedded | BaseException


@dataclass(frozen=True, slots=True)
class Job:
    texts: list[str]
    deliver: Callable[[Outcome], None]  # called on the model thread


def gather(
    first: Job,
    take: Callable[[float], Job | None],
    *,
    max_size: int,
    max_wait: float,
    now: Callable[[], float],
) -> list[Job]:
    """The jobs of one batch: `first`, then those `take(timeout)` yields until `max_size` texts
    are collected or `max_wait` has passed since the start (`take` returns None on timeout)."""
    jobs = [first]
    size = len(first.texts)
    deadline = now() + max_wait
    while size < max_size:
        job = take(max(0.0, deadline - now()))
        if job is None:
            break
        jobs.append(job)
        size += len(job.texts)
    return jobs


def split(embedded: Embedded, sizes: Sequence[int]) -> list[Embedded]:
    """One batch's rows back to the jobs, in order."""
    bounds = np.cumsum([0, *sizes])
    return [
        Embedded(embedded.vectors[a:b], embedded.tokens[a:b]) for a, b in itertools.pairwise(bounds)
    ]


class MicroBatcher:
    def __init__(
        self,
        encode: Callable[[list[str]], Embedded],
        *,
        max_size: int,
        max_wait: float,
        name: str = "levergate-embed",
    ) -> None:
        self._encode = encode
        self._max_size = max_size
        self._max_wait = max_wait
        self._inbox: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.batches = 0  # batches run so far (read by benchmarks and tests)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    async def encode(self, texts: list[str]) -> Embedded:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Embedded] = loop.create_future()

        def deliver(outcome: Outcome) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone
                loop.call_soon_threadsafe(_settle, future, outcome)

        self._inbox.put(Job(list(texts), deliver))
        return await future

    def close(self) -> None:
        """Stop the thread after the batches already queued (blocking: call it off the loop)."""
        if self._thread.is_alive():
            self._inbox.put(None)
            self._thread.join()

    def _take(self, timeout: float) -> Job | None:
        try:
            job = self._inbox.get(timeout=timeout) if timeout > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return None
        if job is None:  # stop after this batch
            self._inbox.put(None)
        return job

    def _run(self) -> None:
        while (first := self._inbox.get()) is not None:
            jobs = gather(
                first,
                self._take,
                max_size=self._max_size,
                max_wait=self._max_wait,
                now=time.monotonic,
            )
            self._run_batch(jobs)

    def _run_batch(self, jobs: list[Job]) -> None:
        texts = [text for job in jobs for text in job.texts]
        try:
            parts = [
                self._encode(texts[i : i + self._max_size])
                for i in range(0, len(texts), self._max_size)
            ]
            embedded = Embedded(
                np.concatenate([p.vectors for p in parts]),
                np.concatenate([p.tokens for p in parts]),
            )
        except Exception as exc:  # the thread's edge: every caller of the batch gets the error
            for job in jobs:
                job.deliver(exc)
            return
        self.batches += 1
        for job, rows in zip(jobs, split(embedded, [len(j.texts) for j in jobs]), strict=True):
            job.deliver(rows)


def _settle(future: asyncio.Future[Embedded], outcome: Outcome) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)

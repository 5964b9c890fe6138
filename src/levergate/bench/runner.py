"""The load generator: a closed loop of workers, or an open loop that launches on a schedule.

Open loop, the coordinated-omission-free way (wrk2): every arrival has an intended send time;
the scheduler launches each one at that time whether or not earlier ones have answered, and its
latency is measured from the intended time. If the server stalls, requests scheduled during
the stall carry the stall in their latency, instead of the client politely waiting and never
sending them (which is what a closed loop does, hiding the stall from its percentiles).

`max_outstanding` caps requests in flight so a dead server cannot exhaust the client. When the
cap is full at an intended time, the scheduler waits for a slot and launches late; latency still
counts from the intended time, so the wait shows. Requests still blocked when the sending
deadline passes are never launched and are reported as dropped.

Sending stops at `requests`, the trace's end or `duration`; requests in flight then get
`drain_s` to finish, after which they are cancelled and reported as incomplete. With
per-request timeouts on top, every run ends by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

from levergate.bench.client import HttpSender, open_session
from levergate.bench.config import BenchConfig
from levergate.bench.recorder import Recorder, Sender, Snapshot
from levergate.bench.report import BenchResult, RunTotals
from levergate.bench.traces import TraceRecord, load_trace, read_trace, resolve_trace
from levergate.bench.workload import Arrival, BodyFactory, arrivals
from levergate.core.clock import Clock, SystemClock

ProgressCallback = Callable[[Snapshot], None]
PROGRESS_INTERVAL_S = 0.5


async def run_bench(
    config: BenchConfig,
    *,
    sender: Sender | None = None,
    clock: Clock | None = None,
    trace: Iterable[TraceRecord] | None = None,
    progress: ProgressCallback | None = None,
    nonce: str | None = None,
) -> BenchResult:
    """Run one benchmark and return its result.

    `sender` replaces the HTTP client (tests use a fake). `clock` must advance with the event
    loop's time, because the sending deadline and the drain bound become `asyncio` timeouts.
    `trace` supplies records directly instead of reading `config.trace`. `nonce` fixes the
    run's prompt prefix, which is otherwise fresh per run so that no cache remembers an
    earlier run's prompts.
    """
    config.validate()
    if trace is None and config.trace is not None:
        trace = read_trace(resolve_trace(config.trace, data_dir=config.data_dir))
    records = None if trace is None else load_trace(trace, time_scale=config.time_scale)
    run_nonce = nonce if nonce is not None else uuid.uuid4().hex[:8]
    clock = clock if clock is not None else SystemClock()
    async with contextlib.AsyncExitStack() as resources:
        if sender is None:
            session = await resources.enter_async_context(open_session(config))
            sender = HttpSender.of(session, config, clock=clock)
        return await _Run(config, sender=sender, clock=clock, nonce=run_nonce).execute(
            arrivals(config, trace=records), progress=progress
        )


class _Run:
    """One execution: owns the recorder and the body factory; discarded afterwards."""

    def __init__(self, config: BenchConfig, *, sender: Sender, clock: Clock, nonce: str) -> None:
        self._config = config
        self._sender = sender
        self._clock = clock
        self._nonce = nonce
        self._bodies = BodyFactory(config=config, nonce=nonce)
        self._recorder = Recorder(late_after_s=config.late_after_s)
        self._planned = 0
        self._last_offset = 0.0

    async def execute(
        self, plan: Iterator[Arrival], *, progress: ProgressCallback | None
    ) -> BenchResult:
        cpu_before = time.process_time()
        start = self._clock.now()
        async with asyncio.TaskGroup() as group:
            ticker = None if progress is None else group.create_task(self._tick(start, progress))
            try:
                await self._drive(plan, start)
            finally:
                if ticker is not None:
                    ticker.cancel()
        end = self._clock.now()
        if progress is not None:
            progress(self._recorder.snapshot(elapsed_s=end - start))
        totals = RunTotals(
            start=start,
            end=end,
            cpu_s=time.process_time() - cpu_before,
            planned=self._planned,
            last_offset_s=self._last_offset,
        )
        return BenchResult.build(
            config=self._config, recorder=self._recorder, totals=totals, nonce=self._nonce
        )

    async def _drive(self, plan: Iterator[Arrival], start: float) -> None:
        """Sending phase, then the bounded drain; cancelled stragglers become `incomplete`."""
        stop_after = self._config.stop_after_s
        stop_at = None if stop_after is None else start + stop_after
        try:
            async with asyncio.timeout(None) as drain:
                async with asyncio.TaskGroup() as group:
                    if self._config.mode == "closed":
                        for _ in range(self._config.workers):
                            group.create_task(self._worker(plan, stop_at))
                        if stop_at is not None:
                            drain.reschedule(self._loop_deadline(stop_at + self._config.drain_s))
                    else:
                        await self._schedule(plan, start, stop_at, group)
                        drain.reschedule(
                            self._loop_deadline(self._clock.now() + self._config.drain_s)
                        )
        except TimeoutError:
            pass  # the drain bound expired: whatever was still in flight is counted incomplete

    def _loop_deadline(self, at: float) -> float:
        return asyncio.get_running_loop().time() + (at - self._clock.now())

    async def _worker(self, plan: Iterator[Arrival], stop_at: float | None) -> None:
        """Closed loop: the next request goes when the previous answered. The iterator is
        shared, so each arrival is taken by exactly one worker."""
        for arrival in plan:
            if stop_at is not None and self._clock.now() >= stop_at:
                return
            self._planned += 1
            await self._exchange(arrival, intended=None, slots=None)

    async def _schedule(
        self,
        plan: Iterator[Arrival],
        start: float,
        stop_at: float | None,
        group: asyncio.TaskGroup,
    ) -> None:
        """Open loop: launch each arrival at its intended time, independent of replies."""
        slots = asyncio.Semaphore(self._config.max_outstanding)
        for arrival in plan:
            offset = arrival.offset_s or 0.0
            self._planned += 1
            self._last_offset = offset
            intended = start + offset
            delay = intended - self._clock.now()
            if delay > 0:
                await self._clock.sleep(delay)
            if not await _acquire(slots, deadline=self._loop_or_none(stop_at)):
                self._recorder.dropped += 1
                for rest in plan:  # bounded: open-loop plans end at the sending deadline
                    self._planned += 1
                    self._last_offset = rest.offset_s or 0.0
                    self._recorder.dropped += 1
                return
            group.create_task(self._exchange(arrival, intended=intended, slots=slots))

    def _loop_or_none(self, at: float | None) -> float | None:
        return None if at is None else self._loop_deadline(at)

    async def _exchange(
        self, arrival: Arrival, *, intended: float | None, slots: asyncio.Semaphore | None
    ) -> None:
        body, repeated = self._bodies.body(arrival)
        sent = self._clock.now()
        # Timers may fire a little early (uvloop's are millisecond-granular): latency counts
        # from the earlier of intended and actual send, so it is never shortened.
        planned = sent if intended is None else min(intended, sent)
        self._recorder.launched(intended=planned, sent=sent, repeated=repeated)
        try:
            outcome = await self._sender.send(body)
        finally:
            if slots is not None:
                slots.release()
        self._recorder.finished(outcome, intended=planned, sent=sent)

    async def _tick(self, start: float, progress: ProgressCallback) -> None:
        while True:
            await self._clock.sleep(PROGRESS_INTERVAL_S)
            progress(self._recorder.snapshot(elapsed_s=self._clock.now() - start))


async def _acquire(slots: asyncio.Semaphore, *, deadline: float | None) -> bool:
    """Take a slot, waiting at most until the loop-time `deadline`; False if it passed."""
    if not slots.locked():
        await slots.acquire()
        return True
    try:
        async with asyncio.timeout_at(deadline):
            await slots.acquire()
    except TimeoutError:
        return False
    return True

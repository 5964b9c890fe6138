"""The load generator on a virtual clock: a fake server that stalls, and schedules checked exactly.

Time is simulated by `levergate.testing.VirtualTimeLoop` (through `run_virtual`), whose clock
jumps to the next timer whenever nothing is ready, so a three-second run takes milliseconds and
every number below is deterministic.
"""

from __future__ import annotations

import asyncio

import pytest

from levergate.bench import BenchConfig, BenchResult, Outcome, TraceRecord, run_bench
from levergate.testing import LoopClock, run_virtual

SERVICE_S = 0.010
URL = "http://bench.invalid"


class StallingServer:
    """Answers in `SERVICE_S`, but freezes during [stall_from, stall_until) like a GC pause:
    work arriving in the window starts when it ends; work due in the window finishes then."""

    def __init__(self, *, stall_from: float, stall_until: float) -> None:
        self.stall_from = stall_from
        self.stall_until = stall_until
        self.sent_at: list[float] = []
        self.clock = LoopClock()

    async def send(self, body: bytes) -> Outcome:
        now = self.clock.now()
        self.sent_at.append(now)
        begin = self.stall_until if self.stall_from <= now < self.stall_until else now
        end = begin + SERVICE_S
        if self.stall_from <= end < self.stall_until:
            end = self.stall_until
        await asyncio.sleep(end - now)
        outcome = Outcome(end_at=self.clock.now())
        outcome.output_tokens = 1
        return outcome


def bench(config: BenchConfig, server: StallingServer) -> BenchResult:
    return run_virtual(run_bench(config, sender=server, clock=server.clock, nonce="test"))


def test_open_loop_launches_on_schedule_at_the_intended_times() -> None:
    server = StallingServer(stall_from=99.0, stall_until=99.0)
    result = bench(BenchConfig(url=URL, rate=50.0, requests=20), server)
    assert server.sent_at == pytest.approx([i / 50.0 for i in range(20)])
    assert result.sent == result.ok == 20
    assert result.target_rps == 50.0
    assert result.achieved_rps == pytest.approx(50.0)
    assert result.late == result.dropped == result.incomplete == 0
    assert result.total_ms["max"] == pytest.approx(SERVICE_S * 1000)


def test_a_stall_shows_in_open_loop_percentiles_and_hides_in_closed_loop() -> None:
    """Coordinated omission: the closed loop sends nothing while the server is frozen, so a
    one-second stall is one slow sample in ~200; the open loop keeps sending on schedule and
    every request due during the stall carries its share of the wait."""
    stall = {"stall_from": 1.0, "stall_until": 2.0}
    closed_server = StallingServer(**stall)
    closed = bench(BenchConfig(url=URL, concurrency=1, duration_s=3.0), closed_server)
    open_server = StallingServer(**stall)
    opened = bench(BenchConfig(url=URL, rate=100.0, duration_s=3.0), open_server)

    service_ms = SERVICE_S * 1000
    # Closed loop: the stall is in the max only; p99 is the plain service time.
    assert closed.total_ms["max"] >= 900
    assert closed.total_ms["p99"] == pytest.approx(service_ms)
    # Open loop: ~100 arrivals fell inside the stall, a third of all samples, so p99 (and even
    # p90) carry queueing delay the closed loop never measured.
    assert opened.sent == 300
    assert opened.total_ms["p90"] > 10 * service_ms
    assert opened.total_ms["p99"] > 50 * closed.total_ms["p99"]
    assert opened.total_ms["p99"] >= 900


def test_requests_held_back_by_the_cap_are_late_and_timed_from_their_intended_time() -> None:
    server = StallingServer(stall_from=1.0, stall_until=2.0)
    config = BenchConfig(url=URL, rate=100.0, duration_s=3.0, max_outstanding=5)
    result = bench(config, server)
    # Only 5 requests can wait inside the server; the rest of the stall's arrivals queue in
    # the client and are launched after it, late, yet their latency still shows the stall.
    assert result.late >= 90
    assert result.dropped == 0
    assert result.total_ms["p99"] >= 900
    # Measured from the actual send instead, the queueing would vanish: that is the omission.
    assert result.service_ms["p90"] == pytest.approx(SERVICE_S * 1000)
    assert result.total_ms["p90"] > 10 * SERVICE_S * 1000
    assert result.achieved_rps is not None
    assert result.target_rps == 100.0


def test_a_server_that_never_recovers_ends_with_dropped_and_incomplete_requests() -> None:
    server = StallingServer(stall_from=1.005, stall_until=1_000.0)
    config = BenchConfig(
        url=URL, rate=100.0, duration_s=3.0, max_outstanding=10, drain_timeout_s=0.5
    )
    result = bench(config, server)
    # 100 requests answered before the stall, 10 stuck in the server, every later arrival
    # up to the 3 s deadline never launched.
    assert result.ok == 100
    assert result.incomplete == 10
    assert result.dropped == 300 - 110
    assert result.planned == 300
    assert any("never launched" in warning for warning in result.warnings)


def test_closed_loop_runs_exactly_the_requested_number_with_n_workers() -> None:
    server = StallingServer(stall_from=99.0, stall_until=99.0)
    result = bench(BenchConfig(url=URL, concurrency=4, requests=40), server)
    assert result.sent == result.ok == 40
    assert len(server.sent_at) == 40
    # Four workers in lock step: ten rounds of four simultaneous sends.
    assert sorted({round(t, 6) for t in server.sent_at}) == pytest.approx(
        [i * SERVICE_S for i in range(10)]
    )
    assert result.target_rps is None
    assert result.send_lag_ms["max"] == 0.0


def test_trace_arrivals_follow_the_scaled_trace_times() -> None:
    server = StallingServer(stall_from=99.0, stall_until=99.0)
    trace = [TraceRecord(10.0, 100, 5), TraceRecord(12.0, 50, 3), TraceRecord(11.0, 70, 4)]
    config = BenchConfig(url=URL, trace="inline", time_scale=0.5)
    result = bench_with_trace(config, server, trace)
    assert server.sent_at == pytest.approx([0.0, 0.5, 1.0])
    assert result.target_rps == pytest.approx(2 / 1.0)
    assert result.mode == "trace"


def bench_with_trace(
    config: BenchConfig, server: StallingServer, trace: list[TraceRecord]
) -> BenchResult:
    return run_virtual(
        run_bench(config, sender=server, clock=server.clock, trace=trace, nonce="test")
    )


def test_progress_snapshots_are_reported_and_the_last_one_is_final() -> None:
    server = StallingServer(stall_from=99.0, stall_until=99.0)
    seen: list[int] = []
    config = BenchConfig(url=URL, rate=100.0, duration_s=2.0)
    run_virtual(
        run_bench(
            config,
            sender=server,
            clock=server.clock,
            nonce="t",
            progress=lambda snap: seen.append(snap.done),
        )
    )
    assert len(seen) >= 4
    assert seen == sorted(seen)
    assert seen[-1] == 200

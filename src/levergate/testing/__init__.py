"""Test doubles shipped with the package, for levergate's own tests and for users' tests of code
built on it: clocks that never really wait, an event loop whose time is virtual, and a scripted
fake upstream to put at the bottom of a stack in place of a provider; `sample_value` reads a
Prometheus sample the way a scrape would (`testing.metrics`); `testing.fuzzing` makes hostile
requests and `testing.batch_crash` kills a batch-running gateway mid-job (both used by the
e2e tests and the benchmarks).

None of them is used by the gateway itself; they live here (not in `tests/`) so an embedder can
test a custom layer, a pipeline or a retry policy deterministically without a network, a
simulator or a sleep.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from levergate.core.call import Call
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.errors import UpstreamUnavailable
from levergate.testing.metrics import sample_value

__all__ = [
    "FakeUpstream",
    "LoopClock",
    "ManualClock",
    "UpstreamOutcome",
    "VirtualTimeLoop",
    "run_virtual",
    "sample_value",
]

T = TypeVar("T")


class ManualClock:
    """A `Clock` that moves only when told to. `sleep` suspends until `advance` passes the wake
    time, so limiters, backoff and balancers run deterministically without real waiting."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), future))
        await future

    def advance(self, seconds: float) -> None:
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is virtual: whenever nothing is ready to run, time jumps
    straight to the next timer instead of waiting for it.

    For deterministic tests of code that sleeps or times out through asyncio itself
    (`asyncio.sleep`, `asyncio.timeout`, `loop.call_later`) rather than through an injected
    `Clock`: a load generator's schedule, a three-second deadline, a minute of backoff all run
    in milliseconds, and every time the code observes is exact. I/O is only polled while a timer
    is scheduled, so it suits code whose waits are timers: a loop with nothing ready and no
    timer left (all its tasks blocked on a socket or an event) waits up to 2 s of real time for
    I/O, then raises `RuntimeError` (a deadlock) instead of hanging. Use it through
    `run_virtual`, and read time with `LoopClock`."""

    def __init__(self) -> None:
        self._jumps = _JumpingSelector()
        super().__init__(self._jumps)

    def time(self) -> float:
        return self._jumps.now


# How long a loop with nothing scheduled waits in real time for I/O before it is a deadlock.
_REAL_WAIT_SECONDS = 2.0


class _JumpingSelector(selectors.DefaultSelector):
    """The selector under a `VirtualTimeLoop`: it never blocks while a timer is scheduled; a wait
    of `timeout` seconds (the time to the loop's next timer) is taken as that much virtual time
    passing — unless I/O is ready already (a loopback peer in the same loop wrote to it), which
    costs no time: a request to a server on the same loop takes the time its server says, not
    the time to the next timer."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            # Nothing scheduled: only I/O can wake the loop. Loopback bytes are usually there
            # at once, but a loaded machine may deliver them a moment later (and a thread's
            # answer comes when the thread is done): wait for I/O in real time before calling
            # it a deadlock. Seen once in a whole suite's run: a smoke benchmark's loopback
            # exchange found nothing ready and failed as a deadlock.
            ready = super().select(_REAL_WAIT_SECONDS)
            if ready:
                return ready
            raise RuntimeError("deadlock: nothing scheduled and nothing ready")
        self.now += timeout
        return super().select(0)


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a fresh `VirtualTimeLoop` and close it: `asyncio.run` for
    tests that must not really wait. Virtual time starts at 0.0."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


class LoopClock:
    """A `Clock` reading the running event loop's time and sleeping on it. Under a
    `VirtualTimeLoop` it gives code that takes a `Clock` the loop's virtual time (the system
    clock would keep real time there); under any other loop it is monotonic real time."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


UpstreamOutcome = Completed | Exception | Callable[[], Reply]
"""One scripted answer of a `FakeUpstream`: a `Completed` returned as is, an exception raised, or
a factory called for a fresh `Reply` (a `Stream` must be made per call: it is consumed once)."""

_WORDS = ("Paris", "is", "the", "capital.")
_PROMPT_TOKENS = 7
_TOOL_CALL = {"id": "call_1", "type": "function",
              "function": {"name": "lookup", "arguments": '{"city":"Paris"}'}}  # fmt: skip


class FakeUpstream:
    """A `Service` standing in for a provider at the bottom of a stack: it answers each call from
    `script` (first outcome first), then with `default` for ever, and records every call.

    Without a `default` it answers like a chat model: `words` joined as a whole
    `chat.completion`, or, when the call asks for `stream`, an SSE stream of chunks — a role
    chunk, one chunk per word, (a tool-call chunk,) a finish chunk and a usage chunk. That
    built-in answer is shaped by `finish` (its finish_reason), `tool_call` (answer with one tool
    call instead of text) and `cut_after` (break the stream after that many words with a
    `stream_interrupted` error, as a dropped connection would); `served_chunks` counts the
    words it streamed and `closed` the streams that were closed, so a test can check that a
    disconnecting client closed the upstream stream.

    `gate`, when given, holds every answer (and each streamed word) until it is set, so a test
    can line up concurrent calls. `seconds` is added to each call's
    `trace.upstream_seconds`, the upstream time a balancer measures as latency; `name` is the
    endpoint's name, for pools of several."""

    def __init__(
        self,
        *,
        script: Iterable[UpstreamOutcome] = (),
        default: UpstreamOutcome | None = None,
        name: str = "up",
        seconds: float = 0.0,
        gate: asyncio.Event | None = None,
        words: tuple[str, ...] = _WORDS,
        finish: str = "stop",
        tool_call: bool = False,
        cut_after: int | None = None,
    ) -> None:
        self.script = list(script)
        self.default = default
        self.name = name
        self.seconds = seconds
        self.gate = gate
        self.words = words
        self.finish = finish
        self.tool_call = tool_call
        self.cut_after = cut_after
        self.calls: list[Call] = []
        self.closed = 0
        self.served_chunks = 0

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(call)
        call.ctx.trace.upstream_seconds += self.seconds
        if self.gate is not None:
            await self.gate.wait()
        outcome = self.script.pop(0) if self.script else self.default
        if outcome is None:
            return Stream(self._chunks(call)) if call.stream else self._completion(call)
        if isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, Completed):
            return outcome
        return outcome()

    def _usage(self) -> dict[str, int]:
        completion = len(self.words)
        return {"prompt_tokens": _PROMPT_TOKENS, "completion_tokens": completion,
                "total_tokens": _PROMPT_TOKENS + completion}  # fmt: skip

    def _completion(self, call: Call) -> Completed:
        message: dict[str, Any] = {"role": "assistant", "content": " ".join(self.words)}
        if self.tool_call:
            message = {"role": "assistant", "content": None, "tool_calls": [_TOOL_CALL]}
        return Completed(
            data={
                "id": "cmpl-1", "object": "chat.completion", "created": 1,
                "model": call.model or "m",
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": self.finish}],
                "usage": self._usage(),
            }
        )  # fmt: skip

    async def _chunks(self, call: Call) -> EventSource:
        head = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": call.model or "m"}  # fmt: skip
        try:
            yield Event.of({**head, "choices": [_choice({"role": "assistant", "content": ""})]})
            for i, word in enumerate(self.words):
                if self.cut_after is not None and i >= self.cut_after:
                    raise UpstreamUnavailable("cut", code="stream_interrupted")
                if self.gate is not None:
                    await self.gate.wait()
                self.served_chunks += 1
                text = word if i == 0 else " " + word
                yield Event.of({**head, "choices": [_choice({"content": text})]})
            if self.tool_call:
                tool = {**_TOOL_CALL, "index": 0}
                yield Event.of({**head, "choices": [_choice({"tool_calls": [tool]})]})
            yield Event.of({**head, "choices": [_choice({}, finish=self.finish)]})
            yield Event.of({**head, "choices": [], "usage": self._usage()})
        finally:
            self.closed += 1


def _choice(delta: dict[str, Any], *, finish: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

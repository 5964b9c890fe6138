"""Bounded fan-out: many independent calls, at most `max_concurrency` in flight, paced.

`Gateway.map` and `Gateway.imap` are the library surface; `fan_out` is their engine, generic
over what one item's work is, so its invariants (every item exactly once, results in their
input slots, never more than `max_concurrency` at once) are tested on their own.

    results = await gw.map(prompts, model="m", max_concurrency=16)
    async for index, result in gw.imap(prompts, model="m"): ...

The pacing that keeps a fan-out free of provider 429s is the gateway's own: every item runs
through the full pipeline, whose `Limits` layer waits in the endpoint's waiting room against
the configured RPM/TPM — kept in Redis when the limits are shared, so a fan-out on one replica
counts against the same budget as everything else. Items run at batch priority unless told
otherwise, and the waiting room serves interactive calls first, so a fan-out never starves
them. `rate=` adds a pace of the caller's own on top (items per second, for a budget smaller
than the provider's); `max_concurrency` bounds what waits in the room at once, so no item's wait
grows past the batch class's `max_wait`.

Errors stay in their slots (`on_error="return"`, the default: the exception object takes the
item's place) or, with `on_error="raise"`, the first error cancels every other item and is
raised (Go's errgroup). Stopping a fan-out keeps what finished and stops the rest cleanly:

- a deadline for the whole fan-out (`controls=Controls(deadline=...)`, absolute on the
  gateway's clock) makes `map` return on time: each finished answer in its slot, the others
  holding their deadline error — and an item whose wait for the limiter would pass the deadline
  is refused at once, before it reaches the provider;
- cancelling the caller (a task's cancel, `asyncio.timeout`, Ctrl-C in `SyncGateway.map`)
  cancels the in-flight items and waits for them to unwind before the cancellation goes on;
  `map(..., into=answers)` has meanwhile put each answer in the caller's list the moment it
  finished, so `answers` holds what finished and None where an item did not;
- `imap` hands over each result as it finishes, so breaking out of it keeps what finished
  and cancels the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast

from levergate.core.clock import Clock

T = TypeVar("T")
R = TypeVar("R")

OnError = Literal["return", "raise"]
# `progress(done, total)` after each item; `done` counts errors too.
Progress = Callable[[int, int], None]

MAX_CONCURRENCY = 10_000  # a bound on the tasks one fan-out may start


def check_bounds(max_concurrency: int, rate: float | None) -> None:
    """A clear `ValueError` at the call for a bound that cannot be met.

    Examples:
        >>> check_bounds(0, None)
        Traceback (most recent call last):
        ValueError: max_concurrency must be between 1 and 10000
    """
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise TypeError("max_concurrency must be a whole number >= 1")
    if not 1 <= max_concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"max_concurrency must be between 1 and {MAX_CONCURRENCY}")
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ValueError("rate must be a finite number of items per second > 0")


class Pacer:
    """Starts at most `rate` items per second, evenly spaced (no burst): each start takes the
    next slot on the clock. None: no pace of its own."""

    def __init__(self, rate: float | None, clock: Clock) -> None:
        self._interval = 0.0 if rate is None else 1.0 / rate
        self._clock = clock
        self._next = -math.inf

    async def wait(self) -> None:
        if self._interval == 0.0:
            return
        now = self._clock.now()
        start = max(now, self._next)
        self._next = start + self._interval
        if start > now:
            await self._clock.sleep(start - now)


async def fan_out(
    items: Sequence[T],
    run: Callable[[int, T], Awaitable[R]],
    *,
    clock: Clock,
    max_concurrency: int,
    rate: float | None = None,
    on_error: OnError = "return",
    progress: Progress | None = None,
    keep: Callable[[int, R | Exception], None] | None = None,
) -> AsyncGenerator[tuple[int, R | Exception]]:
    """Yield `(index, result)` as items finish; a failed item's result is its exception (with
    `on_error="raise"` the first one is raised instead, after the others are cancelled).
    Closing the iterator early cancels what is still running and waits for it to unwind.
    `keep(index, result)` is called the moment an item finishes, before it is yielded: what
    it keeps survives a cancellation that comes before the consumer gets the item."""
    check_bounds(max_concurrency, rate)
    if on_error not in ("return", "raise"):
        raise ValueError("on_error must be 'return' or 'raise'")
    total = len(items)
    done = 0
    queue: asyncio.Queue[tuple[int, R | Exception]] = asyncio.Queue()
    pending = iter(range(total))
    pacer = Pacer(rate, clock)

    async def worker() -> None:
        for index in pending:  # one shared iterator: each index is taken by exactly one worker
            await pacer.wait()
            try:
                result: R | Exception = await run(index, items[index])
            except Exception as exc:  # the item's error goes to its slot
                result = exc
            if keep is not None:
                keep(index, result)
            queue.put_nowait((index, result))

    wanted = min(max_concurrency, total)
    workers: list[asyncio.Task[None]] = []
    try:
        while done < total:
            # One more worker per loop turn, consuming meanwhile: started all in one turn, they
            # entered the pipeline together and held the first admitted request back from the
            # provider for ~20 ms of their CPU work, late enough that the provider counted it
            # in its next window (a 429 at start).
            if len(workers) < wanted:
                workers.append(asyncio.create_task(worker()))
                await asyncio.sleep(0)
                if queue.empty():
                    continue
            index, result = await queue.get()
            done += 1
            if progress is not None:
                progress(done, total)
            if on_error == "raise" and isinstance(result, Exception):
                raise result
            yield index, result
    finally:
        for task in workers:
            task.cancel()
        # Wait for the cancelled calls to unwind (streams closed, permits given back).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*workers, return_exceptions=True)


async def collect(
    items: Sequence[T],
    run: Callable[[int, T], Awaitable[R]],
    *,
    clock: Clock,
    max_concurrency: int,
    rate: float | None = None,
    on_error: OnError = "return",
    progress: Progress | None = None,
    into: list[Any] | None = None,
) -> list[R | Exception]:
    """Every item's result (or error) in its input slot. `into`, a list of the caller's, is
    made one slot per item (None) and filled as items finish, so when the fan-out is
    cancelled or raises it still holds every answer that finished; None marks the rest."""
    if into is not None and not isinstance(into, list):
        raise TypeError("into must be a list (it receives one slot per item)")
    slots: list[Any] = into if into is not None else []
    slots[:] = [None] * len(items)
    stream = fan_out(
        items, run, clock=clock, max_concurrency=max_concurrency, rate=rate,
        on_error=on_error, progress=progress, keep=slots.__setitem__,
    )  # fmt: skip
    async with contextlib.aclosing(stream):
        async for _ in stream:
            pass
    # Every slot is filled once the stream has ended.
    return cast("list[R | Exception]", slots)


def rich_progress(
    total: int, description: str = "levergate map"
) -> tuple[Progress, Callable[[], None]]:
    """A `rich` progress bar as a progress callback, and the function that closes it. Raises
    `ImportError` naming the extra when rich is not installed."""
    try:
        from rich.progress import Progress as Bar
    except ImportError as exc:  # pragma: no cover - rich ships with the cli extra
        raise ImportError("bar=True needs rich: pip install 'levergate[cli]'") from exc
    bar = Bar(transient=True)
    task = bar.add_task(description, total=total)
    bar.start()

    def update(done: int, _total: int) -> None:
        bar.update(task, completed=done)

    return update, bar.stop


def item_body(
    kind: str, item: object, model: str | None, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One fan-out item as a request body: a plain prompt (with `model=`) or a body of its own
    (`model=` filling a missing model), over the `params` every item shares. Anything else is
    that item's `BadRequest`.

    Examples:
        >>> item_body("chat", "Hi", "m", {"max_tokens": 4})
        {'max_tokens': 4, 'model': 'm', 'messages': [{'role': 'user', 'content': 'Hi'}]}
        >>> item_body("embedding", {"input": "x", "model": "e"}, "m")
        {'input': 'x', 'model': 'e'}
    """
    from levergate.errors import BadRequest

    if isinstance(item, str):
        if model is None:
            raise BadRequest("a plain-prompt item needs map(..., model=...)", param="model")
        field: dict[str, Any]
        if kind == "chat":
            field = {"messages": [{"role": "user", "content": item}]}
        elif kind == "completion":
            field = {"prompt": item}
        else:
            field = {"input": item}
        return {**(params or {}), "model": model, **field}
    if isinstance(item, Mapping):
        body = {**(params or {}), **item}
        if model is not None:
            body.setdefault("model", model)
        if body.get("stream"):
            raise BadRequest("a fan-out item cannot stream (use chat(stream=True))", param="stream")
        return body
    raise BadRequest(
        f"a fan-out item must be a prompt string or a request body, not {type(item).__name__}"
    )

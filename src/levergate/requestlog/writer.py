"""`LogWriter`: finished requests into the log store, in batches, off the request path.

On the request path (`observe`, called by the recorder on the event loop after the answer went
out: Measure defers the recorder's `finish` to a later turn) a record is held with its parsed body
(`Held`), its time, its deadlines' features (`controls_of`) and its bodies (where enabled) read
at once; or, with the queue full, one counter increment: the record is dropped and counted
(`levergate_request_log_dropped_total{reason="queue_full"}`; the held count as queued). Every
`HELD` records (at most `batch_size`), or sooner once their requests' bytes reach `HELD_BYTES`,
their rows are built together (`settle`: requestlog/row.py `row_of`, a flat tuple, its replay
features the last value) into a bounded queue; the job settles what is held before it writes,
so its timer and the close write those too. Bodies, where enabled, are taken by reference and
bounded in bytes apart from the count; they alone are left for the batch to turn into text.

Why held, and why 32: a record's row and features built alone, between two requests' work, run
code the request path has evicted from the CPU's caches. Timed in place (`perf_counter` around
`observe` in `inprocess_cpu.py`'s gateway, 2026-12-05, a quiet AMD EPYC): 7.2 us a record built
one at a time (its features 4.0 us, its row 1.5 us; the same features take 1.46 us in a `timeit`
loop), 5.4 us held 16 at a time, 4.0 us 32, 3.9 us 64, 4.1 us 128. Holding them costs the
collector little (a record and its body live 32 requests at most: 231 -> 239 young collections
over 8,600 requests, its time unchanged). The queue still holds rows, not records: records kept
until the batch (until 2026-12-02), 500 requests' object graphs (the call, its context and
trace) survived the young generation and were freed together, cache-cold, 1.169x of off against
1.133x with the rows built at once. And holding the body parsed, not its bytes: from
2026-12-03 the features waited for the batch from the bytes as received, parsed again there
(~6k instructions a record), 1.082x / 1.057x of off (whole / stream) against 1.063x / 1.053x
computed at once. On the wall clock, in-process CPU a request
(`benchmarks/results/held_trees_ab.md`: trees side by side, 12 alternating rounds, steady
state) the log cost 1.026x / 0.998x of off whole / streamed (paired 1.037x / 1.024x) held 32 at
a time, against 1.041x / 1.023x (paired 1.061x / 1.032x) built one at a time; a smaller batch
(64 or 128, rows younger when written) did not help.

The replay features (requestlog/features.py: what `levergate analyze` needs with bodies off) use
the fingerprint's canonical bytes the exact cache's when it computed them for this very body
(`Trace.canonical`: ~9.5k instructions a record not spent again). Counted, building rows
in the batch from held bytes cost ~15.5k instructions a record more than at once (the held
bytes parsed again ~6k, the `Pending` tuple, the row joined with its features, the batch's loop
and turns; callgrind, `benchmarks/results/loginline_breakdown.md`).

Off the path, a supervised background job (`run`) wakes as soon as a batch is full, and writes the
full batches queued (the records that arrived before its turn wait for the next); or after
`flush_seconds` without, and writes what is queued. It takes up to `batch_size` records at a time,
turns the logged bodies among them into text (redacted and capped), yielding the event loop every
~0.5 ms, and inserts them. SQLite's inserts run on the event loop too, a statement of `LOOP_ROWS`
rows a turn, all in one transaction (`_write_now`, store.py `SqliteLog.writing`): never waiting (a
database another process holds locked, or a store not connected yet, goes to the thread instead) and
never syncing the disk (WAL, `synchronous = NORMAL`: a commit appends to the WAL; the checkpoints,
which sync, run every `CHECKPOINT_ROWS` rows in a thread and on a connection of their own, not
waited for: `_checkpoint`). Until 2026-12-04 the thread inserted every batch, in as few statements
as it could; but every statement there gives the GIL up and takes it back a few times (~5 an
`execute`), each a hand-over with the loop's thread when the loop is busy: the thread waited for the
loop to give the GIL back, woken for nothing at each of the loop's own system calls meanwhile
(`benchmarks/log_handoffs.py`), ~1 voluntary context switch a request in-process on a quiet 2-CPU
Xeon and ~16 us a request of system time. PostgreSQL's inserts (a network round trip) stay in the
thread, as do the labels' and the prunes. Python running in that thread would contend with the loop
for the GIL (measured, that doubled the log's cost). A writer process instead of the thread (the
store in a child fed pickled batches through a pipe, tried 2026-12-04 on an AMD EPYC host) took the
hand-overs away (the gateway's voluntary context switches 0.066-0.131 -> 0.015 a request) but cost
more than they did: pickling a row both ways ~10k instructions, the log 92.4k -> 110.3k instructions
a record in all, and in `log_ab.py` (the child's CPU counted) in-process whole answers 1.235x of off
against the thread's 1.131x in the same quiet minutes, through the proxy (two runs each,
interleaved) the gateway's and the child's CPU 1.10-1.20x / 1.24-1.31x of off (c=1 / c=16) against
the thread's 1.17-1.19x / 1.04-1.07x. Fed `marshal` bytes instead (a scratch prototype, 2026-12-05:
the row built in the gateway, its replay features and the inserts left to the child, 32 records a
write), the gateway alone still paid 3.8 us a record timed in place in `levergate serve` at c=16
(the hold 0.75, the row 0.75, `marshal.dumps` 0.62, the pipe's write 1.3-1.5), and through the proxy
(`log_ab.py`'s harness, 6 rounds) its own CPU was 1.051x of off against this log's 1.063x, the
child's not counted: a second process would move the log's cost, not remove it. Where the cost
goes through the proxy (`benchmarks/results/trees_proxy_log_parts.md`, `trees_ab.py --proxy`, 10
rounds, paired CPU / off at c=16, an A/A 1.005x): this writer loaded with `observe` returning at
once 1.005x, the rows and features built and queued but never written 1.056x, the whole log
1.112x: half its Python (the hold, the rows, the features, the job), half SQLite's. The row and
feature modules mypyc-compiled (with tracing's encoders): 1.127x, more, not less.

A store that fails (locked past its timeout, disk full, PostgreSQL down or
restarted) fails the batch, not a request: the batch goes back to the front of the queue, what
no longer fits in its bound is dropped and counted (`reason="store_error"`), and the job waits
(1 s, doubling to 30 s) before it tries again, reconnecting. Every `prune_seconds` the thread
enforces the age and size bounds. Closing flushes what is queued, bounded by the store's timeout
(a batch the job was still turning into rows when it stopped goes back to the queue first).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from levergate.core.clock import Clock, SystemClock
from levergate.core.json_bound import parse_json
from levergate.protocol.openai.body import generated_text
from levergate.redact import REDACTED, Redactor
from levergate.requestlog.features import controls_of, replay_text
from levergate.requestlog.labels import label_row
from levergate.requestlog.row import UNKNOWN_BYTES, Captured, row_of
from levergate.requestlog.store import LogStore, LogStoreBusy, LogStoreError, SqliteLog

if TYPE_CHECKING:
    from levergate.config.request_log import RequestLogBodiesSettings, RequestLogSettings
    from levergate.core.call import Call
    from levergate.layers.measure.record import RequestRecord
    from levergate.layers.measure.recorder import Seen
    from levergate.layers.measure.shadow_labels import ShadowLabel

__all__ = ["Bodies", "BodyText", "LogMetrics", "LogWriter", "wait_seconds"]

log = logging.getLogger("levergate.requestlog")
T = TypeVar("T")


# The deadlines' features of a request with none (`controls_of` gives {} then), shared: read only.
_NO_CONTROLS: Mapping[str, Any] = MappingProxyType({})
_NO_BODIES = (None, None)


class Bodies(NamedTuple):
    """A queued record whose bodies are logged: its row, complete but for the body columns
    (None), and the bodies taken by reference, turned into capped, redacted text in the batch.
    Every other record is queued as its row alone (no pair a record, nothing left for the
    batch: `_rows` passes it on)."""

    row: tuple[Any, ...]
    captured: Captured


# What the queue holds: a record's complete row, or its row and bodies (`Bodies`).
Item = tuple[Any, ...]
# A record held for its row (`LogWriter.observe`): its time, the record, its body, kind and
# model, its deadlines' features, the exact cache's canonical bytes of its body (None: not
# computed), its bodies when logged.
Held = tuple[float, "RequestRecord", Mapping[str, Any], str, str, Mapping[str, Any],
             bytes | None, Captured | None]  # fmt: skip
# Records held before their rows are built together (`settle`; at most `batch_size`), and the
# request bytes held at most meanwhile (a few large prompts are settled at once).
HELD, HELD_BYTES = 32, 256 * 1024
RETRY_FIRST_S, RETRY_CAP_S = 1.0, 30.0
TURN_SECONDS = 0.0005  # rows built per turn of the event loop: about this long
# Rows inserted a turn of the loop (`_write_now`): ~7 us a row of SQLite's and sqlite3's work,
# so a turn about as long as a turn of `_rows`; and rows written between two checkpoints
# (a few MB of WAL at most, as SQLite's own 1,000 pages).
LOOP_ROWS, CHECKPOINT_ROWS = 64, 2000
SQLITE_WAIT_MS = 10.0  # `write_wait_ms` unset with SQLite (config/request_log.py)
# What a turn is timed by (benchmarks/instructions.py counts rows instead: a turn's rows on a
# wall clock vary with the machine's load, and each turn costs an event-loop iteration).
TURN_CLOCK: Callable[[], float] = time.perf_counter


class LogMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = Counter(
            "levergate_request_log_dropped",
            "Request records the request log did not keep: queue_full (the queue was at "
            "request_log.max_queue), store_error (the store kept failing and the queue's bound "
            "was reached), invalid (could not be turned into a row); reason=bodies counts "
            "records kept without their bodies (bodies.max_queued_bytes reached).",
            ("reason",),
            registry=registry,
        )
        self.written = Counter(
            "levergate_request_log_written", "Request records written to the log store.",
            registry=registry,
        )  # fmt: skip
        self.store_errors = Counter(
            "levergate_request_log_store_errors",
            "Writes and prunes of the request log that failed (the batch was kept and retried).",
            registry=registry,
        )
        self.queued = Gauge(
            "levergate_request_log_queued", "Request records waiting to be written.",
            registry=registry,
        )  # fmt: skip
        self.pruned = Counter(
            "levergate_request_log_pruned",
            "Request records deleted by the log's age and size bounds.",
            registry=registry,
        )


class BodyText:
    """A request's bodies as the log keeps them: the request's JSON and the answer's text, each
    redacted of every configured secret and `redact_patterns`, then cut to `max_bytes`. The text
    is cut to `max_bytes` plus the longest secret before it is redacted, so no secret straddles
    the cut."""

    def __init__(self, settings: RequestLogBodiesSettings, redactor: Redactor) -> None:
        self._max = settings.max_bytes
        self._redactor = redactor
        self._patterns = [re.compile(p) for p in settings.redact_patterns]
        self._margin = max((len(f) for f in redactor.forms), default=0) + 1024

    def texts(self, captured: Captured) -> tuple[str, str]:
        raw = captured.raw if captured.raw is not None else orjson.dumps(captured.body)
        request = raw[: self._max + self._margin].decode("utf-8", "replace")
        return self._clean(request, len(raw)), self._clean(*_answer(captured, self._max))

    def text(self, text: str) -> str:
        """Any text as the log keeps it: redacted, capped."""
        return self._clean(text, len(text.encode("utf-8", "replace")))

    def _clean(self, text: str, size: int) -> str:
        text = self._redactor(text[: self._max + self._margin])
        for pattern in self._patterns:
            text = pattern.sub(REDACTED, text)
        cut = text.encode()[: self._max].decode("utf-8", "ignore")
        return cut if size <= self._max and cut == text else f"{cut}[truncated: {size} bytes]"


def _answer(captured: Captured, most: int) -> tuple[str, int]:
    """The answer's generated text (whole, or the stream's chunks) and its size."""
    if captured.answer is not None:
        data = parse_json(captured.answer.raw)
        text = generated_text(data) if isinstance(data, dict) else ""
        return text, len(text.encode())
    parts: list[str] = []
    size = 0
    for chunk in captured.chunks:
        data = parse_json(chunk)
        if isinstance(data, dict):
            part = generated_text(data)
            size += len(part.encode())
            if size <= most * 2:
                parts.append(part)
    return "".join(parts), size


def wait_seconds(write_wait_ms: float | None, store: LogStore) -> float:
    """How long the loop waits for the store's thread (`write_wait_ms`; unset: a local
    disk's work is waited for, a server's round trips are not)."""
    if write_wait_ms is None:
        return SQLITE_WAIT_MS / 1000 if isinstance(store, SqliteLog) else 0.0
    return write_wait_ms / 1000


class LogWriter:
    def __init__(
        self,
        store: LogStore,
        *,
        settings: RequestLogSettings,
        metrics: LogMetrics,
        bodies: BodyText,
        clock: Clock | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: the gateway's (deadlines are times on it); `wall`: what a row's `ts` is read
        from (epoch seconds; a virtual-time benchmark passes its loop's clock)."""
        self._store = store
        self._clock = clock or SystemClock()
        self._wall = wall
        self._s = settings
        self._m = metrics
        self._bodies = bodies
        self._queue: deque[Item] = deque()
        self._held: list[Held] = []
        self._held_bytes = 0
        self._chunk = min(HELD, settings.batch_size)
        self._max = settings.max_queue
        self._batch = settings.batch_size
        names = settings.bodies.models
        self._body_models = frozenset(names)
        self._all_bodies = "*" in names
        self._private = frozenset(settings.bodies.private_tenants)
        self._labels: deque[tuple[float, ShadowLabel]] = deque()
        self._body_bytes = 0
        self._body_limit = settings.bodies.max_queued_bytes
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="levergate-log")
        # SQLite's checkpoints, apart from the store's thread (`_checkpoint`)
        self._checkpointer = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="levergate-log-checkpoint"
        )
        self._checkpointing: asyncio.Future[None] | None = None  # the last one started
        self._write_wait = wait_seconds(settings.write_wait_ms, store)
        self._thread_work: concurrent.futures.Future[Any] | None = None  # the last submitted
        self._unchecked = 0  # rows written to SQLite since the last checkpoint
        self._retry = RETRY_FIRST_S
        self._failing = False
        self._closed = False
        metrics.queued.set_function(lambda: len(self._queue) + len(self._held))

    # ---- the request path ---------------------------------------------------------------------

    def observe(self, record: RequestRecord, call: Call, seen: Seen) -> None:
        """Hold `record` for its row (the recorder calls this on the event loop, after the
        answer went out): its time, deadlines and bodies read now, its row and replay features
        built with the others held, `HELD` at a time (`settle`)."""
        held = self._held
        if len(self._queue) + len(held) >= self._max:
            self._m.dropped.labels("queue_full").inc()
            return
        now = self._wall()
        ctx = call.ctx
        body = call.body
        controls = ctx.controls
        if controls.deadline is None and controls.run_async is None:
            extra = _NO_CONTROLS  # most requests: no clock read, no call
        else:
            try:
                extra = controls_of(call, now=self._clock.now(), wall=now,
                                    total=record.timings.total)  # fmt: skip
            except Exception:  # a record that cannot be a row is that record's loss alone
                log.exception("request log: record %s not written", record.request_id)
                self._m.dropped.labels("invalid").inc()
                return
        # `Call.model`, read as it reads it (a property: a Python frame); the exact cache's
        # canonical bytes when it computed them for this very body.
        model = body.get("model")
        known = ctx.trace.canonical
        captured = None
        if self._body_models and (
            self._all_bodies or record.model in self._body_models
            or record.alias in self._body_models
        ) and record.tenant not in self._private:  # fmt: skip
            captured = self._capture(call, seen)  # inline: every request passes here
        held.append((now, record, body, call.kind, model if isinstance(model, str) else "",
                     extra, known[1] if known is not None and known[0] is body else None,
                     captured))  # fmt: skip
        raw = call.raw  # a library caller's request has none: counted as `Captured.size` does
        self._held_bytes += len(raw) if raw is not None else UNKNOWN_BYTES
        if len(held) >= self._chunk or self._held_bytes >= HELD_BYTES:
            self.settle()

    def settle(self) -> None:
        """The held records' rows, complete, into the queue (`observe`); a record that cannot
        be a row is dropped and counted (`invalid`)."""
        queue = self._queue
        for now, record, body, kind, model, extra, canonical, captured in self._held:
            try:
                replay = replay_text(body, kind=kind, model=model, controls=extra,
                                     canonical=canonical)  # fmt: skip
                row = row_of(now, record, _NO_BODIES, replay)
            except Exception:
                log.exception("request log: record %s not written", record.request_id)
                self._m.dropped.labels("invalid").inc()
                if captured is not None:
                    self._body_bytes -= captured.size
                continue
            queue.append(row if captured is None else Bodies(row, captured))
        self._held.clear()
        self._held_bytes = 0
        if len(queue) >= self._batch:
            self._wake.set()

    def _bodies_for(self, *names: str | None) -> bool:
        """Whether bodies are logged for any of these aliases, routes or cascades."""
        found = self._body_models
        return bool(found) and (self._all_bodies or any(n in found for n in names if n))

    def labelled(self, label: ShadowLabel) -> None:
        """Queue a shadow label (`ShadowLabels` calls this on the event loop); a full queue
        drops it, counted as `reason="queue_full"`."""
        if len(self._labels) >= self._max:
            self._m.dropped.labels("queue_full").inc()
            return
        self._labels.append((self._wall(), label))
        if len(self._labels) == self._batch:
            self._wake.set()

    def _label_rows(self, batch: Sequence[tuple[float, ShadowLabel]]) -> list[tuple[object, ...]]:
        rows = []
        for at, label in batch:
            texts = None
            if (self._bodies_for(label.name, label.cheap, label.strong)
                    and label.tenant not in self._private):  # fmt: skip
                clean = self._bodies.text
                strong = None if label.strong_text is None else clean(label.strong_text)
                texts = (clean(label.prompt), clean(label.cheap_text), strong)
            rows.append(label_row(at, label, texts))
        return rows

    def _capture(self, call: Call, seen: Seen) -> Captured | None:
        captured = Captured(call.raw, call.body, seen.reply, seen.generated)
        size = captured.size
        if self._body_bytes + size > self._body_limit:
            self._m.dropped.labels("bodies").inc()
            return None
        self._body_bytes += size
        return captured

    # ---- the background job --------------------------------------------------------------------

    async def run(self) -> None:
        """Write batches until cancelled; enforce the bounds every `prune_seconds`."""
        next_prune = time.monotonic()
        while True:
            if not await self.flush(drain=False, partial=await self._wait()):
                await asyncio.sleep(self._retry)
                self._retry = min(RETRY_CAP_S, self._retry * 2)
                continue
            self._retry = RETRY_FIRST_S
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self._s.prune_seconds
                await self._prune()

    async def _wait(self) -> bool:
        """Until a batch is full (False) or `flush_seconds` passed without (True)."""
        try:
            async with asyncio.timeout(self._s.flush_seconds):
                await self._wake.wait()
        except TimeoutError:
            return True
        finally:
            self._wake.clear()
        return False

    async def flush(self, *, drain: bool = True, partial: bool = True) -> bool:
        """Write what is queued, batch by batch: with `drain` (the close, a caller), until the queue
        is empty, and then wait for a checkpoint running (`_checkpoint`); without (the job), what
        was queued when it began, so that the records arriving during a write wait for a full batch
        or `flush_seconds` (draining, the job chased the queue's tail under steady traffic: a
        statement and a thread hand-off every ~3 records, ~0.2 ms of CPU a request in `log_ab.py`);
        and without `partial` (the job woken by a full batch, not by its timer) only the full
        batches of it: the records that arrived between the wake and the job's turn wait for the
        next batch instead of going to the store's thread as a batch of their own (at concurrency
        16, in-process, a batch of a few records after every full one: two hand-offs a batch,
        `log_handoffs.py`). False when the store failed (the batch is back in the queue, as much of
        it as fits)."""
        self.settle()
        queue = self._queue
        size = self._batch
        todo = sys.maxsize if drain else len(queue) if partial else len(queue) // size * size
        while queue and todo > 0:
            batch = [queue.popleft() for _ in range(min(len(queue), size, todo))]
            todo -= len(batch)
            self._hold(batch, -1)
            try:
                rows = await self._rows(batch)
            except asyncio.CancelledError:  # the job stopped (closing): `aclose` writes them
                self._give_back(batch)
                raise
            if not rows:
                continue
            try:
                if not await self._write_now(rows, batch):
                    await self._in_thread(self._store.write, rows)
            except LogStoreError as exc:
                self._requeue(batch, exc)
                return False
            self._m.written.inc(len(rows))
            self._checkpoint(len(rows))
            if self._failing:
                self._failing = False
                log.warning("request log: the store is writable again")
        if len(queue) >= size:  # filled up during the writes past the length that wakes the job
            self._wake.set()
        written = await self._flush_labels()
        if drain and self._checkpointing is not None:  # a caller's flush: its rows copied too
            await asyncio.wait((self._checkpointing,))
        return written

    async def _write_now(self, rows: list[tuple[object, ...]], batch: list[Item]) -> bool:
        """Write `rows` on the event loop, `LOOP_ROWS` a statement and a turn, when the store
        can without waiting (`SqliteLog.writing`) and its thread is idle (a write it was still
        running when the job was cancelled, say; the connection is one); False when not, for
        the thread to write them. On the loop because in the thread each of a statement's
        releases of the GIL (~5 an `execute`) is a hand-over with the busy loop: the thread
        waits for it to be handed back, woken for nothing at each of the loop's own releases
        (each system call) meanwhile, and pays a context switch each time, ~1 a request
        in-process on a quiet 2-CPU Xeon (`otel_where.py`, 2026-12-04). Cancelled meanwhile,
        the rows are rolled back and the batch goes back to the queue, `aclose` writing it.
        Every `CHECKPOINT_ROWS` rows written, SQLite's checkpoint runs in the thread
        (`_checkpoint`)."""
        store = self._store
        busy = self._thread_work is not None and not self._thread_work.done()
        if not isinstance(store, SqliteLog) or busy:
            return False
        try:
            with contextlib.closing(store.writing(rows, at_once=LOOP_ROWS)) as turns:
                for _ in turns:
                    await asyncio.sleep(0)
        except LogStoreBusy:
            return False
        except asyncio.CancelledError:
            self._give_back(batch)
            raise
        return True

    def _checkpoint(self, written: int) -> None:
        """Every `CHECKPOINT_ROWS` rows written to SQLite (on the loop or, while locked
        elsewhere, in the thread: the connection's automatic checkpoints are off for both once
        `writing` ran), its checkpoint, in a thread of its own on a connection of its own
        (`SqliteLog.checkpoint`), not waited for: the loop goes on writing meanwhile. One at a
        time: while one runs, the rows written count toward the next. Until 2026-12-05 it ran
        in the store's thread with the loop waiting up to `write_wait_ms` for it (the loop's
        writes wait while that thread works), a pause of every request in flight: through the
        proxy at c=16 (`log_ab.py`, 12 rounds each) the log's p99 was 1.44x of off, and
        1.07x-1.08x in two runs with it apart (`log_ab_proxy_main.md`,
        `log_ab_proxy_checkpoint.md`, `log_ab_proxy_checkpoint2.md`), the CPU the same; the WAL
        as small (1.4 MB over 150,000 requests)."""
        store = self._store
        if not isinstance(store, SqliteLog):
            return
        self._unchecked += written
        running = self._checkpointing
        if self._unchecked < CHECKPOINT_ROWS or (running is not None and not running.done()):
            return
        self._unchecked = 0
        running = asyncio.wrap_future(self._checkpointer.submit(store.checkpoint))
        running.add_done_callback(self._checkpointed)
        self._checkpointing = running

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        if not done.cancelled() and (exc := done.exception()) is not None:
            self._m.store_errors.inc()  # the next one copies what this one did not
            log.warning("request log: checkpoint failed: %s", exc)

    def _in_thread(self, work: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run `work` in the store's thread (PostgreSQL's writes, SQLite's writes while locked
        elsewhere, the labels', the prunes), waiting for it up to
        `write_wait_ms` with the event loop blocked (the GIL free for the thread whenever the
        database gives it back), and the rest of it asynchronously. Not waiting, the thread
        waits for the busy loop at each of its turns with the GIL, woken for nothing at each of
        the loop's system calls meanwhile, until the loop is idle: ~190 context switches a
        batch when the thread wrote them (log_cpu.md: in-process 1.126x of off without the
        wait, 1.063x with it); with the loop never idle (in-process), a checkpoint's turn (run
        here until 2026-12-05) came at the run's end and SQLite's writes meanwhile went to the
        thread (`_write_now` does not write on the loop while the thread works): 1.18x against
        1.07x waiting (2026-12-04, a 2-CPU Xeon). Waited for by default with SQLite (a local
        disk), not with PostgreSQL (a server's round trips): the wait pauses the loop, and with
        it every request in flight."""
        future = self._thread_work = self._executor.submit(work, *args)
        if self._write_wait > 0:
            concurrent.futures.wait((future,), timeout=self._write_wait)
        return asyncio.wrap_future(future)

    async def _flush_labels(self) -> bool:
        """Write the queued shadow labels; False (the batch back in the queue) when the store
        failed."""
        labels = self._labels
        while labels:
            batch = [labels.popleft() for _ in range(min(len(labels), self._batch))]
            try:
                rows = self._label_rows(batch)
                await self._in_thread(self._store.write_labels, rows)
            except LogStoreError as exc:
                self._m.store_errors.inc()
                log.warning("request log: writing shadow labels failed, retrying: %s", exc)
                labels.extendleft(reversed(batch[max(0, len(batch) - self._max) :]))
                return False
        return True

    def _hold(self, items: Sequence[Item], sign: int) -> None:
        """Count (`sign` 1) or release (-1) the bodies `items` hold."""
        if not self._body_models:  # none captured
            return
        held = 0
        for item in items:
            if type(item) is Bodies:
                held += item.captured.size
        self._body_bytes += sign * held

    async def _rows(self, batch: list[Item]) -> list[tuple[object, ...]]:
        """The batch's rows: each record's as queued (the batch itself when no bodies are
        logged), but for the bodies of a record whose bodies are logged, turned into text
        here, on the event loop about `TURN_SECONDS` at a time: Python work in the writer's
        thread would contend with the loop for the GIL (measured: the log's cost doubled),
        while the database's own work there holds none."""
        if not self._body_models:
            return batch
        rows: list[tuple[object, ...]] = []
        clock = TURN_CLOCK
        turn = clock() + TURN_SECONDS
        for item in batch:
            if type(item) is not Bodies:
                rows.append(item)
                continue
            row, captured = item
            try:  # the row's last four: the bodies, the schema, the replay features
                rows.append(row[:-4] + self._bodies.texts(captured) + row[-2:])
            except Exception:  # a record that cannot be a row is that record's loss alone
                log.exception("request log: record %s not written", row[1])
                self._m.dropped.labels("invalid").inc()
            if clock() >= turn:
                await asyncio.sleep(0)
                turn = clock() + TURN_SECONDS
        return rows

    def _requeue(self, batch: list[Item], exc: LogStoreError) -> None:
        self._m.store_errors.inc()
        if not self._failing:
            self._failing = True
            log.warning("request log: write failed, keeping up to %d records and retrying: %s",
                        self._max, exc)  # fmt: skip
        lost = self._put_back(batch)
        if lost:
            self._m.dropped.labels("store_error").inc(lost)

    def _give_back(self, batch: list[Item]) -> None:
        """A batch the stopped job held, back to the queue for `aclose` to write; what no
        longer fits is dropped and counted."""
        if lost := self._put_back(batch):
            self._m.dropped.labels("queue_full").inc(lost)

    def _put_back(self, batch: list[Item]) -> int:
        """Return `batch` to the front of the queue, as much of its end as fits the queue's
        bound; how many records did not."""
        room = max(0, self._max - len(self._queue))
        kept = batch[len(batch) - room :] if room < len(batch) else batch
        self._hold(kept, 1)
        self._queue.extendleft(reversed(kept))
        return len(batch) - len(kept)

    async def _prune(self) -> None:
        s = self._s

        def prune() -> int:
            now, age = self._wall(), s.max_age_days * 86400
            gone = self._store.prune(now=now, max_age_seconds=age, max_bytes=s.max_bytes)
            return gone + self._store.prune_labels(now=now, max_age_seconds=age,
                                                   max_rows=s.max_labels)  # fmt: skip

        try:
            gone = await self._in_thread(prune)
        except LogStoreError as exc:
            self._m.store_errors.inc()
            log.warning("request log: pruning failed: %s", exc)
            return
        self._m.pruned.inc(gone)

    async def aclose(self) -> None:
        """Write what is queued (once, bounded by the store's timeout), then close; again: a
        no-op. The write is shielded: a closer cancelled meanwhile (a reload retiring this
        gateway while the server stops) waits for it, bounded as it is, and then takes its
        cancellation; without, the batch being turned into rows went back to the queue and
        the queue was left unwritten and uncounted. What is not written is counted dropped
        (`store_error`), the shadow labels as well; records observed after the close are
        dropped as the queue's (`queue_full`: it takes none)."""
        if self._closed:
            return
        self._closed = True
        final = asyncio.ensure_future(self._final_write())
        cancelled = False
        while not final.done():
            try:
                await asyncio.shield(final)
            except asyncio.CancelledError:
                cancelled = True
        final.result()
        if cancelled:
            raise asyncio.CancelledError

    async def _final_write(self) -> None:
        try:
            async with asyncio.timeout(self._s.store.timeout_seconds + 1):
                await self.flush()
        except TimeoutError:
            log.warning("request log: closed with %d records unwritten", len(self._queue))
        if lost := len(self._queue) + len(self._labels):
            self._m.dropped.labels("store_error").inc(lost)
        self._queue.clear()
        self._labels.clear()
        self._max = 0
        loop = asyncio.get_running_loop()
        if self._checkpointing is not None:  # its connection is closed with the store's
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.wait((self._checkpointing,)), 5)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loop.run_in_executor(self._executor, self._store.close), 5)
        self._executor.shutdown(wait=False)
        self._checkpointer.shutdown(wait=False)

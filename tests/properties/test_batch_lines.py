"""Whatever the order of claims, finishes, retries and crashes (leases left to lapse), every
accepted line ends in exactly one of output or error, exactly once."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.batch.model import Claim, Job, LineRow
from levergate.batch.stores.sqlite import SqliteStore

LEASE = 10.0
OPS = st.lists(
    st.tuples(
        st.sampled_from(["claim", "ok", "error", "retry", "crash", "tick"]), st.integers(0, 7)
    ),
    max_size=40,
)
_ids = itertools.count()


async def _life(store: SqliteStore, lines: int, refused: int, ops: list[tuple[str, int]]) -> None:
    job_id = f"batch_{next(_ids)}"
    job = Job(
        id=job_id,
        tenant="t",
        status="validating",
        endpoint="/v1/chat/completions",
        input_file_id="f",
        created_at=0,
        expires_at=10**9,
    )
    await store.add_job(job)
    rows = [LineRow(i, f"c{i}", b"{}") for i in range(lines)]
    rows += [LineRow(lines + i, f"r{i}", None, b"refused") for i in range(refused)]
    await store.add_lines(job_id, rows)
    await store.save(job.moved("in_progress", now=0), expect="validating")
    now, holder, held = 0.0, 0, list[Claim]()
    for op, n in ops:
        if op == "claim":
            held += await store.claim(holder=str(holder), now=now, until=now + LEASE, limit=n)
        elif op in ("ok", "error") and held:
            line = held.pop(n % len(held))
            await store.finish(job_id, [(line.idx, op == "ok", f"{op}-{line.idx}".encode())])
        elif op == "retry" and held:
            line = held.pop(n % len(held))
            await store.retry_later(job_id, line.idx, holder=str(holder), at=now + n)
        elif op == "crash":
            holder, held = holder + 1, []
        now += 1.0 if op == "tick" else 0.0
    # Whoever comes last drains the queue once every lease has lapsed.
    now += LEASE + 10
    while found := await store.claim(holder="last", now=now, until=now + LEASE, limit=100):
        await store.finish(job_id, [(c.idx, c.idx % 2 == 0, b"last") for c in found])
    ok = [i for i, _ in await store.results(job_id, ok=True, after=-1, limit=10**6)]
    error = [i for i, _ in await store.results(job_id, ok=False, after=-1, limit=10**6)]
    assert sorted(ok + error) == list(range(lines + refused))
    assert (await store.counts(job_id)).open == 0


@settings(max_examples=40, deadline=None)
@given(lines=st.integers(0, 12), refused=st.integers(0, 3), ops=OPS)
def test_every_accepted_line_ends_once_in_output_or_error(
    lines: int, refused: int, ops: list[tuple[str, int]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:

        async def run() -> None:
            store = SqliteStore(Path(tmp) / "b.sqlite3", timeout=5)
            try:
                await _life(store, lines, refused, ops)
            finally:
                await store.aclose()

        asyncio.run(run())

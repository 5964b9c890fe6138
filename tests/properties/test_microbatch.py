"""Properties of the generic micro-batcher, in virtual time: whatever the arrivals, keys, sizes,
cancellations and failures, every submitter gets exactly its own result (or exactly its batch's
error), and no batch breaks a bound or mixes keys."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.core.microbatch import BatchLimits, MicroBatcher
from levergate.testing import LoopClock, run_virtual


@dataclass(frozen=True)
class Item:
    ident: int
    key: str
    count: int  # items it counts for
    size: int  # bytes it counts for
    poison: bool  # its batch fails


class Boom(Exception):
    pass


LIMITS = st.builds(
    BatchLimits,
    max_wait=st.sampled_from([0.0, 0.001, 0.003]),
    max_items=st.integers(1, 10),
    max_requests=st.integers(1, 5),
    max_bytes=st.one_of(st.none(), st.integers(1, 200)),
    max_running=st.one_of(st.none(), st.integers(1, 3)),
)


async def scenario(
    subs: Sequence[tuple[str, int, int, int, int | None]],
    poison: frozenset[int],
    limits: BatchLimits,
) -> None:
    batches: list[list[Item]] = []

    async def run(items: Sequence[Item]) -> list[tuple[int, int]]:
        batches.append(list(items))
        await asyncio.sleep(0.002)  # upstream time: later batches queue behind max_running
        if any(item.poison for item in items):
            raise Boom(tuple(item.ident for item in items))
        return [(item.ident, item.count) for item in items]

    batcher: MicroBatcher[Item, tuple[int, int]] = MicroBatcher(
        run, limits=limits, clock=LoopClock(), items=lambda i: i.count, size=lambda i: i.size
    )
    items = [Item(n, key, count, size, n in poison) for n, (key, count, size, _, _) in
             enumerate(subs)]  # fmt: skip

    async def submitter(item: Item, arrival: int) -> tuple[int, int]:
        await asyncio.sleep(arrival / 1000)
        return await batcher.submit(item, key=item.key)

    tasks = [
        asyncio.create_task(submitter(item, sub[3])) for item, sub in zip(items, subs, strict=True)
    ]
    for task, sub in zip(tasks, subs, strict=True):
        if sub[4] is not None:
            asyncio.get_running_loop().call_later((sub[3] + sub[4]) / 1000, task.cancel)
    await asyncio.wait(tasks)

    where = {item.ident: n for n, batch in enumerate(batches) for item in batch}
    assert len(where) == sum(len(b) for b in batches)  # nobody is sent twice
    for batch in batches:
        assert len({item.key for item in batch}) == 1  # keys never mix
        if len(batch) > 1:  # an item over the limits alone may run alone
            assert len(batch) <= limits.max_requests
            assert sum(item.count for item in batch) <= limits.max_items
            if limits.max_bytes is not None:
                assert sum(item.size for item in batch) <= limits.max_bytes
    for item, task, sub in zip(items, tasks, subs, strict=True):
        if task.cancelled():
            assert sub[4] is not None  # only the ones we cancelled
            continue
        assert item.ident in where  # everyone who stayed was sent
        batch = batches[where[item.ident]]
        if any(other.poison for other in batch):
            error = task.exception()
            assert isinstance(error, Boom)
            assert error.args[0] == tuple(other.ident for other in batch)
        else:
            assert task.result() == (item.ident, item.count)  # its own, nobody else's


@settings(max_examples=150, deadline=None)
@given(
    subs=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.integers(1, 6),
            st.integers(0, 120),
            st.integers(0, 6),
            st.one_of(st.none(), st.integers(0, 8)),
        ),
        min_size=1,
        max_size=25,
    ),
    poison=st.frozensets(st.integers(0, 24), max_size=3),
    limits=LIMITS,
)
def test_each_submitter_gets_its_own_result_or_its_batch_error(
    subs: list[tuple[str, int, int, int, int | None]],
    poison: frozenset[int],
    limits: BatchLimits,
) -> None:
    run_virtual(scenario(subs, poison, limits))

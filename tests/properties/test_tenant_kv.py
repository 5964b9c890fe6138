"""Invariants of the `TenantKV` policy under any sequence of writes, reads and deletes by several
tenants: no tenant ever holds more than its bound, the store never more than its total, the
entry just written is kept, a tenant at or under its fair share is never evicted while a
larger one holds entries — and the SQLite backend decides exactly as the memory one does."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.stores.tenant_kv import ENTRY_OVERHEAD, Bounds, MemoryTenantKV
from levergate.stores.tenant_kv_sqlite import SqliteTenantKV

TENANTS = ("a", "b", "c")
KEYS = tuple(f"k{i}" for i in range(6))
BOUNDS = Bounds(tenant_bytes=3000, total_bytes=5000, ttl=50.0)

ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "put", "get", "delete", "wait"]),
        st.sampled_from(TENANTS),
        st.sampled_from(KEYS),
        st.integers(min_value=1, max_value=1400),  # value bytes (plus key and overhead)
    ),
    min_size=1,
    max_size=60,
)


class Ticks:
    """One clock for both stores: every operation happens at its own time."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


async def _run(sequence: list[tuple[str, str, str, int]], folder: Path) -> None:
    ticks = Ticks()
    memory = MemoryTenantKV(bounds=BOUNDS, clock=ticks)
    sqlite = SqliteTenantKV(folder / "kv.sqlite3", bounds=BOUNDS, busy_timeout=1.0,
                            wall=ticks.now)  # fmt: skip
    try:
        for op, tenant, key, size in sequence:
            ticks.t += 1.0
            if op == "put":
                value = bytes([size % 251]) * size
                await memory.put(tenant, key, value)
                await sqlite.put(tenant, key, value)
                assert await memory.get(tenant, [key]) == [value]  # the entry just written
            elif op == "get":
                assert await memory.get(tenant, [key]) == await sqlite.get(tenant, [key])
            elif op == "delete":
                assert await memory.delete(tenant, key) == await sqlite.delete(tenant, key)
            else:
                ticks.t += size / 20  # up to 70 s: past the TTL sometimes
            held = {t: await memory.bytes_of(t) for t in TENANTS}
            assert held == {t: await sqlite.bytes_of(t) for t in TENANTS}
            assert all(h <= BOUNDS.tenant_bytes for h in held.values())
            assert memory.total == sum(held.values()) <= BOUNDS.total_bytes
    finally:
        await sqlite.aclose()


@settings(max_examples=60, deadline=None)
@given(sequence=ops)
def test_the_bounds_hold_and_sqlite_decides_as_memory_does(
    sequence: list[tuple[str, str, str, int]],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(_run(sequence, Path(folder)))


@settings(max_examples=60, deadline=None)
@given(flood=st.lists(st.integers(min_value=1, max_value=1400), min_size=1, max_size=40),
       own=st.integers(min_value=1, max_value=1400))  # fmt: skip
def test_a_flooding_tenant_never_evicts_a_smaller_one(flood: list[int], own: int) -> None:
    async def run() -> None:
        ticks = Ticks()
        store = MemoryTenantKV(bounds=BOUNDS, clock=ticks)
        await store.put("small", "mine", b"x" * own)
        for i, size in enumerate(flood):
            ticks.t += 1.0
            for tenant in ("flood-1", "flood-2"):
                await store.put(tenant, f"k{i}", b"y" * size)
        # Whenever the total is over, the flood tenants hold more than it less "small"'s one
        # entry, so one of them (not holding only the entry just written) holds more than it.
        assert await store.get("small", ["mine"]) == [b"x" * own]
        assert own + len("mine") + ENTRY_OVERHEAD == await store.bytes_of("small")

    asyncio.run(run())

"""The prefix KV cache's accounting: budgets hold, the longest shared prefix wins, dominated
entries go, spilled entries come back. States are opaque bytes here: no model needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.upstreams.local.prefix_cache import DirectorySpill, PrefixCache, common_prefix


class MemorySpill:
    def __init__(self) -> None:
        self.files: dict[int, bytes] = {}

    def write(self, key: int, state: bytearray) -> None:
        self.files[key] = bytes(state)

    def read(self, key: int) -> bytearray | None:
        data = self.files.get(key)
        return None if data is None else bytearray(data)

    def delete(self, key: int) -> None:
        self.files.pop(key, None)


def tokens(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


token_lists = st.lists(st.integers(min_value=0, max_value=3), min_size=0, max_size=30)


@given(token_lists, token_lists)
def test_common_prefix_matches_the_naive_definition(a: list[int], b: list[int]) -> None:
    naive = 0
    while naive < min(len(a), len(b)) and a[naive] == b[naive]:
        naive += 1
    assert common_prefix(tokens(a), tokens(b)) == naive


operations = st.lists(
    st.tuples(
        st.sampled_from(["put", "get"]),
        st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=12),
        st.integers(min_value=1, max_value=40),
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(operations, st.integers(min_value=0, max_value=100), st.booleans())
def test_budgets_hold_and_the_counters_are_exact(
    ops: list[tuple[str, list[int], int]], spill_bytes: int, with_spill: bool
) -> None:
    spill = MemorySpill() if with_spill else None
    cache = PrefixCache(ram_bytes=60, min_tokens=2, spill=spill, spill_bytes=spill_bytes)
    for op, values, size in ops:
        if op == "put":
            cache.put(tokens(values), bytearray(size))
        else:
            match = cache.match(tokens(values), limit=len(values))
            if match is not None:
                cache.state(match.key)
        entries = list(cache._entries.values())
        in_ram = [e for e in entries if e.state is not None]
        spilled = [e for e in entries if e.state is None]
        assert cache.ram_used == sum(e.size for e in in_ram)
        assert cache.spilled_used == sum(e.size for e in spilled)
        assert cache.ram_used <= 60
        assert cache.spilled_used <= (spill_bytes if with_spill else 0)
        if spill is not None:
            assert sum(len(v) for v in spill.files.values()) == cache.spilled_used
        # No entry is a prefix of another: the longer one always serves at least as well.
        for a in entries:
            for b in entries:
                if a is not b and len(a.tokens) <= len(b.tokens):
                    assert common_prefix(a.tokens, b.tokens) < len(a.tokens)


def test_the_longest_shared_prefix_wins_and_is_capped_by_the_limit() -> None:
    cache = PrefixCache(ram_bytes=1000, min_tokens=3)
    cache.put(tokens([1, 2, 3, 4, 5, 6]), bytearray(b"a" * 10))
    cache.put(tokens([1, 2, 3, 9, 9]), bytearray(b"b" * 10))
    match = cache.match(tokens([1, 2, 3, 4, 5, 7, 7]), limit=10)
    assert match is not None
    assert match.common == 5
    assert cache.state(match.key) == bytearray(b"a" * 10)
    capped = cache.match(tokens([1, 2, 3, 4, 5, 6]), limit=5)
    assert capped is not None
    assert capped.common == 5
    assert cache.match(tokens([1, 2, 8]), limit=10) is None  # 2 shared < min_tokens


def test_a_newer_conversation_turn_replaces_the_entry_it_extends() -> None:
    cache = PrefixCache(ram_bytes=1000, min_tokens=2)
    cache.put(tokens([1, 2, 3]), bytearray(b"x" * 10))
    cache.put(tokens([1, 2, 3, 4, 5]), bytearray(b"y" * 20))
    assert len(cache) == 1
    assert cache.ram_used == 20
    assert cache.covers(tokens([1, 2, 3, 4]))
    assert not cache.covers(tokens([1, 2, 3, 4, 5, 6]))


def test_least_recently_used_entries_spill_and_come_back_on_a_hit() -> None:
    spill = MemorySpill()
    cache = PrefixCache(ram_bytes=25, min_tokens=2, spill=spill, spill_bytes=100)
    cache.put(tokens([1, 1, 1]), bytearray(b"a" * 10))
    cache.put(tokens([2, 2, 2]), bytearray(b"b" * 10))
    first = cache.match(tokens([1, 1, 1, 5]), limit=3)
    assert first is not None
    cache.state(first.key)  # [1,1,1] is now the most recently used
    cache.put(tokens([3, 3, 3]), bytearray(b"c" * 10))  # over budget: [2,2,2] spills
    assert cache.ram_used == 20
    assert cache.spilled_used == 10
    assert list(spill.files.values()) == [bytearray(b"b" * 10)]
    back = cache.match(tokens([2, 2, 2, 7]), limit=3)
    assert back is not None
    assert cache.state(back.key) == bytearray(b"b" * 10)
    assert cache.ram_used <= 25
    assert cache.spilled_used + cache.ram_used == 30


def test_a_state_bigger_than_the_budget_is_not_kept() -> None:
    cache = PrefixCache(ram_bytes=10, min_tokens=1)
    cache.put(tokens([1, 2]), bytearray(b"z" * 11))
    assert len(cache) == 0
    assert cache.ram_used == 0


def test_the_directory_spill_round_trips_and_starts_empty(tmp_path: Path) -> None:
    folder = tmp_path / "kv"
    folder.mkdir()
    (folder / "99.kv").write_bytes(b"left over from a previous run")
    spill = DirectorySpill(folder)
    assert list(folder.iterdir()) == []
    spill.write(1, bytearray(b"state"))
    assert spill.read(1) == bytearray(b"state")
    spill.delete(1)
    assert spill.read(1) is None
    cache = PrefixCache(ram_bytes=12, min_tokens=1, spill=spill, spill_bytes=100)
    cache.put(tokens([1, 1]), bytearray(b"a" * 10))
    cache.put(tokens([2, 2]), bytearray(b"b" * 10))
    assert len(list(folder.iterdir())) == 1
    match = cache.match(tokens([1, 1, 3]), limit=2)
    assert match is not None
    assert cache.state(match.key) == bytearray(b"a" * 10)

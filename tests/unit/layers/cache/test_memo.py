"""`Memo`: bounded by count, by bytes and by the size of one item; the oldest goes first."""

from __future__ import annotations

from levergate.layers.cache.memo import Memo


def test_the_oldest_goes_first_when_the_count_is_reached() -> None:
    memo: Memo[int] = Memo(max_items=2, max_bytes=1_000, max_item_bytes=100)
    for n in range(3):
        memo.put(n, n * 10, size=1)
    assert (memo.get(0), memo.get(1), memo.get(2)) == (None, 10, 20)
    assert (len(memo), memo.size_bytes) == (2, 2)


def test_the_bytes_bound_evicts_until_the_new_item_fits() -> None:
    memo: Memo[str] = Memo(max_items=100, max_bytes=10, max_item_bytes=10)
    memo.put("a", "A", size=4)
    memo.put("b", "B", size=4)
    memo.put("c", "C", size=6)  # 14 > 10: "a" goes, then 10 fits
    assert (memo.get("a"), memo.get("b"), memo.get("c")) == (None, "B", "C")
    assert memo.size_bytes == 10
    memo.put("d", "D", size=10)  # only room for itself
    assert (len(memo), memo.size_bytes, memo.get("d")) == (1, 10, "D")


def test_an_item_over_its_bound_is_not_kept_and_replacing_one_counts_it_once() -> None:
    memo: Memo[str] = Memo(max_items=10, max_bytes=100, max_item_bytes=8)
    memo.put("big", "x", size=9)
    assert (memo.get("big"), len(memo), memo.size_bytes) == (None, 0, 0)
    memo.put("k", "old", size=5)
    memo.put("k", "new", size=3)
    assert (memo.get("k"), len(memo), memo.size_bytes) == ("new", 1, 3)
    memo.discard("k")
    memo.discard("never there")
    assert (memo.get("k"), len(memo), memo.size_bytes) == (None, 0, 0)

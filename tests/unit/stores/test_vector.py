"""The vector indexes: exact numpy, HNSW, the adaptive switch and the partitioned bound."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from levergate.stores.vector import AdaptiveIndex, HnswIndex, NumpyIndex, PartitionedIndex


def unit_vectors(count: int, dim: int = 16, seed: int = 0) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(count, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


async def test_numpy_index_finds_exact_neighbours_and_removes() -> None:
    index = NumpyIndex()
    vectors = unit_vectors(200)
    for i, v in enumerate(vectors):
        await index.add(f"k{i}", v)
    hits = await index.search(vectors[17], 3)
    assert hits[0][0] == "k17"
    assert abs(hits[0][1] - 1.0) < 1e-5
    assert hits[0][1] >= hits[1][1] >= hits[2][1]
    await index.remove("k17")
    assert all(key != "k17" for key, _ in await index.search(vectors[17], 5))
    assert (await index.search(vectors[199], 1))[0][0] == "k199"
    assert len(index) == 199


async def test_hnsw_agrees_with_exact_search_on_the_top_hit() -> None:
    vectors = unit_vectors(500, seed=1)
    exact, graph = NumpyIndex(), HnswIndex(dim=16, capacity=16)
    for i, v in enumerate(vectors):
        await exact.add(f"k{i}", v)
        await graph.add(f"k{i}", v)
    queries = unit_vectors(50, seed=2)
    agree = 0
    for q in queries:
        agree += (await exact.search(q, 1))[0][0] == (await graph.search(q, 1))[0][0]
    assert agree >= 45
    await graph.remove("k3")
    assert all(key != "k3" for key, _ in await graph.search(vectors[3], 5))


async def test_adaptive_index_moves_to_hnsw_past_its_threshold() -> None:
    index = AdaptiveIndex(hnsw_above=50)
    vectors = unit_vectors(80, seed=3)
    for i, v in enumerate(vectors):
        await index.add(f"k{i}", v)
        assert index.approximate == (i + 1 > 50)
    assert (await index.search(vectors[10], 1))[0][0] == "k10"
    assert (await index.search(vectors[70], 1))[0][0] == "k70"


async def test_partitions_are_separate_and_bounded_together() -> None:
    index = PartitionedIndex(max_entries=3, hnsw_above=100)
    v = unit_vectors(4, seed=4)
    assert await index.add("p1", "a", v[0]) == []
    await index.add("p2", "b", v[0])
    await index.add("p1", "c", v[1])
    assert [k for k, _ in await index.search("p2", v[0], 5)] == ["b"]
    assert await index.add("p2", "d", v[2]) == ["a"]
    assert [k for k, _ in await index.search("p1", v[0], 5)] == ["c"]
    assert len(index) == 3

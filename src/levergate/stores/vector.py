"""The `VectorIndex` seam of the semantic cache, and its in-process implementations.

Scores are cosine similarities: vectors are normalised on the way in, so a dot product is the
cosine. `NumpyIndex` is exact (one matrix-vector product per search; a few milliseconds at 100k
entries of 384 dimensions on this machine) and is the default. `HnswIndex` (hnswlib, the
`semantic` extra) is approximate and sub-linear, for partitions past `hnsw_above` entries.
`AdaptiveIndex` starts exact and moves to HNSW when it grows past that size, so small caches
pay nothing for a graph and large ones do not scan.

The methods are async so a shared index fits the same seam; the in-process ones never actually
wait. `SharedIndex` (stores/vector_redis.py) shares a `PartitionedIndex` between replicas by
replicating it through a Redis Stream, so search itself stays in-process.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


class VectorIndex(Protocol):
    async def add(self, key: str, vector: Sequence[float] | Vector) -> None: ...

    async def search(self, vector: Sequence[float] | Vector, k: int) -> list[tuple[str, float]]:
        """Up to `k` (key, cosine) pairs, best first."""
        ...

    async def remove(self, key: str) -> None: ...


def normalised(vector: Sequence[float] | Vector) -> Vector:
    array = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


class NumpyIndex:
    """Exact search over a growing matrix; removal moves the last row into the hole."""

    def __init__(self) -> None:
        self._matrix: Vector = np.zeros((0, 0), dtype=np.float32)
        self._keys: list[str] = []
        self._rows: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        return int(self._matrix.nbytes)

    def items(self) -> list[tuple[str, Vector]]:
        return [(key, self._matrix[row]) for row, key in enumerate(self._keys)]

    async def add(self, key: str, vector: Sequence[float] | Vector) -> None:
        v = normalised(vector)
        if key in self._rows:
            self._matrix[self._rows[key]] = v
            return
        count = len(self._keys)
        if count == self._matrix.shape[0]:
            grown = np.zeros((max(64, 2 * count), v.shape[0]), dtype=np.float32)
            if count:
                grown[:count] = self._matrix[:count]
            self._matrix = grown
        self._matrix[count] = v
        self._rows[key] = count
        self._keys.append(key)

    async def search(self, vector: Sequence[float] | Vector, k: int) -> list[tuple[str, float]]:
        count = len(self._keys)
        if count == 0:
            return []
        scores = self._matrix[:count] @ normalised(vector)
        k = min(k, count)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top])]
        return [(self._keys[i], float(scores[i])) for i in top]

    async def remove(self, key: str) -> None:
        row = self._rows.pop(key, None)
        if row is None:
            return
        last = len(self._keys) - 1
        if row != last:
            moved = self._keys[last]
            self._matrix[row] = self._matrix[last]
            self._keys[row] = moved
            self._rows[moved] = row
        self._keys.pop()


class HnswIndex:
    """Approximate search on an hnswlib graph (inner product on normalised vectors)."""

    def __init__(self, *, dim: int, capacity: int = 1024, m: int = 16, ef: int = 64) -> None:
        try:
            import hnswlib
        except ImportError:
            from levergate.errors import ConfigError

            raise ConfigError(
                "the HNSW index needs 'hnswlib': pip install 'levergate[semantic]'"
            ) from None
        self._index: Any = hnswlib.Index(space="ip", dim=dim)
        self._index.init_index(max_elements=capacity, ef_construction=100, M=m)
        self._index.set_ef(ef)
        self._ef = ef
        self._labels: dict[str, int] = {}
        self._keys: dict[int, str] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._labels)

    async def add(self, key: str, vector: Sequence[float] | Vector) -> None:
        if key in self._labels:
            await self.remove(key)
        if self._next >= self._index.get_max_elements():
            self._index.resize_index(2 * self._index.get_max_elements())
        label = self._next
        self._next += 1
        self._index.add_items(normalised(vector)[None, :], [label])
        self._labels[key] = label
        self._keys[label] = key

    def add_many(self, keys: list[str], matrix: Vector) -> None:
        """Bulk insert of normalised rows: one call into hnswlib, threads and all."""
        needed = self._next + len(keys)
        if needed > self._index.get_max_elements():
            self._index.resize_index(max(needed, 2 * self._index.get_max_elements()))
        labels = list(range(self._next, needed))
        self._index.add_items(matrix, labels)
        for key, label in zip(keys, labels, strict=True):
            self._labels[key] = label
            self._keys[label] = key
        self._next = needed

    async def search(self, vector: Sequence[float] | Vector, k: int) -> list[tuple[str, float]]:
        if not self._labels:
            return []
        k = min(k, len(self._labels))
        self._index.set_ef(max(self._ef, k))
        labels, distances = self._index.knn_query(normalised(vector)[None, :], k=k)
        # hnswlib's "ip" distance is 1 - dot product.
        return [
            (self._keys[int(label)], 1.0 - float(distance))
            for label, distance in zip(labels[0], distances[0], strict=True)
            if int(label) in self._keys
        ]

    async def remove(self, key: str) -> None:
        label = self._labels.pop(key, None)
        if label is not None:
            del self._keys[label]
            self._index.mark_deleted(label)


class AdaptiveIndex:
    """Exact while small, HNSW once it holds more than `hnsw_above` entries. The graph is built
    on a worker thread (minutes at 100k entries on two cores) while the exact index keeps
    answering; entries added or removed during the build are carried over before the switch."""

    def __init__(self, *, hnsw_above: int) -> None:
        self._hnsw_above = hnsw_above
        self._index: NumpyIndex | HnswIndex = NumpyIndex()
        self._building = False

    def __len__(self) -> int:
        return len(self._index)

    @property
    def approximate(self) -> bool:
        return isinstance(self._index, HnswIndex)

    async def add(self, key: str, vector: Sequence[float] | Vector) -> None:
        await self._index.add(key, vector)
        exact = self._index
        if isinstance(exact, NumpyIndex) and len(exact) > self._hnsw_above and not self._building:
            self._building = True
            try:
                self._index = await self._graph_of(exact)
            finally:
                self._building = False

    async def _graph_of(self, exact: NumpyIndex) -> HnswIndex:
        items = exact.items()
        keys = [k for k, _ in items]
        matrix = np.stack([v for _, v in items]).copy()
        graph = HnswIndex(dim=matrix.shape[1], capacity=2 * len(items))
        await asyncio.to_thread(graph.add_many, keys, matrix)
        now = dict(exact.items())
        for key in set(keys) - now.keys():
            await graph.remove(key)
        for key in now.keys() - set(keys):
            await graph.add(key, now[key])
        return graph

    async def search(self, vector: Sequence[float] | Vector, k: int) -> list[tuple[str, float]]:
        return await self._index.search(vector, k)

    async def remove(self, key: str) -> None:
        await self._index.remove(key)


class Partitions(Protocol):
    """What the semantic cache searches: a `PartitionedIndex`, or a `SharedIndex`
    (stores/vector_redis.py) that shares one between replicas."""

    async def add(self, partition: str, key: str, vector: Sequence[float] | Vector) -> list[str]:
        """Add, and return the keys evicted to stay within the bound."""
        ...

    async def search(
        self, partition: str, vector: Sequence[float] | Vector, k: int
    ) -> list[tuple[str, float]]: ...

    async def remove(self, partition: str, key: str) -> None: ...


class PartitionedIndex:
    """One index per partition (the semantic cache's exact-match part of the key), at most
    `max_entries` across all of them; the oldest entry leaves first."""

    def __init__(self, *, max_entries: int, hnsw_above: int) -> None:
        self._max = max_entries
        self._hnsw_above = hnsw_above
        self._indexes: dict[str, AdaptiveIndex] = {}
        self._order: OrderedDict[str, str] = OrderedDict()  # key -> partition, oldest first

    def __len__(self) -> int:
        return len(self._order)

    async def add(self, partition: str, key: str, vector: Sequence[float] | Vector) -> list[str]:
        """Add, and return the keys evicted to stay within the bound."""
        index = self._indexes.get(partition)
        if index is None:
            index = self._indexes[partition] = AdaptiveIndex(hnsw_above=self._hnsw_above)
        await index.add(key, vector)
        self._order[key] = partition
        evicted: list[str] = []
        while len(self._order) > self._max:
            old_key, old_partition = self._order.popitem(last=False)
            await self._drop(old_partition, old_key)
            evicted.append(old_key)
        return evicted

    async def search(
        self, partition: str, vector: Sequence[float] | Vector, k: int
    ) -> list[tuple[str, float]]:
        index = self._indexes.get(partition)
        return [] if index is None else await index.search(vector, k)

    async def remove(self, partition: str, key: str) -> None:
        if self._order.pop(key, None) is not None:
            await self._drop(partition, key)

    async def _drop(self, partition: str, key: str) -> None:
        index = self._indexes.get(partition)
        if index is None:
            return
        await index.remove(key)
        if len(index) == 0:
            del self._indexes[partition]

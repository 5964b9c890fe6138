"""A full disk under `batch.dir`: an upload that does not fit is a clear 507 `storage_full`,
leaves no file record and no partial file behind, and uploads work again once it fits."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_batch_api import jsonl, line, sdk
from tests.e2e.test_faults_disk import small_disk

__all__ = ["small_disk"]  # the fixture, used by name below


async def test_an_upload_onto_a_full_disk_is_a_507_and_leaves_nothing(
    sim: SimHandle, gateway_at: GatewayFactory, small_disk: Path, tmp_path: Path
) -> None:
    settings = {"enabled": True, "dir": str(small_disk / "batch"),
                "store": {"sqlite_path": str(tmp_path / "batch.sqlite3")}}  # fmt: skip
    big = jsonl([line(f"req-{i}") for i in range(4000)])  # ~600 KB onto 256 KiB
    assert len(big) > 300 * 1024
    async with gateway_at(sim.base_url, batch=settings) as url, sdk(url) as client:
        with pytest.raises(openai.APIStatusError) as refused:
            await client.files.create(file=("big.jsonl", big), purpose="batch")
        assert refused.value.status_code == 507
        assert refused.value.code == "storage_full"
        assert (await client.files.list()).data == []
        assert list((small_disk / "batch" / "tmp").iterdir()) == []
        small = await client.files.create(file=("s.jsonl", jsonl([line("a")])), purpose="batch")
        assert (await client.files.retrieve(small.id)).bytes == small.bytes

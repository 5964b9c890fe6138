"""A full disk under the SQLite cache: answers keep coming (misses, counted as store faults), and
the cache works again once space is back. The disk is a real 256 KiB tmpfs mounted for the test
(root only: CI runs as root, so there a missing mount fails instead of skipping)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.required import missing

CACHE = "x-levergate-cache"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        why = f"cannot mount a tmpfs: {done.stderr.decode(errors='replace').strip()}"
        missing(why)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    """Take every free byte of the disk; the file is returned so the test can free it."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


async def test_a_full_disk_under_the_sqlite_cache_costs_hits_not_answers(
    sim: SimHandle, gateway_at: GatewayFactory, small_disk: Path
) -> None:
    store = {"backend": "sqlite", "sqlite_path": str(small_disk / "cache.sqlite3"),
             "front_bytes": 0, "cooldown_seconds": 0}  # fmt: skip
    async with (
        gateway_at(sim.base_url, cache={"store": store}) as url,
        openai.AsyncOpenAI(base_url=url, api_key="-", max_retries=0) as client,
    ):

        async def ask(text: str) -> str:
            raw = await client.chat.completions.with_raw_response.create(
                model="sim-small", max_tokens=4, temperature=0,
                messages=[{"role": "user", "content": text}],
            )  # fmt: skip
            assert raw.parse().choices[0].message.content
            return raw.headers[CACHE]

        assert await ask("warm up the file") == "miss"
        filler = _fill(small_disk)
        # Long prompts: every entry needs new pages, which the full disk cannot give.
        outcomes = [await ask(f"question {i} " + "padding " * 2000) for i in range(4)]
        outcomes += [await ask(f"question {i} " + "padding " * 2000) for i in range(4)]
        assert outcomes == ["miss"] * 8, outcomes
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(url.removesuffix("/v1") + "/metrics")).text
        faults = [
            line
            for line in metrics.splitlines()
            if line.startswith("levergate_cache_store_faults_total") and 'op="set"' in line
        ]
        assert faults, "the failed writes were not counted"
        assert sum(float(line.rsplit(" ", 1)[1]) for line in faults) >= 1

        filler.unlink()
        text = "after the disk has room again"
        assert await ask(text) == "miss"
        assert await ask(text) == "hit"

"""A hung PostgreSQL under the Batch API: a real gateway on loopback with its job store in a real
PostgreSQL reached through a relay that stops forwarding (tests/stalling_proxy.py), the way a
stopped server or a cut network looks. Every batch API call answers 503 with `Retry-After`
within `batch.store.timeout_seconds` instead of hanging for the whole outage (each hung 39.9 s
of a 40 s stall before), and everything works again once the server answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_batch_api import jsonl, line
from tests.postgres_required import postgres_database
from tests.stalling_proxy import StallingProxy

# Far above the store's 1 s timeout: an answer later than this is a hang, whatever the machine.
CLIENT_TIMEOUT = 30.0
TENANT = {"x-levergate-tenant": "hung-pg"}


def upload() -> dict[str, tuple[str, bytes]]:
    return {"file": ("in.jsonl", jsonl([line("a")])), "purpose": (None, b"batch")}  # type: ignore[dict-item]


async def test_a_hung_postgres_is_a_503_with_retry_after_not_a_hang(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    proxy = StallingProxy("127.0.0.1", 5432)
    async with postgres_database("lg_hung") as dsn, proxy as port:
        database = dsn.rsplit("/", 1)[1]
        proxied = f"postgresql://postgres@127.0.0.1:{port}/{database}"
        batch = {"enabled": True, "dir": str(tmp_path / "files"), "poll_seconds": 0.05,
                 "store": {"timeout_seconds": 1.0}}  # fmt: skip
        stores = {"default": {"postgres_dsn": proxied}}
        async with (
            gateway_at(
                sim.base_url, batch=batch, async_requests={"enabled": True}, stores=stores
            ) as url,
            httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT, headers=TENANT) as http,
        ):
            assert (await http.post("/files", files=upload())).status_code == 200
            assert (await http.get("/batches")).status_code == 200
            proxy.stall()
            stalled = [
                http.get("/batches"),
                http.post("/files", files=upload()),
                http.post("/async/chat/completions",
                          json={"model": "m", "messages": [{"role": "user", "content": "x"}]}),
            ]  # fmt: skip
            for answer in await asyncio.gather(*stalled):
                assert answer.status_code == 503, answer.text
                assert answer.headers["retry-after"] == "1"
                assert answer.json()["error"]["code"] == "store_unavailable"
            # Still hung: the dropped connection's replacement hangs at connect, bounded too.
            again = await http.get("/batches")
            assert again.status_code == 503, again.text
            proxy.resume()
            # The next calls reconnect (the hung connection was dropped, never reused).
            for _ in range(50):
                if (await http.get("/batches")).status_code == 200:
                    break
                await asyncio.sleep(0.1)
            assert (await http.get("/batches")).status_code == 200
            assert (await http.post("/files", files=upload())).status_code == 200

"""The delivery queue's bounds: an offer past the queue or past a target's share of the
workers is refused (the runner offers it again later), and an offer already taken is not
queued twice."""

from __future__ import annotations

from pathlib import Path

from levergate.batch.deliveries import Deliveries
from levergate.batch.model import Job
from levergate.batch.stores.sqlite import SqliteStore
from levergate.config import WebhooksSettings
from levergate.testing import ManualClock

SECRET = "whsec-0123456789abcdef"  # noqa: S105 - a test value


def job(n: int, target: str) -> Job:
    hook = {"target": target, "attempts": 0, "state": "pending", "event": f"evt_{n}"}
    return Job(id=f"areq_{n}", tenant="t", status="finalizing", endpoint="/v1/embeddings",
               input_file_id="", created_at=0, expires_at=10**10, kind="async",
               extra={"webhook": hook})  # fmt: skip


async def test_offers_are_bounded_by_the_queue_and_each_targets_share(tmp_path: Path) -> None:
    hooks = WebhooksSettings.model_validate({
        "workers": 4, "queue": 3,
        "targets": {name: {"url": f"http://127.0.0.1:1/{name}", "secret": SECRET}
                    for name in ("slow", "other")},
    })  # fmt: skip
    store = SqliteStore(tmp_path / "d.sqlite3", timeout=5)

    async def wire(found: Job) -> dict[str, object]:
        return {"id": found.id, "status": "completed"}

    deliveries = Deliveries(hooks=hooks, store=store, clock=ManualClock(), wire=wire)
    try:
        assert deliveries.offer(job(1, "slow"))
        assert deliveries.offer(job(1, "slow"))  # already taken: not queued again
        assert deliveries.offer(job(2, "slow"))
        assert not deliveries.offer(job(3, "slow"))  # the target holds half the workers
        assert deliveries.offer(job(4, "other"))
        assert not deliveries.offer(job(5, "other"))  # the queue is full
    finally:
        await deliveries.aclose()
        await store.aclose()

"""`levergate log query`'s table (cli/log.py `table`): a request's cell tells it apart from its
neighbours, whose ids share their first characters (core/ids.py: the batch's time)."""

from __future__ import annotations

from typing import Any

from levergate.cli.log import table
from levergate.core.ids import RandomIds


def _record(request_id: str) -> dict[str, Any]:
    return {"ts": 1_796_000_000.0, "request_id": request_id, "model": "fast", "alias": "fast",
            "cache": None, "outcome": "ok", "total_ms": 20.0, "ttft_ms": None,
            "input_tokens": 10, "cached_tokens": 0, "cache_write_tokens": 0,
            "output_tokens": 5, "cost_usd": 0.0, "saved_usd": 0.0}  # fmt: skip


def test_ids_of_one_batch_get_cells_of_their_own() -> None:
    source = RandomIds(batch=4, now_ms=lambda: 1_796_000_000_000)
    ids = [source.fresh() for _ in range(4)]
    lines = table([_record(i) for i in ids]).splitlines()[1:]
    cells = [line.split()[2] for line in lines]  # after the date and the time
    assert cells == [i[-12:] for i in ids]
    assert len(set(cells)) == len(ids)


def test_a_clients_short_id_is_shown_whole() -> None:
    assert "client-7" in table([_record("client-7")])

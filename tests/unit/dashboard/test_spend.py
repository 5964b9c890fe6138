"""The spend lists of `/dashboard/api/spend` (dashboard/http.py `spend_of`) over a real SQLite
request log: every tenant and key up to the bound, and a list cut there says so."""

from __future__ import annotations

from pathlib import Path

from levergate.dashboard.http import spend_of
from levergate.requestlog.query import LogFilter
from levergate.requestlog.row import row_of
from levergate.requestlog.store import SqliteLog
from tests.unit.requestlog.records import record


def test_a_spend_list_past_its_bound_is_cut_and_says_so(tmp_path: Path) -> None:
    log = SqliteLog(str(tmp_path / "log.sqlite3"), timeout_seconds=5)
    try:
        log.write([row_of(1_000_000.0 + n, record(n, key_id=f"key-{n % 4}", tenant=f"t{n % 2}"))
                   for n in range(8)])  # fmt: skip
        whole = spend_of(log, LogFilter(), most=4)
        assert (len(whole["keys"]), whole["keys_truncated"]) == (4, False)
        assert (len(whole["tenants"]), whole["tenants_truncated"]) == (2, False)
        cut = spend_of(log, LogFilter(), most=3)
        assert (len(cut["keys"]), cut["keys_truncated"]) == (3, True)
        assert (len(cut["tenants"]), cut["tenants_truncated"]) == (2, False)
    finally:
        log.close()

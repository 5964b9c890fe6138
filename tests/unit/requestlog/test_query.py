"""The request log's filters and cursors: every reader's input, checked and bounded."""

from __future__ import annotations

import base64
import math
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.errors import BadRequest
from levergate.requestlog.query import (
    LogFilter,
    decode_cursor,
    encode_cursor,
    parse_filter,
    parse_time,
)
from levergate.requestlog.store import SqliteLog


@given(st.floats(min_value=0, max_value=1e10, allow_nan=False), st.integers(0, 2**62))
def test_a_cursor_reads_back_as_it_was_written(ts: float, seq: int) -> None:
    assert decode_cursor(encode_cursor((ts, seq))) == (ts, seq)


@given(st.text(max_size=200))
def test_any_other_cursor_is_a_400_never_a_crash(text: str) -> None:
    try:
        ts, seq = decode_cursor(text)
    except BadRequest as exc:
        problem: BadRequest | None = exc
    else:  # text that happens to decode is a well-formed cursor
        problem = None
        assert seq >= 0
        assert math.isfinite(ts)
    assert problem is None or problem.param == "cursor"


@pytest.mark.parametrize("seq", [2**63, 10**59])
def test_a_forged_cursor_past_a_64_bit_sequence_number_is_a_400(seq: int) -> None:
    # it decoded, and the store's bind raised OverflowError: a 500
    forged = base64.urlsafe_b64encode(f"1.0:{seq}".encode()).decode().rstrip("=")
    with pytest.raises(BadRequest) as caught:
        decode_cursor(forged)
    assert caught.value.param == "cursor"


def test_every_cursor_that_decodes_is_one_a_store_can_run(tmp_path: Path) -> None:
    store = SqliteLog(str(tmp_path / "log.sqlite3"), timeout_seconds=1.0)
    try:
        for text in (encode_cursor((1e308, 2**63 - 1)), encode_cursor((0.0, 0))):
            page = store.page(LogFilter(), cursor=decode_cursor(text), limit=1)
            assert page.records == []
        found = store.page(LogFilter(tenant="\U0001f600\x00"), cursor=None, limit=1)
        assert found.records == []
    finally:
        store.close()


def test_times_read_as_epoch_iso_or_a_duration_ago() -> None:
    assert parse_time("1700000000.5", param="since") == 1700000000.5
    assert parse_time("2023-11-14T22:13:20Z", param="since") == 1700000000.0
    assert parse_time("2023-11-14T22:13:20", param="since") == 1700000000.0  # UTC unless said
    assert parse_time("2h", param="since", now=10_000.0) == 10_000.0 - 7200
    assert parse_time("7d", param="since", now=1e6) == 1e6 - 7 * 86400


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"since": "yesterday"}, "since"),
        ({"until": "1e400"}, "until"),
        ({"since": "-5"}, "since"),
        ({"min_latency_ms": "nan"}, "min_latency_ms"),
        ({"min_cost_usd": "-1"}, "min_cost_usd"),
        ({"tenant": "x" * 257}, "tenant"),
        ({"tenant": "\udcff"}, "tenant"),  # a command line's byte that is not UTF-8
        ({"model": ""}, "model"),
        ({"since": "100", "until": "50"}, "since"),
        ({"tenent": "a"}, "tenent"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(params: dict[str, str], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_filter(params)
    assert caught.value.param == param


def test_filters_become_one_condition_that_sqlite_runs() -> None:
    where = parse_filter({"since": "10", "until": "20", "tenant": "t", "key": "k", "model": "m",
                          "feature": "f", "outcome": "error", "min_latency_ms": "5",
                          "min_cost_usd": "0.1", "request_id": "r"})  # fmt: skip
    sql, values = where.where("?")
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE lg_requests (ts, tenant, key_id, model, alias, feature, outcome, "
                 "total_ms, cost_usd, request_id)")  # fmt: skip
    conn.execute("INSERT INTO lg_requests VALUES (15, 't', 'k', 'x', 'm', 'f', 'rate_limited', "
                 "6, 0.2, 'r')")  # fmt: skip
    query = f"SELECT COUNT(*) FROM lg_requests WHERE {sql}"  # noqa: S608 - the code under test
    assert conn.execute(query, values).fetchone() == (1,)
    assert LogFilter().where("?") == ("1 = 1", [])
    assert where.describe()["outcome"] == "error"

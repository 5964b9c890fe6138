"""`row_of` puts each of the record's fields in its own column: a record whose fields all differ
reads back field by field (the record is unpacked by position, so a field added or moved in
`RequestRecord` must show up here, not as a value in the wrong column)."""

from __future__ import annotations

from levergate.core.call import CacheOutcome, CacheResult
from levergate.core.controls import Priority
from levergate.core.tokenizer import TokenSource
from levergate.layers.measure.record import RequestRecord, Timings, Tokens
from levergate.policies.pricing import Lever
from levergate.requestlog.row import NAMES, row_of, saved_column


def test_every_field_lands_in_its_column() -> None:
    record = RequestRecord(
        request_id="req-1", kind="chat", tenant="tenant-a", feature="feat", model="asked",
        alias="alias-b", upstream="up-c", upstream_model="up-model", outcome="ok", status=201,
        error="Err", timings=Timings(1.0, 0.25, 0.125, 0.5, 0.0625),
        tokens=Tokens(11, 12, 13, 14, TokenSource.REPORTED, 0), cost_usd=0.75,
        cache=CacheResult("exact", CacheOutcome.MISS), attempts=3, retries=2, fallback="fb",
        savings={Lever.ROUTE: 0.5, Lever.TRIM: -0.25}, key_id="key-d", expected_cached=7,
        escalations=4, trimmed_input=9, priority=Priority.BATCH, queued_seconds=0.03125,
        workflow="wf", tier="flex", origin="batch", schema=99,
    )  # fmt: skip
    row = dict(zip(NAMES, row_of(5.0, record, ("req body", "answer"), "{}"), strict=True))
    assert row == row | {
        "ts": 5.0, "request_id": "req-1", "kind": "chat", "origin": "batch",
        "tenant": "tenant-a", "key_id": "key-d", "feature": "feat", "workflow": "wf",
        "model": "asked", "alias": "alias-b", "upstream": "up-c", "upstream_model": "up-model",
        "outcome": "ok", "status": 201, "error": "Err", "total_ms": 1000.0, "ttft_ms": 500.0,
        "upstream_ms": 250.0, "overhead_ms": 125.0, "queued_ms": 31.25, "itl_ms": 62.5,
        "input_tokens": 11, "cached_tokens": 12, "cache_write_tokens": 13, "output_tokens": 14,
        "output_source": "reported", "cost_usd": 0.75, "saved_usd": 0.25,
        saved_column(Lever.ROUTE): 0.5, saved_column(Lever.TRIM): -0.25,
        saved_column(Lever.EXACT): 0.0, "cache": "exact:miss", "attempts": 3, "retries": 2,
        "fallback": "fb", "escalations": 4, "priority": "batch", "tier": "flex",
        "trimmed_tokens": 9, "expected_cached": 7, "detail": None, "request_body": "req body",
        "answer_body": "answer", "schema": 99, "replay": "{}",
    }  # fmt: skip


def test_a_record_without_savings_or_cache_has_zeros_and_nulls_there() -> None:
    """The columns a batch's INSERT may leave out (store.py `SqliteLog`): a record with no
    savings has 0.0 in each lever's column and in the net, no cache result is NULL."""
    record = RequestRecord(
        request_id="req-2", kind="chat", tenant=None, feature="", model="m", alias="m",
        upstream="up", upstream_model="up-m", outcome="ok", status=200, error=None,
        timings=Timings(0.5, 0.25, 0.25), tokens=Tokens(1, 0, 0, 2, TokenSource.ESTIMATED, 0),
        cost_usd=0.0,
    )  # fmt: skip
    row = dict(zip(NAMES, row_of(1.0, record), strict=True))
    assert {row[saved_column(lever)] for lever in Lever} == {0.0}
    assert (row["saved_usd"], row["cache"], row["ttft_ms"], row["output_source"]) == (
        0.0, None, None, "estimated",
    )  # fmt: skip
    hit = record._replace(cache=CacheResult("semantic", CacheOutcome.HIT))
    assert dict(zip(NAMES, row_of(1.0, hit), strict=True))["cache"] == "semantic:hit"

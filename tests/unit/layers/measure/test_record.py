"""`RequestRecord.of` makes its tuple directly (`tuple.__new__`, which checks no count): each
field must land under its own name, and none may be missing."""

from __future__ import annotations

from levergate.core.call import (
    BatchShare,
    CacheOutcome,
    CacheResult,
    Call,
    Context,
    Note,
    RouteDecision,
    Trace,
)
from levergate.core.controls import Controls, Priority
from levergate.layers.measure.record import SCHEMA, RequestRecord, Timings
from levergate.policies.pricing import Bill, Lever, Side, Tokens
from levergate.policies.tiers import Tier


def test_every_field_of_the_record_holds_its_own_value() -> None:
    trace = Trace(
        tenant="acme", key_id="k1", alias="strong", upstream="up", upstream_model="strong-1",
        attempts=3, retries=2, failed_endpoints={"e1"}, fallback="cheap",
        cache=CacheResult("exact", CacheOutcome.MISS),
        route=RouteDecision("rules", "auto", "strong", "strong"), escalations=1,
        escalation_reasons=["low"], trimmed_input=7, expected_cached=5, batch=False,
        microbatch=BatchShare(2, 3, prorated=True), queued_seconds=0.25, origin="batch",
    )  # fmt: skip
    trace.note(layer="x", text="y")
    controls = Controls(feature="f", priority=Priority.BATCH, deadline=9.5, workflow="w")
    call = Call(kind="chat", body={"model": "auto"},
                ctx=Context(request_id="r1", controls=controls, trace=trace))  # fmt: skip
    timings = Timings(1.0, 0.5, 0.5, 0.1, 0.01)
    tokens = Tokens(1, 2, 3, 4)
    side = (Side("cheap", "cascade", 0.5),)
    savings = {Lever.ROUTE: 0.25}
    record = RequestRecord.of(
        call, outcome="ok", status=200, error=None, timings=timings, tokens=tokens,
        bill=Bill(1.5, 1.0, side, savings), tier=Tier.FLEX, tier_assumed=True,
    )  # fmt: skip
    expected = RequestRecord(
        request_id="r1", kind="chat", tenant="acme", feature="f", model="auto", alias="strong",
        upstream="up", upstream_model="strong-1", outcome="ok", status=200, error=None,
        timings=timings, tokens=tokens, cost_usd=1.5, cache=trace.cache, attempts=3, retries=2,
        fallback="cheap", failed_endpoints=frozenset({"e1"}), savings=savings,
        notes=(Note("x", "y"),), key_id="k1", side=side, batch=False, expected_cached=5,
        decision=trace.route, escalations=1, escalation_reasons=("low",), trimmed_input=7,
        microbatch=trace.microbatch, priority=Priority.BATCH, deadline=9.5,
        queued_seconds=0.25, workflow="w", tier="flex", origin="batch", schema=SCHEMA,
        tier_assumed=True, tier_decision=None,
    )  # fmt: skip
    assert len(record) == len(RequestRecord._fields)
    assert type(record) is RequestRecord
    assert record._asdict() == expected._asdict()


def test_the_fields_the_sinks_read_by_position_are_where_they_read_them() -> None:
    """`PrometheusSink.emit` unpacks `record[:14]`, `LedgerSink.emit` reads 12, 6, 3, 22, 31
    (the order is tracing's: otel/spans.py reads runs of it, test_otlp.py holds them)."""
    fields = RequestRecord._fields
    assert fields[:14] == (
        "request_id", "timings", "tokens", "cost_usd", "kind", "model", "feature", "outcome",
        "status", "error", "upstream_model", "alias", "tenant", "upstream",
    )  # fmt: skip
    assert tuple(fields[n] for n in (12, 6, 3, 22, 31)) == (
        "tenant", "feature", "cost_usd", "savings", "side",
    )  # fmt: skip

"""`begin`: a client's W3C `traceparent` is continued when valid, its `tracestate` passed on with
it; anything else (hostile, oversized, all-zero ids, another version) starts a new trace, never
an error."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.core.spans import ERROR, SPAN, STARTED, IdBytes, begin, end, span_id

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_is_continued() -> None:
    spans = begin({"traceparent": VALID})
    assert (spans.trace_id, spans.parent_id) == (
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0xF067AA0BA902B7,
    )
    assert spans.sampled
    assert spans.remote
    assert spans.own_span_id() not in (0, spans.parent_id)  # drawn when first needed
    attempt = spans.attempt("up", "m")
    assert spans.traceparent(attempt) == f"00-{VALID[3:35]}-{span_id(attempt):016x}-01"  # type: ignore[arg-type]


def test_the_clients_tracestate_goes_with_its_trace() -> None:
    # W3C: a vendor that continues a trace passes its `tracestate` on (until 2026-12, dropped).
    state = "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7,, tenant@vendor=a b"
    spans = begin({"traceparent": VALID, "tracestate": state})
    assert spans.state == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7,tenant@vendor=a b"
    assert begin({"traceparent": VALID}).state is None
    assert begin({"tracestate": state}).state is None  # no trace of the client's to go with
    assert begin({"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                  "tracestate": state}).state is None  # fmt: skip


@pytest.mark.parametrize("state", [
    "Congo=1",  # a key begins with a lower-case letter or a digit
    "congo",  # no value
    "congo=",  # an empty value
    "congo=a=b",  # `=` in a value
    "congo=a\x00b",  # a control character
    ",".join(f"k{i}=v" for i in range(33)),  # 33 members: W3C's bound is 32
    "k=" + "v" * 600,  # past 512 characters
    "",
])  # fmt: skip
def test_a_tracestate_not_by_w3c_rules_is_not_passed_on(state: str) -> None:
    assert begin({"traceparent": VALID, "tracestate": state}).state is None


@given(st.text(max_size=600))
def test_any_tracestate_is_passed_on_only_as_w3c_list_members(state: str) -> None:
    passed = begin({"traceparent": VALID, "tracestate": state}).state
    if passed is not None:
        members = passed.split(",")
        assert 1 <= len(members) <= 32
        assert len(passed) <= 512
        assert all("=" in m and m == m.strip() and m.isascii() for m in members)


def test_the_clients_unsampled_flag_is_followed() -> None:
    assert not begin({"traceparent": VALID[:-2] + "00"}).sampled


def test_attempts_are_bounded() -> None:
    spans = begin({})
    kept = [spans.attempt("up", "m") for _ in range(100)]
    assert sum(a is not None for a in kept) == 64
    assert spans.traceparent(None).split("-")[2] == f"{spans.span_id:016x}"


@given(st.text(max_size=300))
def test_anything_else_starts_a_new_trace(value: str) -> None:
    spans = begin({"traceparent": value}, ratio=1.0)
    if spans.remote:  # only a well-formed header with non-zero ids is continued
        assert value.strip()[2:3] == "-"
        assert not value.strip().startswith("ff-")
        assert spans.parent_id
    else:
        assert spans.parent_id is None
        assert spans.sampled
    assert 0 < spans.trace_id < 2**128


def test_only_lower_case_hex_is_valid() -> None:
    """W3C: the ids are lower-case hex, and a parent id with other characters (upper case
    included) MUST be ignored: a new trace, not the client's ids lower-cased."""
    for bad in (VALID.upper(), VALID[:3] + VALID[3:35].upper() + VALID[35:],
                VALID[:36] + VALID[36:52].upper() + VALID[52:]):  # fmt: skip
        assert not begin({"traceparent": bad}).remote, bad


def test_a_later_version_is_read_as_version_00() -> None:
    """W3C: a version above 00 (not ff) is parsed for the fields 00 defines, and may carry more
    after a dash; version 00 may not."""
    later = "cc" + VALID[2:]
    for value in (later, later + "-what-the-future-will-be-like"):
        spans = begin({"traceparent": value})
        assert (spans.trace_id, spans.parent_id) == (int(VALID[3:35], 16), int(VALID[36:52], 16))
        assert spans.traceparent(None).startswith(f"00-{VALID[3:35]}-")  # sent as version 00
    for bad in (later + ".what", later + "x", "ff" + VALID[2:], VALID + "-what"):
        assert not begin({"traceparent": bad}).remote, bad


def test_bad_values_are_ignored() -> None:
    for bad in ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", VALID.replace("00-", "ff-", 1),
                VALID + "-extra", VALID + " " * 200, "garbage"):  # fmt: skip
        assert not begin({"traceparent": bad}).remote
    assert not begin({}, ratio=0.0).sampled


def test_ids_are_drawn_in_batches_of_non_zero_distinct_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """`IdBytes`: ids of its size, never all zero (W3C's invalid id: a batch holding one is
    drawn again), distinct, and a forked child's batch starts afresh (`forget`)."""
    draws = iter([bytes(64), b"\x01" * 4 + bytes(8) + b"\x01" * 52, b"\x05" * 64])
    monkeypatch.setattr(os, "urandom", lambda n: next(draws)[:n])
    ids = IdBytes(8, batch=8)
    assert ids.refill() == b"\x05" * 8  # both batches with 8 zero bytes in a row were redrawn
    assert list(ids.ids) == [b"\x05" * 8] * 7
    monkeypatch.undo()
    found = [next(ids.ids, None) or ids.refill() for _ in range(1000)]
    assert all(len(i) == 8 and i != bytes(8) for i in found)
    assert len(set(found)) == 1000
    ids.forget()
    assert next(ids.ids, None) is None


def test_a_new_trace_and_its_attempts_carry_drawn_ids() -> None:
    spans = begin({}, started=1.0)
    first, second = spans.attempt("up", "m"), spans.attempt("up", "m")
    assert first is not None
    assert second is not None
    assert len({spans.trace_id, span_id(first), span_id(second)}) == 3
    assert spans.traceparent(first) == f"00-{spans.trace_id:032x}-{span_id(first):016x}-01"
    assert (spans.span_id, spans.parent_id) == (0, None)  # the request's own: not drawn yet


def test_sent_is_an_attempt_and_its_traceparent_and_ends_once() -> None:
    """`Spans.sent`, what an upstream calls: the attempt kept and the header naming its span;
    beyond the bound no attempt and the request's own span. `end` keeps the first end."""
    spans = begin({"traceparent": VALID}, 1.0, None, 1.0)
    attempt, header = spans.sent("up", "m", 2.0)
    assert attempt is not None
    assert attempt[: STARTED + 1] == ["up", "m", attempt[SPAN], 2.0]
    assert header == spans.traceparent(attempt) == f"00-{VALID[3:35]}-{attempt[SPAN].hex()}-01"
    end(attempt, TimeoutError())
    end(attempt)
    assert attempt[ERROR] == "TimeoutError"
    for _ in range(63):
        spans.sent("up", "m", 2.0)
    assert spans.sent("up", "m", 2.0) == (None, f"00-{VALID[3:35]}-{spans.own_span().hex()}-01")
    assert len(spans.attempts) == 64

"""The fast-path replay: the exact cache, coalescing, prefix affinity and deferral behave as the
gateway's layers would on the same arrivals, and turning the exact cache on never costs more."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.analyze.fit import ASSUMED
from levergate.analyze.replay import Timing, replay
from levergate.catalog import Catalog
from levergate.policies.pricing import Tokens, cost
from tests.unit.analyze.reqs import endpoints, plan, req

TIMING = Timing({}, ASSUMED, 0.002)
ON = {"cache": {"enabled": True}}
OFF = {"cache": {"enabled": False}}
ON_PLAN, OFF_PLAN = plan(**ON), plan(**OFF)


def test_repeats_after_the_first_answer_are_hits_and_cost_nothing() -> None:
    reqs = [req(arrival=10.0 * n) for n in range(4)]
    on, off = replay(plan(**ON), reqs, TIMING), replay(plan(**OFF), reqs, TIMING)
    assert (on.exact_hits, off.exact_hits) == (3, 0)
    assert on.cost_usd == pytest.approx(off.cost_usd / 4)
    assert sorted(on.total)[:3] == [0.002] * 3


def test_an_identical_request_in_flight_is_coalesced() -> None:
    reqs = [req(arrival=0.0, total=5.0), req(arrival=1.0, total=5.0)]
    run = replay(plan(**ON), reqs, TIMING)
    assert (run.exact_hits, run.coalesced) == (0, 1)
    assert sorted(run.total) == [4.0, 5.0]  # it waited for the one it shares
    no = replay(plan(cache={"coalesce": False}), reqs, TIMING)
    assert no.coalesced == 0


def test_sampled_requests_and_expired_entries_miss() -> None:
    sampled = [req(arrival=10.0 * n, det=False) for n in range(3)]
    assert replay(plan(**ON), sampled, TIMING).exact_hits == 0
    always = plan(cache={"default": {"mode": "always"}})
    assert replay(always, sampled, TIMING).exact_hits == 2
    short = plan(cache={"default": {"ttl_seconds": 5}})
    assert replay(short, [req(arrival=0.0), req(arrival=100.0)], TIMING).exact_hits == 0


def test_tenants_do_not_share_entries_unless_namespaced_together() -> None:
    reqs = [req(arrival=0.0, tenant="a"), req(arrival=10.0, tenant="b")]
    assert replay(plan(**ON), reqs, TIMING).exact_hits == 0
    shared = plan(cache={"tenant_namespaces": {"a": "x", "b": "x"}})
    assert replay(shared, reqs, TIMING).exact_hits == 1


keys = st.lists(st.tuples(st.floats(0, 100), st.sampled_from("abc"), st.booleans(),
                          st.floats(0.01, 20)), max_size=30)  # fmt: skip


@given(keys)
def test_the_exact_cache_never_costs_more_and_counts_every_request(
    shapes: list[tuple[float, str, bool, float]],
) -> None:
    reqs = sorted((req(arrival=a, fp=k, det=d, total=t) for a, k, d, t in shapes),
                  key=lambda r: r.arrival)  # fmt: skip
    on, off = replay(ON_PLAN, reqs, TIMING), replay(OFF_PLAN, reqs, TIMING)
    assert on.cost_usd <= off.cost_usd + 1e-12
    assert on.requests == off.requests == len(reqs)
    assert len(on.total) == len(reqs)  # a hit, a coalesced wait or an answer each
    served = on.exact_hits + on.coalesced
    assert on.cost_usd == pytest.approx(off.cost_usd * (len(reqs) - served) / max(1, len(reqs)))


def conversation(turns: int) -> list[object]:
    """One conversation: each turn's prompt extends the last by a block (~256 tokens)."""
    return [req(arrival=30.0 * n, fp=f"turn{n}", blocks=tuple(range(1, 6 + n)),
                block_tokens=256.0, prompt=256 * (5 + n) + 10) for n in range(turns)]  # fmt: skip


def test_affinity_keeps_a_conversation_where_its_prefix_is_warm() -> None:
    reqs = conversation(8)
    spread = replay(plan(**endpoints("round_robin")), reqs, TIMING)  # type: ignore[arg-type]
    kept = replay(plan(**endpoints("affinity")), reqs, TIMING)  # type: ignore[arg-type]
    assert kept.cached_tokens > spread.cached_tokens > 0
    assert kept.cost_usd < spread.cost_usd
    # Every turn after the first reads the whole previous prompt's blocks, 128-token steps.
    assert kept.cached_tokens == sum(1024 + (256 * (5 + n) - 1024) // 128 * 128
                                     for n in range(7))  # fmt: skip


def test_batch_lines_are_deferred_where_their_route_policy_says() -> None:
    rates = Catalog.builtin().rates("gpt-4o-mini")
    lines = [req(arrival=float(n), fp=None, origin="batch") for n in range(3)]
    routed = plan(defer={"enabled": True, "routes": {"gpt-4o-mini": {}}},
                  batch={"enabled": True}, **OFF, **endpoints(count=1))  # fmt: skip
    unrouted = plan(defer={"enabled": True}, batch={"enabled": True}, **OFF)
    assert replay(routed, lines, TIMING).deferred == 3
    assert replay(unrouted, lines, TIMING).deferred == 0
    full = 3 * cost(Tokens(1000, 0, 0, 100), rates)
    assert replay(routed, lines, TIMING).cost_usd == pytest.approx(full / 2)


def test_a_far_deadline_is_deferred_at_the_batch_discount() -> None:
    rates = Catalog.builtin().rates("gpt-4o-mini")
    reqs = [req(arrival=0.0, fp=None, not_after=90_000.0), req(arrival=1.0, fp=None)]
    on = plan(defer={"enabled": True}, batch={"enabled": True}, **OFF)
    run = replay(on, reqs, TIMING)
    full = cost(Tokens(1000, 0, 0, 100), rates)
    assert run.deferred == 1
    assert run.cost_usd == pytest.approx(full + cost(Tokens(1000, 0, 0, 100), rates.batched()))
    assert len(run.total) == 1  # the deferred one left the latency percentiles

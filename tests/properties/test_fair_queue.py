"""The fair queue of large-request slots (policies/fair_queue.py), driven by random sequences of
arrivals, departures and withdrawals against a plain model: never more than `total` slots held
nor `per_tenant` of one tenant; work-conserving (no tenant under its cap waits while a slot is
free); each tenant's queue FIFO and bounded; nothing lost or granted twice; and a waiting
tenant is not passed over by another more than its share of grants."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.fair_queue import FairQueue, Full

TENANTS = "abc"
STEP = st.tuples(
    st.sampled_from(["arrive", "leave", "withdraw"]), st.sampled_from(TENANTS), st.integers(0, 10)
)
OPS = st.lists(STEP, max_size=200)


def _check(queue: FairQueue[int], holding: dict[int, str]) -> None:
    held = Counter(holding.values())
    assert queue.running == +held
    assert queue.held() <= queue.total
    # What fairness remembers is bounded by the tenants holding or waiting.
    assert set(held) <= set(queue.recency) <= set(held) | set(queue.queues)
    assert all(n <= queue.per_tenant for n in held.values())
    for tenant, waiters in queue.queues.items():
        assert waiters  # no empty queue kept
        assert len(waiters) <= queue.waiting
        assert list(waiters) == sorted(waiters)  # FIFO: tickets are numbered in arrival order
        # Work-conserving: a waiting tenant is at its cap, or every slot is taken.
        assert held[tenant] == queue.per_tenant or queue.held() == queue.total


@given(total=st.integers(1, 5), per_tenant=st.integers(1, 4), waiting=st.integers(0, 6), ops=OPS)
def test_bounds_fifo_and_work_conserving(
    total: int, per_tenant: int, waiting: int, ops: list[tuple[str, str, int]]
) -> None:
    queue: FairQueue[int] = FairQueue(total=total, per_tenant=per_tenant, waiting=waiting)
    holding: dict[int, str] = {}  # ticket -> tenant, for tickets holding a slot
    waiters: dict[int, str] = {}
    next_ticket = 0
    for op, tenant, pick in ops:
        if op == "arrive":
            ticket, next_ticket = next_ticket, next_ticket + 1
            try:
                runs = queue.arrive(tenant, ticket)
            except Full:
                assert len(queue.queues.get(tenant, ())) == waiting
                continue
            (holding if runs else waiters)[ticket] = tenant
        elif op == "leave":
            mine = sorted(t for t, owner in holding.items() if owner == tenant)
            if not mine:
                continue
            del holding[mine[pick % len(mine)]]
            for granted in queue.leave(tenant):
                assert granted not in holding
                holding[granted] = waiters.pop(granted)
        else:
            mine = sorted(t for t, owner in waiters.items() if owner == tenant)
            if not mine:
                assert not queue.withdraw(tenant, -1)
                continue
            ticket = mine[pick % len(mine)]
            assert queue.withdraw(tenant, ticket)
            del waiters[ticket]
        _check(queue, holding)
    assert sorted(t for q in queue.queues.values() for t in q) == sorted(waiters)


@given(backlog=st.integers(1, 50), per_tenant=st.integers(1, 3))
def test_a_single_waiter_is_not_starved_by_a_backlog(backlog: int, per_tenant: int) -> None:
    """Tenant `a` has a backlog of waiters; `b` arrives with one. One slot frees at a time
    (always `a`'s): `b` runs at the first free slot, as it holds fewest."""
    queue: FairQueue[str] = FairQueue(total=per_tenant, per_tenant=per_tenant, waiting=backlog)
    for n in range(per_tenant):
        assert queue.arrive("a", f"a-run-{n}")
    for n in range(backlog):
        assert not queue.arrive("a", f"a{n}")
    assert not queue.arrive("b", "b0")
    assert queue.leave("a") == ["b0"]


def test_equal_tenants_alternate() -> None:
    queue: FairQueue[str] = FairQueue(total=1, per_tenant=1, waiting=10)
    assert queue.arrive("a", "a0")
    for n in range(1, 4):
        assert not queue.arrive("a", f"a{n}")
    for n in range(3):
        assert not queue.arrive("b", f"b{n}")
    order = []
    owner = "a"
    for _ in range(6):
        (granted,) = queue.leave(owner)
        order.append(granted)
        owner = granted[0]
    assert order == ["b0", "a1", "b1", "a2", "b2", "a3"]


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="at least"):
        FairQueue(total=0, per_tenant=1, waiting=1)
    queue: FairQueue[str] = FairQueue(total=1, per_tenant=1, waiting=0)
    assert queue.arrive("a", "a0")
    with pytest.raises(Full):
        queue.arrive("a", "a1")
    with pytest.raises(ValueError, match="holds no slot"):
        queue.leave("b")

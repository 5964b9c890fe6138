"""Invariants of history windowing (policies/trim.py): the last user turn and the system prompts
are always kept, the order is preserved, tool calls stay with their results, the kept prompt
fits the budget whenever the pinned part does, and the window is as large as the rules allow."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.policies.trim import PINNED_ROLES, TOOL_ROLES, Turn, plan, units

roles = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])
turn = st.builds(Turn, role=roles, tokens=st.integers(min_value=0, max_value=400))
conversations = st.lists(turn, min_size=0, max_size=40)
budgets = st.integers(min_value=0, max_value=6000)
fixed = st.integers(min_value=0, max_value=200)


def _last_user(turns: list[Turn]) -> int | None:
    found = [i for i, t in enumerate(turns) if t.role == "user"]
    return found[-1] if found else None


@settings(max_examples=500, deadline=None)
@given(turns=conversations, budget=budgets, fixed=fixed, start=st.booleans())
def test_the_plan_keeps_what_it_must_and_fits_when_it_can(
    turns: list[Turn], budget: int, fixed: int, start: bool
) -> None:
    result = plan(turns, budget=budget, fixed=fixed, start_with_user=start)
    # Every message is either kept or dropped, once, and the order is the request's.
    assert sorted(result.kept + result.dropped) == list(range(len(turns)))
    assert list(result.kept) == sorted(result.kept)
    kept = set(result.kept)
    # System prompts and the last user turn are never dropped.
    assert all(i in kept for i, t in enumerate(turns) if t.role in PINNED_ROLES)
    last = _last_user(turns)
    assert last is None or last in kept
    # The figure is the kept prompt's, and it fits whenever the plan says it does.
    assert result.tokens == fixed + sum(turns[i].tokens for i in result.kept)
    if result.fits:
        assert result.tokens <= budget
    else:
        assert not result.dropped
    # It does not fit only when the pinned units alone are over the budget.
    groups = units(turns)
    pinned = [g for g in groups if turns[g.start].role in PINNED_ROLES or last in g]
    pinned_tokens = fixed + sum(turns[i].tokens for g in pinned for i in g)
    assert result.fits == (pinned_tokens <= budget)


@settings(max_examples=500, deadline=None)
@given(turns=conversations, budget=budgets, start=st.booleans())
def test_tool_calls_and_their_results_stay_together(
    turns: list[Turn], budget: int, start: bool
) -> None:
    kept = set(plan(turns, budget=budget, start_with_user=start).kept)
    for group in units(turns):
        assert all(i in kept for i in group) or not any(i in kept for i in group)
        # A unit is one message and the tool results after it, nothing else.
        assert all(turns[i].role in TOOL_ROLES for i in group[1:])


@settings(max_examples=500, deadline=None)
@given(turns=conversations, budget=budgets, fixed=fixed)
def test_the_window_is_the_newest_run_that_fits(turns: list[Turn], budget: int, fixed: int) -> None:
    result = plan(turns, budget=budget, fixed=fixed, start_with_user=False)
    if not result.dropped:
        return
    groups = units(turns)
    kept = set(result.kept)
    last = _last_user(turns)
    free = [g for g in groups if turns[g.start].role not in PINNED_ROLES and last not in g]
    kept_free = [g for g in free if g.start in kept]
    dropped_free = [g for g in free if g.start not in kept]
    # Contiguous: every kept free unit is newer than every dropped one.
    if kept_free and dropped_free:
        assert max(g.start for g in dropped_free) < min(g.start for g in kept_free)
    # Maximal: the newest dropped unit would not have fitted.
    newest = max(dropped_free, key=lambda g: g.start)
    assert result.tokens + sum(turns[i].tokens for i in newest) > budget


@settings(max_examples=300, deadline=None)
@given(turns=conversations, budget=budgets)
def test_kept_history_opens_with_a_user_turn(turns: list[Turn], budget: int) -> None:
    result = plan(turns, budget=budget, start_with_user=True)
    if not result.dropped:
        return
    last = _last_user(turns)
    history = [
        i
        for i in result.kept
        if turns[i].role not in PINNED_ROLES and turns[i].role not in TOOL_ROLES
        and (last is None or i <= last)
    ]  # fmt: skip
    assert not history or turns[history[0]].role == "user"


def test_a_conversation_over_the_budget_loses_its_oldest_turns() -> None:
    turns = [Turn("system", 10), Turn("user", 50), Turn("assistant", 50), Turn("user", 20),
             Turn("assistant", 30), Turn("tool", 5), Turn("user", 15)]  # fmt: skip
    result = plan(turns, budget=90, fixed=3)
    # system 10 + last user 15 + fixed 3 = 28; then the assistant call with its result (35),
    # then the user turn (20): 83; the next assistant (50) does not fit.
    assert result.kept == (0, 3, 4, 5, 6)
    assert result.dropped == (1, 2)
    assert (result.tokens, result.fits) == (83, True)
    over = plan(turns, budget=20, fixed=3)
    assert (over.fits, over.dropped) == (False, ())

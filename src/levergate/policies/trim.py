"""History windowing: which messages of a chat fit a prompt-token budget. Pure: roles and
counts in, a plan out; `layers/trim` counts the tokens and rewrites the request.

The rules, and why:

- Messages are grouped into *units*: a message plus every tool result (`tool`, `function`)
  right after it. An assistant's `tool_calls` and their results therefore stay together or go
  together — a provider refuses a tool result whose call is missing, and a call whose result is
  missing reads as an unanswered action.
- Pinned units are never dropped: every system / developer message (the instructions) and the
  unit of the last user message (the question being asked).
- The rest is kept newest first while it fits, and the window stops at the first unit that
  does not: the kept history is a contiguous run of the latest turns, never a history with a
  hole in the middle.
- With `start_with_user`, kept history that would open with an assistant turn (its question
  dropped) loses that turn too: several providers require the first turn to be the user's.
- When the pinned units alone (with `fixed`, the tools and reply priming) exceed the budget,
  nothing is dropped and `fits` is False: the caller answers `context_length_exceeded`.

The invariants are properties in tests/properties/test_trim_policy.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PINNED_ROLES = frozenset({"system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})


@dataclass(frozen=True, slots=True)
class Turn:
    role: str
    tokens: int


@dataclass(frozen=True, slots=True)
class TrimPlan:
    kept: tuple[int, ...]  # indices of the messages to send, in their order
    dropped: tuple[int, ...]  # the others, in their order
    tokens: int  # prompt tokens of the kept messages plus `fixed`
    fits: bool  # False: the pinned messages alone are over the budget

    @property
    def trimmed(self) -> bool:
        return bool(self.dropped)


def units(turns: Sequence[Turn]) -> list[range]:
    """Index ranges: each message with the tool results that follow it."""
    found: list[range] = []
    for index, turn in enumerate(turns):
        if found and turn.role in TOOL_ROLES:
            found[-1] = range(found[-1].start, index + 1)
        else:
            found.append(range(index, index + 1))
    return found


def plan(
    turns: Sequence[Turn], *, budget: int, fixed: int = 0, start_with_user: bool = True
) -> TrimPlan:
    """The newest turns of `turns` that fit `budget` tokens with the pinned ones (see above)."""
    groups = units(turns)
    sizes = [sum(turns[i].tokens for i in group) for group in groups]
    last_user = _last_user(turns, groups)
    pinned = {g for g, group in enumerate(groups) if turns[group.start].role in PINNED_ROLES}
    if last_user is not None:
        pinned.add(last_user)
    used = fixed + sum(sizes[g] for g in pinned)
    total = fixed + sum(sizes)
    if used > budget or total <= budget:
        everything = tuple(range(len(turns)))
        return TrimPlan(everything, (), total, fits=used <= budget)
    kept = set(pinned)
    for g in reversed(range(len(groups))):
        if g in pinned:
            continue
        if used + sizes[g] > budget:
            break
        kept.add(g)
        used += sizes[g]
    if start_with_user:
        used -= _drop_leading_replies(turns, groups, kept, pinned, last_user)
    keep = tuple(i for g in sorted(kept) for i in groups[g])
    drop = tuple(i for g in range(len(groups)) if g not in kept for i in groups[g])
    return TrimPlan(keep, drop, used, fits=True)


def _last_user(turns: Sequence[Turn], groups: Sequence[range]) -> int | None:
    for g in reversed(range(len(groups))):
        if turns[groups[g].start].role == "user":
            return g
    return None


def _drop_leading_replies(
    turns: Sequence[Turn],
    groups: Sequence[range],
    kept: set[int],
    pinned: set[int],
    last_user: int | None,
) -> int:
    """Drops kept history opening with a non-user turn before the last user turn; returns the
    tokens it freed."""
    freed = 0
    end = last_user if last_user is not None else len(groups)
    for g in range(end):
        if g in pinned or g not in kept:
            continue
        if turns[groups[g].start].role == "user":
            break
        kept.discard(g)
        freed += sum(turns[i].tokens for i in groups[g])
    return freed

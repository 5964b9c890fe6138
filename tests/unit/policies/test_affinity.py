"""Prefix affinity's pure parts: block digests, the holder table, the load bound, rendezvous
ties; and the strategy's choices over scripted candidates."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import example, given
from hypothesis import strategies as st

from levergate.config import AffinitySettings, BalanceSettings
from levergate.core.call import Call, Context
from levergate.policies.affinity import (
    OwnerTable,
    block_digests,
    load_bound,
    prompt_bytes,
    rendezvous,
)
from levergate.policies.balancing import Load, PrefixAffinity, RoundRobin
from levergate.testing import ManualClock

B = 64  # block bytes in these tests


@given(st.binary(min_size=0, max_size=20 * B), st.binary(min_size=0, max_size=5 * B))
def test_a_shared_prefix_shares_its_leading_digests(prefix: bytes, tail: bytes) -> None:
    a = block_digests(prefix + tail, block_bytes=B, max_blocks=1000)
    b = block_digests(prefix, block_bytes=B, max_blocks=1000)
    whole = len(prefix) // B
    assert a[:whole] == b[:whole] == b
    assert len(a) == (len(prefix) + len(tail)) // B  # the partial last block is left out


@given(st.binary(min_size=3 * B, max_size=10 * B), st.integers(0, 2))
def test_a_change_in_one_block_changes_it_and_every_later_digest(data: bytes, at: int) -> None:
    changed = bytearray(data)
    changed[at * B] ^= 0xFF
    a = block_digests(data, block_bytes=B, max_blocks=1000)
    b = block_digests(bytes(changed), block_bytes=B, max_blocks=1000)
    assert a[:at] == b[:at]
    assert all(x != y for x, y in zip(a[at:], b[at:], strict=True))


def test_hostile_prompts_cost_at_most_max_blocks() -> None:
    assert len(block_digests(b"x" * (B * 10_000), block_bytes=B, max_blocks=8)) == 8


def test_prompt_bytes_put_tools_first_and_survive_odd_bodies() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    with_tools = prompt_bytes({"tools": tools, "messages": [{"role": "user", "content": "hi"}]})
    assert with_tools.startswith(b'[{"type":"function"')
    assert prompt_bytes({"prompt": "abc"}) == b'"abc"'
    assert prompt_bytes({"messages": [object()]}) == b""  # not JSON: no affinity, no error


message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=300)}
)


@given(st.lists(message, max_size=12), st.integers(min_value=0, max_value=2000))
# The first message has no comma before it: counting one wrote a byte too few (found by
# Hypothesis, 2026-12-03).
@example([{"role": "user", "content": ""}, {"role": "user", "content": ""}], 30)
def test_a_limited_prompt_is_a_prefix_of_the_whole_at_least_that_long(
    messages: list[dict[str, str]], limit: int
) -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    for body in ({"messages": messages}, {"tools": tools, "messages": messages}):
        whole, part = prompt_bytes(body), prompt_bytes(body, limit=limit)
        assert whole.startswith(part)
        assert len(part) >= min(limit, len(whole))


def test_a_long_conversation_is_written_only_as_far_as_the_limit() -> None:
    """The prompt-cache layer digests a prompt's first blocks: a Responses conversation of 256
    turns of 256 KiB (the soak, issue 20) is written a turn past the limit, not 64 MiB."""
    turn = "x" * (256 << 10)
    body = {"messages": [{"role": "user", "content": f"{n} {turn}"} for n in range(256)]}
    part = prompt_bytes(body, limit=4096)
    assert 4096 <= len(part) < 300 << 10
    assert part == prompt_bytes({"messages": body["messages"][:1]})[: len(part)]


def test_holders_are_forgotten_after_their_ttl_and_beyond_capacity() -> None:
    table = OwnerTable(ttl=10.0, capacity=3)
    table.claim([1, 2], "a", now=0.0)
    table.claim([1, 2, 3], "b", now=5.0)
    assert table.depths([1, 2, 3], now=6.0) == {"b": 3, "a": 2}
    assert table.depths([1, 2, 3], now=12.0) == {"b": 3}  # a's claims expired at 10
    table.claim([4], "c", now=13.0)  # a fourth digest: the least recently used (1) goes
    assert len(table) == 3
    assert table.depths([1], now=13.0) == {}


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=50), st.floats(1.0, 4.0))
def test_the_least_loaded_member_is_always_under_the_bound(loads: list[int], f: float) -> None:
    assert min(loads) < load_bound(loads, load_factor=f)


@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=8, unique=True),
       st.integers(0, 2**64 - 1))  # fmt: skip
def test_rendezvous_agrees_whatever_the_order(names: list[str], key: int) -> None:
    chosen = names[rendezvous(names, key)]
    shuffled = sorted(names, reverse=True)
    assert shuffled[rendezvous(shuffled, key)] == chosen


@dataclass
class Member:
    name: str
    outstanding: int = 0
    prefilling: int = 0
    cooling: bool = False
    weight: float = 1.0

    def load(self) -> Load:
        return Load(outstanding=self.outstanding, prefilling=self.prefilling)


def chat(text: str) -> Call:
    return Call(kind="chat", body={"messages": [{"role": "user", "content": text}]},
                ctx=Context("r"))  # fmt: skip


def affinity(
    clock: ManualClock, *, load_factor: float = 1.25, miss_weight: float = 4.0
) -> PrefixAffinity:
    a = AffinitySettings(block_bytes=B, load_factor=load_factor, miss_weight=miss_weight)
    return PrefixAffinity(BalanceSettings(affinity=a), clock)


SHARED = "s" * (8 * B)  # a long shared prefix (a system prompt, an earlier turn)


def test_a_conversation_stays_on_the_member_that_holds_its_prefix() -> None:
    clock, rng = ManualClock(), random.Random(1)
    members = [Member("a"), Member("b"), Member("c")]
    strategy = affinity(clock)
    first = strategy.choose(members, call=chat(SHARED), rng=rng)
    for turn in range(5):
        clock.advance(1.0)
        later = strategy.choose(members, call=chat(SHARED + f" turn {turn}" * 20), rng=rng)
        assert later is first


def test_it_yields_when_the_holder_cools_down_or_is_over_the_bound() -> None:
    clock, rng = ManualClock(), random.Random(1)
    members = [Member("a"), Member("b")]
    strategy = affinity(clock)
    holder = strategy.choose(members, call=chat(SHARED), rng=rng)
    other = next(m for m in members if m is not holder)
    holder.cooling = True  # a 429: no new requests until its cooldown ends
    assert strategy.choose(members, call=chat(SHARED), rng=rng) is other
    holder.cooling = False
    holder.outstanding = 10  # far above the mean of (10 + 0 + 1) / 2 x 1.25
    assert strategy.choose(members, call=chat(SHARED), rng=rng) is other


def test_a_queue_of_prefills_outweighs_a_short_cached_prefix() -> None:
    clock, rng = ManualClock(), random.Random(1)
    members = [Member("a"), Member("b")]
    strategy = affinity(clock, load_factor=100.0, miss_weight=1.0)
    holder = strategy.choose(members, call=chat("p" * B), rng=rng)
    other = next(m for m in members if m is not holder)
    for _ in range(200):  # teach it the mean uncached prompt: ~8 blocks
        strategy.choose([Member("x")], call=chat("q" * 8 * B + str(_)), rng=rng)
    holder.prefilling = 5
    # One cached block saved against five prefills of ~8 blocks waiting: go elsewhere.
    assert strategy.choose(members, call=chat("p" * B + "z" * 8 * B), rng=rng) is other


def test_new_prefixes_go_to_the_least_loaded_and_ties_agree_across_gateways() -> None:
    rng = random.Random(1)
    members = [Member("a", outstanding=2), Member("b"), Member("c")]
    one, two = affinity(ManualClock()), affinity(ManualClock())
    picks = {one.choose(members, call=chat(f"{i}" * 4 * B), rng=rng).name for i in range(20)}
    assert picks <= {"b", "c"}
    for i in range(20):  # two gateways sharing nothing route a new prefix alike
        text = f"new {i}" * B
        assert (
            one.choose(members, call=chat(text), rng=rng).name
            == two.choose(members, call=chat(text), rng=random.Random(i)).name
        )


def test_round_robin_takes_each_ready_member_in_turn() -> None:
    members = [Member("a"), Member("b"), Member("c", cooling=True)]
    strategy, rng = RoundRobin(), random.Random(1)
    names = [strategy.choose(members, call=chat("x"), rng=rng).name for _ in range(4)]
    assert sorted(names[:2]) == ["a", "b"]
    assert names[2:] == names[:2]

"""In-place prefix reuse on the real bundled model (issue 29): a warm prompt starts from the
cells a finished request left in its slot, or shares them, instead of restoring a saved state.

One request at a time, its answers are the saved-state path's, token for token and logprob
for logprob: both start from the same cells. Against an engine with no reuse at all they are
the same up to float rounding: llama.cpp computes a prompt's positions in other chunks when a
prefix is reused, and with other requests in the same step, and its logprobs move by up to
~0.2 nats (measured on these prompts), so greedy answers agree token for token until a
near-tie (two candidates within `NEAR_TIE` nats), if any. Checked one after another, several
at once sharing one prefix, on a multi-turn follow-up, and after an eviction (the saved state
is then the fallback)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from levergate.config import PrefixCacheSettings
from levergate.core.call import Call
from levergate.upstreams.local import LocalEndpoint
from levergate.upstreams.local.prefix_cache import common_prefix
from tests.unit.upstreams.local.helpers import SYSTEM, answer, chat_call, local_settings, running

SHOP = SYSTEM[: len(SYSTEM) // 3]  # ~110 tokens: long enough to reuse, quick to compute
QUESTIONS = ["When do you open?", "What does a croissant cost?", "Do you sell rye bread?",
             "Which cookies do you bake?"]  # fmt: skip
ROUNDING = 0.3  # nats
NEAR_TIE = 0.6


@pytest.fixture(scope="module")
def in_place() -> Iterator[LocalEndpoint]:
    yield from running(
        local_settings(name="in-place", prefix_cache=PrefixCacheSettings(in_place=True))
    )


@pytest.fixture(scope="module")
def restored() -> Iterator[LocalEndpoint]:
    """Reuse through saved KV states only (the path before, now the fallback)."""
    cache = PrefixCacheSettings(min_tokens=16, in_place=False)
    yield from running(local_settings(name="restored", prefix_cache=cache))


@pytest.fixture(scope="module")
def none() -> Iterator[LocalEndpoint]:
    """No reuse of any kind: every prompt computed from its first token."""
    cache = PrefixCacheSettings(ram_bytes=0, in_place=False)
    yield from running(local_settings(name="none", prefix_cache=cache))


def ask(question: str, system: str, max_tokens: int = 8) -> Call:
    return chat_call(question, system=system, max_tokens=max_tokens, logprobs=True,
                     top_logprobs=2)  # fmt: skip


def scored(reply: dict[str, Any]) -> list[tuple[str, float, list[float]]]:
    return [(t["token"], t["logprob"], [top["logprob"] for top in t["top_logprobs"]])
            for t in reply["choices"][0]["logprobs"]["content"]]  # fmt: skip


def cached(reply: dict[str, Any]) -> int:
    count: int = reply["usage"]["prompt_tokens_details"]["cached_tokens"]
    return count


async def released(endpoint: LocalEndpoint) -> None:
    """Until the engine thread has released the last answer's slot (it does so just after
    handing over the answer's end)."""
    for _ in range(500):
        if not endpoint.engine.scheduler.active:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the engine kept a finished request's slot")


def assert_close(ours: dict[str, Any], reference: dict[str, Any]) -> None:
    """Token for token until a near-tie of the reference, each logprob within rounding."""
    for (token, logprob, _), (ref_token, ref_logprob, ref_top) in zip(
        scored(ours), scored(reference), strict=True
    ):
        if token != ref_token:
            assert ref_top[0] - ref_top[1] < NEAR_TIE, (token, ref_token, ref_top)
            return
        assert abs(logprob - ref_logprob) < ROUNDING, (token, logprob, ref_logprob)


async def test_a_warm_prompt_reuses_the_cells_in_place_and_answers_the_same(
    in_place: LocalEndpoint, restored: LocalEndpoint, none: LocalEndpoint
) -> None:
    system = "Shop one. " + SHOP
    scheduler = in_place.engine.scheduler
    for index, question in enumerate(QUESTIONS[:2]):
        before = scheduler.reused_in_place
        call = ask(question, system)
        ours, theirs, computed = await asyncio.gather(
            answer(in_place, call), answer(restored, call), answer(none, call)
        )
        assert scored(ours) == scored(theirs)  # exactly: the same cells
        assert cached(ours) == cached(theirs)
        assert_close(ours, computed)
        assert cached(computed) == 0
        if index:  # warm: the system prompt's cells, found in the pool, none restored
            assert cached(ours) > 100
            assert scheduler.reused_in_place - before == cached(ours)


async def test_several_at_once_share_one_resident_prefix(
    in_place: LocalEndpoint, none: LocalEndpoint
) -> None:
    """(Not compared with the saved-state engine exactly: which requests share a step, which
    the engine thread decides as they arrive, moves the logprobs by rounding too.)"""
    system = "Shop two. " + SHOP
    await answer(in_place, ask("Hello?", system, max_tokens=2))
    before = in_place.engine.scheduler.reused_in_place
    together = await asyncio.gather(*[answer(in_place, ask(q, system)) for q in QUESTIONS])
    alone = [await answer(none, ask(q, system)) for q in QUESTIONS]
    for ours, computed in zip(together, alone, strict=True):
        assert_close(ours, computed)
        assert cached(ours) > 100
    assert in_place.engine.scheduler.reused_in_place - before == sum(map(cached, together))


async def test_a_follow_up_turn_reuses_the_whole_conversation(
    in_place: LocalEndpoint, none: LocalEndpoint
) -> None:
    first = ask("When do you open?", "Shop three. " + SHOP)
    reply = await answer(in_place, first)
    messages = [*first.body["messages"], {"role": "assistant",
                "content": reply["choices"][0]["message"]["content"]},
                {"role": "user", "content": "And when do you close?"}]  # fmt: skip
    follow_up = first.with_body(messages=messages)
    ours, computed = await answer(in_place, follow_up), await answer(none, follow_up)
    assert_close(ours, computed)
    assert cached(ours) > reply["usage"]["prompt_tokens"]  # the first turn and its answer


@pytest.fixture(scope="module")
def small() -> Iterator[LocalEndpoint]:
    """A pool too small to keep a resident beside a long new prompt."""
    cache = PrefixCacheSettings(in_place=True)
    yield from running(local_settings(name="small", n_ctx=512, slots=2, prefix_cache=cache))


async def test_an_evicted_prefix_comes_back_from_its_saved_state(
    small: LocalEndpoint, none: LocalEndpoint
) -> None:
    system = "Shop four. " + SHOP
    scheduler = small.engine.scheduler
    await answer(small, ask(QUESTIONS[0], system, max_tokens=2))
    await released(small)
    (first,) = [r.tokens for r in scheduler.residents.values()]
    # A prompt sharing nothing with it evicts it (and would leave no room for it anyway).
    long_prompt = "Summarise: " + "the bread is good. " * 80
    await answer(small, ask(long_prompt, "Be brief.", max_tokens=2))
    await released(small)
    assert all(common_prefix(r.tokens, first) < 16 for r in scheduler.residents.values())
    before = scheduler.reused_in_place
    call = ask(QUESTIONS[1], system)
    ours, computed = await answer(small, call), await answer(none, call)
    assert_close(ours, computed)
    assert cached(ours) > 100  # restored from the saved state...
    assert scheduler.reused_in_place == before  # ...not found in the pool

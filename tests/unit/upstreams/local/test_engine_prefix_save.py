"""What a warm prefix costs on the engine thread (issue 29): the prompt's KV state (~23 KB per
token) is saved after its first token has been handed over, never before; and a prompt that
adds only a few tokens to the prefix it reused is not saved again at all."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from levergate.upstreams.local import LocalEndpoint
from levergate.upstreams.local.sampling import SamplingParams
from levergate.upstreams.local.sequence import Item, Request, Ticket, Tokens
from tests.unit.upstreams.local.helpers import SYSTEM, answer, chat_call, local_settings, running


@pytest.fixture(scope="module")
def endpoint() -> Iterator[LocalEndpoint]:
    yield from running(local_settings())


async def test_a_warm_prompt_adding_a_few_tokens_is_not_saved_again(
    endpoint: LocalEndpoint,
) -> None:
    stats = endpoint.engine.stats
    system = "Tell customers about the shop. " + SYSTEM
    saves = stats.cache_saves
    await answer(endpoint, chat_call("When do you open?", system=system, max_tokens=4))
    assert stats.cache_saves == saves + 1  # a new prompt: saved (before token two)
    warm = await answer(endpoint, chat_call("Do you sell rye?", system=system, max_tokens=4))
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 200
    assert stats.cache_saves == saves + 1  # ~10 new tokens past a saved prefix: not again
    long_question = "Please list, one by one and with prices, " + "every bread you bake, " * 12
    await answer(endpoint, chat_call(long_question, system=system, max_tokens=4))
    assert stats.cache_saves == saves + 2  # many new tokens: worth keeping


async def test_the_first_token_leaves_before_the_prompt_state_is_saved(
    endpoint: LocalEndpoint,
) -> None:
    events: list[str] = []
    runtime = endpoint.runtime
    save = runtime.save

    def recorded_save(seq: int) -> bytearray:
        events.append("save")
        return save(seq)

    runtime.save = recorded_save  # type: ignore[method-assign]
    try:
        prompt = await asyncio.to_thread(runtime.tokenize, "A brand new prompt. " + SYSTEM)
        done = asyncio.get_running_loop().create_future()

        def sink(item: Item) -> None:  # engine thread
            events.append("tokens" if isinstance(item, Tokens) else type(item).__name__)
            if not isinstance(item, Tokens):
                done.get_loop().call_soon_threadsafe(done.set_result, None)

        request = Request(tuple(prompt), max_tokens=3, sampling=SamplingParams())
        endpoint.engine.submit(Ticket(request, sink=sink))
        await done
    finally:
        runtime.save = save  # type: ignore[method-assign]
    assert events.index("tokens") < events.index("save")
    assert events[-1] == "Finished"


async def test_a_prompt_that_ends_at_its_first_token_is_still_saved(
    endpoint: LocalEndpoint,
) -> None:
    """max_tokens 1: the sequence finishes at token one; its state is saved before its cells
    are given back (saving after the release would store an empty state). The save comes
    after the answer is handed over, so it is seen through the next request, which the engine
    thread takes only once the save is done."""
    system = "One token only. " + SYSTEM
    await answer(endpoint, chat_call("Hi", system=system, max_tokens=1))
    again = await answer(endpoint, chat_call("Hi", system=system, max_tokens=1))
    usage = again["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1

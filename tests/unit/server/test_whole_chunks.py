"""A large whole answer leaves in chunks (server/handlers/openai.py `respond`): the parts a
layer assembled it from (the embeddings cache's vectors) are sent as they are, about
`chunk_bytes` at a time, each when the client took the last, and the bytes are exactly the
whole answer's, with its length up front. Small answers stay one body."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.core.call import Call, Context
from levergate.core.reply import Completed
from levergate.server.exchange import Response
from levergate.server.handlers.openai import respond

PARTS = st.lists(st.binary(max_size=300), min_size=1, max_size=40)


async def no_frames(*_: Any) -> Any:  # a whole answer never reaches the stream framing
    raise AssertionError("framed")
    yield b""  # pragma: no cover


async def sent(reply: Completed, chunk_bytes: int) -> tuple[Response, list[bytes]]:
    call = Call(kind="embedding", body={"model": "e", "input": "x"}, ctx=Context("r"))
    response = await respond(call, reply, frames=no_frames, chunk_bytes=chunk_bytes)
    chunks = [chunk async for chunk in response.stream] if response.stream else [response.body]
    return response, chunks


@settings(max_examples=200)
@given(PARTS, st.integers(min_value=1, max_value=700), st.booleans())
async def test_chunks_are_the_whole_answer_in_order_and_about_the_chunk_size(
    parts: list[bytes], chunk_bytes: int, joined: bool
) -> None:
    whole = b"".join(parts)
    reply = Completed(whole) if joined else Completed(parts=list(parts))
    response, chunks = await sent(reply, chunk_bytes)
    assert b"".join(chunks) == whole
    if len(whole) <= chunk_bytes:
        assert response.stream is None
        assert response.body == whole
        return
    assert response.length == len(whole)
    assert all(chunk for chunk in chunks)
    assert all(len(chunk) < 2 * chunk_bytes for chunk in chunks)
    assert all(len(chunk) >= chunk_bytes for chunk in chunks[:-1])

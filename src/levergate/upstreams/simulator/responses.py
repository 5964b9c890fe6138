"""OpenAI wire shapes the simulator answers with: bodies, stream events and error envelopes.

Everything here is pure: it turns generated words and token counts into bytes. Streams are
returned as a flat list of SSE events plus, for each event, the index of the output token it
belongs to, so the server can pace them with the latency model and cut them after any event.
The shapes follow OpenAI's: `usage: null` on every chunk when `stream_options.include_usage`
is on, then a final usage chunk with `choices: []`, then `data: [DONE]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from levergate.protocol.sse import DONE_FRAME, encode
from levergate.upstreams.simulator.settings import SYSTEM_FINGERPRINT


@dataclass(frozen=True, slots=True)
class Answer:
    """What was generated for one request: per choice its tokens and finish reason."""

    id: str
    created: int
    model: str
    choices: Sequence[Sequence[str]]
    finish: Sequence[str]
    prompt_tokens: int
    cached_tokens: int

    @property
    def completion_tokens(self) -> int:
        return sum(len(tokens) for tokens in self.choices)


def usage(answer: Answer) -> dict[str, Any]:
    completion = answer.completion_tokens
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": answer.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": answer.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_body(answer: Answer) -> bytes:
    choices = [
        {
            "index": index,
            "message": {
                "role": "assistant",
                "content": "".join(tokens),
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": answer.finish[index],
        }
        for index, tokens in enumerate(answer.choices)
    ]
    return orjson.dumps(
        {
            "id": answer.id,
            "object": "chat.completion",
            "created": answer.created,
            "model": answer.model,
            "choices": choices,
            "usage": usage(answer),
            "service_tier": "default",
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
    )


def completion_body(answer: Answer) -> bytes:
    choices = [
        {"text": "".join(tokens), "index": index, "logprobs": None, "finish_reason": answer.finish[index]}
        for index, tokens in enumerate(answer.choices)
    ]
    return orjson.dumps(
        {
            "id": answer.id,
            "object": "text_completion",
            "created": answer.created,
            "model": answer.model,
            "choices": choices,
            "usage": usage(answer),
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
    )


def stream_events(
    answer: Answer, *, chat: bool, include_usage: bool
) -> tuple[list[bytes], list[int]]:
    """(SSE events, output-token step of each event). Step 0 is the first token (with the role
    preamble for chat); the finish, usage and [DONE] events share the last token's step."""
    head: dict[str, Any] = {
        "id": answer.id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": answer.created,
        "model": answer.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }
    if include_usage:
        head["usage"] = None
    events: list[bytes] = []
    steps: list[int] = []

    def emit(step: int, index: int, delta: dict[str, Any] | str, finish: str | None) -> None:
        if chat:
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"text": delta, "index": index, "logprobs": None, "finish_reason": finish}
        events.append(encode(orjson.dumps({**head, "choices": [choice]})))
        steps.append(step)

    if chat:
        for index in range(len(answer.choices)):
            emit(0, index, {"role": "assistant", "content": "", "refusal": None}, None)
    longest = max((len(tokens) for tokens in answer.choices), default=0)
    for step in range(longest):
        for index, tokens in enumerate(answer.choices):
            if step < len(tokens):
                emit(step, index, {"content": tokens[step]} if chat else tokens[step], None)
    last = max(0, longest - 1)
    for index in range(len(answer.choices)):
        emit(last, index, {} if chat else "", answer.finish[index])
    if include_usage:
        events.append(encode(orjson.dumps({**head, "choices": [], "usage": usage(answer)})))
        steps.append(last)
    events.append(DONE_FRAME)
    steps.append(last)
    return events, steps


def embeddings_body(
    *, model: str, vectors: Sequence[list[float] | str], prompt_tokens: int
) -> bytes:
    data = [
        {"object": "embedding", "index": index, "embedding": vector}
        for index, vector in enumerate(vectors)
    ]
    return orjson.dumps(
        {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }
    )


def model_object(name: str, *, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "levergate-sim"}


def models_body(names: Sequence[str], *, created: int) -> bytes:
    return orjson.dumps(
        {"object": "list", "data": [model_object(name, created=created) for name in names]}
    )


def error_body(
    message: str, *, type: str, code: str | None = None, param: str | None = None
) -> bytes:
    """OpenAI's error envelope, the shape every OpenAI SDK turns into a typed exception."""
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})

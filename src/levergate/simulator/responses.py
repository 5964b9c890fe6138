"""OpenAI wire shapes the simulator answers with: bodies, stream events and error envelopes.

Everything here is pure: it turns generated words and token counts into bytes. Streams are
returned as a flat list of SSE events plus, for each event, the index of the output token it
belongs to, so the server can pace them with the latency model and cut them after any event.
The shapes follow OpenAI's: `usage: null` on every chunk when `stream_options.include_usage`
is on, then a final usage chunk with `choices: []`, then `data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from levergate.protocol.sse import DONE_FRAME, encode
from levergate.simulator import hardness
from levergate.simulator.settings import SYSTEM_FINGERPRINT


@dataclass(slots=True)
class Answer:
    """What was generated for one request: per choice its tokens and finish reason. (Not
    frozen: built on every request, and frozen dataclasses are slower to make.)"""

    id: str
    created: int
    model: str
    choices: Sequence[Sequence[str]]
    finish: str  # the same for every choice
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    # Per choice, each token's logprob, when the request asked for logprobs (chat only).
    logprobs: Sequence[Sequence[float]] | None = None
    top_logprobs: int = 0
    # Of `completion_tokens`, reported as reasoning (`SimSettings.reasoning_share`).
    reasoning_tokens: int = 0
    # The tier that served it, as chat answers say (None: say nothing; tiers.py).
    service_tier: str | None = "default"

    def choice_logprobs(self, index: int) -> dict[str, Any] | None:
        if self.logprobs is None:
            return None
        tokens = self.choices[index]
        return hardness.choice_logprobs(tokens, self.logprobs[index], top=self.top_logprobs)


Dumps = Callable[[Any], bytes]


def spaced_dumps(obj: Any) -> bytes:
    """JSON the way Python's `json.dumps` writes it by default (`"key": value, ...`)."""
    return json.dumps(obj).encode()


def dumps_for(*, spaced: bool) -> Dumps:
    """The simulator's JSON writer: compact (orjson, as OpenAI writes) or spaced."""
    return spaced_dumps if spaced else orjson.dumps


def usage(answer: Answer) -> dict[str, Any]:
    completion = answer.completion_tokens
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": answer.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": answer.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": answer.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_body(answer: Answer, *, dumps: Dumps = orjson.dumps) -> bytes:
    choices: list[dict[str, Any]] = []
    for index, tokens in enumerate(answer.choices):  # a loop, not a comprehension: hot path
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(tokens),
            "refusal": None,
            "annotations": [],
        }
        choice = {
            "index": index,
            "message": message,
            "logprobs": None if answer.logprobs is None else answer.choice_logprobs(index),
            "finish_reason": answer.finish,
        }
        choices.append(choice)
    body = {
        "id": answer.id,
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": choices,
        "usage": usage(answer),
        "service_tier": answer.service_tier,
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }
    if answer.service_tier is None:
        del body["service_tier"]
    return dumps(body)


def completion_body(answer: Answer, *, dumps: Dumps = orjson.dumps) -> bytes:
    choices = [
        {
            "text": "".join(tokens),
            "index": index,
            "logprobs": None,
            "finish_reason": answer.finish,
        }
        for index, tokens in enumerate(answer.choices)
    ]
    return dumps(
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
    answer: Answer, *, chat: bool, include_usage: bool, dumps: Dumps = orjson.dumps
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
    if chat and answer.service_tier is not None:
        head["service_tier"] = answer.service_tier
    if include_usage:
        head["usage"] = None
    events: list[bytes] = []
    steps: list[int] = []

    def emit(
        step: int, index: int, delta: dict[str, Any] | str, finish: str | None, lp: Any = None
    ) -> None:
        if chat:
            choice = {"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish}
        else:
            choice = {"text": delta, "index": index, "logprobs": None, "finish_reason": finish}
        events.append(encode(dumps({**head, "choices": [choice]})))
        steps.append(step)

    if chat:
        for index in range(len(answer.choices)):
            emit(0, index, {"role": "assistant", "content": "", "refusal": None}, None)
    longest = max((len(tokens) for tokens in answer.choices), default=0)
    for step in range(longest):
        for index, tokens in enumerate(answer.choices):
            if step < len(tokens):
                lp = None
                if answer.logprobs is not None:
                    lp = {
                        "content": [
                            hardness.content_entry(
                                tokens[step], answer.logprobs[index][step], top=answer.top_logprobs
                            )
                        ],
                        "refusal": None,
                    }
                emit(step, index, {"content": tokens[step]} if chat else tokens[step], None, lp)
    last = max(0, longest - 1)
    for index in range(len(answer.choices)):
        emit(last, index, {} if chat else "", answer.finish)
    if include_usage:
        events.append(encode(dumps({**head, "choices": [], "usage": usage(answer)})))
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
    message: str, *, error_type: str, code: str | None = None, param: str | None = None
) -> bytes:
    """OpenAI's error envelope, the shape every OpenAI SDK turns into a typed exception."""
    error = {"message": message, "type": error_type, "param": param, "code": code}
    return orjson.dumps({"error": error})


@dataclass(slots=True)
class Reply:
    """What the server must do for one request; the server only executes it.

    A plain reply waits `delay` seconds, then writes head and body. A stream writes its head at
    once, then `events` as HTTP chunks, waiting `event_delays[i]` before event i (no delays: all
    at once). `cut_after` closes the connection after that many events (stream) or body bytes
    (plain) without finishing; `hang` writes nothing until the client goes away. A reply that
    `holds_slot` counts as in flight until the server reports it finished.
    """

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"
    delay: float = 0.0
    events: list[bytes] | None = None
    event_delays: list[float] | None = None
    cut_after: int | None = None
    hang: bool = False
    holds_slot: bool = False
    # A flex request in flight: it holds one of the flex capacity's places until finished.
    flex: bool = False


class SimError(Exception):
    """A request the simulator answers with an OpenAI error (not a crash of the simulator)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.code = code
        self.param = param
        self.headers = headers

    def reply(self) -> Reply:
        body = error_body(
            self.message, error_type=self.error_type, code=self.code, param=self.param
        )
        return Reply(status=self.status, body=body, headers=self.headers)

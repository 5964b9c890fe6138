"""The optional summary of dropped history: one call to a cheap alias through the pipeline's
Dispatch (so it has that alias's own retries, deadline, balancing and limits), its usage
recorded in `trace.side_spend` with purpose "summary" for the ledger to price.

The summary is best-effort: when its call fails, the request goes on with the history simply
dropped (a note in the trace says why), because a summary is a nicety and the trimmed request
is already valid. `Deferred` breaks the build cycle: the per-model stacks are built before
Dispatch, which routes to them, exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from levergate.core.call import Call, Trace
from levergate.core.reply import Completed, Reply
from levergate.core.service import Service
from levergate.errors import LevergateError
from levergate.policies.pricing import spent
from levergate.protocol.openai.body import content_text

INSTRUCTIONS = (
    "Summarise the conversation below in a few sentences: the facts, decisions and open "
    "questions a reader needs to continue it. Write only the summary."
)
PREFIX = "Summary of the earlier conversation (dropped to fit the context window): "


class Deferred:
    """A service named before it exists: `bind` it once the pipeline has built it."""

    def __init__(self) -> None:
        self._service: Service | None = None

    def bind(self, service: Service) -> None:
        self._service = service

    async def __call__(self, call: Call) -> Reply:
        if self._service is None:
            raise RuntimeError("the deferred service was never bound")
        return await self._service(call)


async def summarise(
    call: Call,
    dropped: Sequence[Any],
    *,
    service: Service,
    alias: str,
    max_tokens: int,
    input_chars: int,
) -> str | None:
    """The summary of `dropped` (its newest `input_chars` characters), or None if the call
    failed. A fresh Trace keeps the main request's record (what answered it) untouched."""
    text = render(dropped)[-input_chars:]
    body = {
        "model": alias,
        "messages": [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": text},
        ],
        "max_tokens": max_tokens,
        "stream": False,
    }
    sub = Call(kind="chat", body=body, ctx=dataclasses.replace(call.ctx, trace=Trace()))
    trace = call.ctx.trace
    try:
        reply = await service(sub)
    except LevergateError as exc:
        trace.note(layer="trim", text=f"summary by {alias!r} failed: {exc.message}")
        return None
    if not isinstance(reply, Completed):  # a non-streaming call answers whole
        await reply.aclose()
        return None
    trace.side_spend.append(spent(alias, "summary", reply.usage))
    summary = _content(reply.data)
    if not summary:
        trace.note(layer="trim", text=f"summary by {alias!r} was empty")
    return summary or None


def render(messages: Sequence[Any]) -> str:
    """Dropped messages as `role: text` lines (tool calls by name and arguments)."""
    lines = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        text = content_text(message.get("content"), sep=" ")
        for tool_call in message.get("tool_calls") or ():
            function = tool_call.get("function") if isinstance(tool_call, Mapping) else None
            if isinstance(function, Mapping):
                text += f" [called {function.get('name')}({function.get('arguments')})]"
        lines.append(f"{message.get('role')}: {text.strip()}")
    return "\n".join(lines)


def _content(data: Mapping[str, Any]) -> str:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return ""
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    return content.strip() if isinstance(content, str) else ""

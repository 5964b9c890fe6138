"""The few facts both Anthropic directions share (upstream translation and `/v1/messages`
inbound): how Anthropic's stop reasons and OpenAI's finish reasons correspond.

Source: Anthropic's Messages API reference (`stop_reason`: "end_turn", "max_tokens",
"stop_sequence", "tool_use", "pause_turn", "refusal", "model_context_window_exceeded") and
OpenAI's chat completion object (`finish_reason`: "stop", "length", "tool_calls",
"content_filter", "function_call"). Kept tiny on purpose: anything else belongs to one side.
"""

from __future__ import annotations

# Anthropic `stop_reason` -> OpenAI `finish_reason`. "pause_turn" (a server tool paused a
# long turn; the caller sends the turn back to continue) has no OpenAI twin: "stop" is the
# closest (the turn ended without a tool call for the client).
STOP_TO_FINISH: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

# OpenAI `finish_reason` -> Anthropic `stop_reason` (the inbound direction's answer).
FINISH_TO_STOP: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def finish_reason(stop_reason: object) -> str | None:
    """The OpenAI finish reason of an Anthropic stop reason (None stays None: not finished;
    an unknown future reason reads as "stop", the turn ended)."""
    if stop_reason is None:
        return None
    return STOP_TO_FINISH.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"

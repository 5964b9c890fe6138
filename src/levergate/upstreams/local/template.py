"""Chat messages to the prompt text the model was trained on.

The model's own template (GGUF metadata `tokenizer.chat_template`) is applied by llama.cpp's
built-in template engine, which recognises the common families (ChatML, Llama, Gemma, Mistral,
Phi...) without a Jinja runtime. A template it does not know falls back to ChatML, the format of
the bundled SmolLM2, and says so once in the log.

Only text is accepted: content parts other than text, tool definitions and tool calls are
refused with a 400 that names the field, rather than silently dropped.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

from levergate.errors import BadRequest

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def message_texts(messages: Sequence[Any]) -> list[tuple[str, str]]:
    """(role, text) pairs from OpenAI chat messages; `developer` is read as `system`."""
    pairs: list[tuple[str, str]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise BadRequest(f"messages[{index}] must be an object", param=f"messages[{index}]")
        role = message.get("role")
        if role not in ROLES:
            raise BadRequest(
                f"messages[{index}].role {role!r} is not one of {sorted(ROLES)}",
                param=f"messages[{index}].role",
            )
        if message.get("tool_calls"):
            raise BadRequest(
                "the local engine does not support tool calls",
                param=f"messages[{index}].tool_calls",
                code="unsupported_parameter",
            )
        text = _content_text(message.get("content"), where=f"messages[{index}].content")
        pairs.append(("system" if role == "developer" else str(role), text))
    return pairs


def _content_text(content: Any, *, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (isinstance(part, Mapping) and part.get("type") == "text"):
                raise BadRequest(
                    f"{where}: the local engine accepts text parts only",
                    param=where,
                    code="unsupported_parameter",
                )
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise BadRequest(f"{where} must be a string or a list of text parts", param=where)


def chatml(pairs: Sequence[tuple[str, str]]) -> str:
    """The ChatML rendering, with the assistant turn opened for the model to continue."""
    turns = "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in pairs)
    return turns + "<|im_start|>assistant\n"


def render(pairs: Sequence[tuple[str, str]], *, template: str | None, llama: Any) -> str:
    """`pairs` through the model's template with llama.cpp's template engine (`llama` is the
    `llama_cpp` module), or ChatML when the model has none or llama.cpp does not know it."""
    if template is None or not pairs:
        return chatml(pairs)
    encoded = [(role.encode(), text.encode()) for role, text in pairs]
    chat = (llama.llama_chat_message * len(encoded))(
        *[llama.llama_chat_message(role=role, content=text) for role, text in encoded]
    )
    room = 2 * sum(len(role) + len(text) for role, text in encoded) + 1024
    open_assistant_turn = True
    for _ in range(2):
        buffer = ctypes.create_string_buffer(room)
        size = llama.llama_chat_apply_template(
            template.encode(), chat, len(encoded), open_assistant_turn, buffer, room
        )
        if size < 0:
            return chatml(pairs)
        if size <= room:
            return buffer.raw[:size].decode(errors="replace")
        room = size + 1
    return chatml(pairs)

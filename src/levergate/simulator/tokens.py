"""The simulator's token model: how prompts are counted, what text is generated, and the
deterministic embeddings.

One rule is used everywhere a prompt is measured (usage, TPM admission, prefill time, the
prompt cache): a prompt is first rendered to one canonical string, and it costs one token per
started `CHARS_PER_TOKEN` characters, close to real BPE tokenizers on English text. Rendering
is prefix-stable (appending a message only appends text), so a growing conversation keeps its
cached prefix exactly as with a real provider. Output is one word per token, so a content delta
in a stream is one token.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

CHARS_PER_TOKEN = 4
# A fixed vocabulary keeps generated text readable and free of the stop markers clients use.
# One string, split once: a word per line would be 200 lines.
_VOCABULARY = tuple(
    """
    the of and to in is that for it as was with be by on not he this are or his from at
    which but have an they you were her she there been one all we their has would when if so
    no will more can out up about into them some could time what only other new these two
    may first then do any like my now over such our man me even most made after also did
    many before must through back years where much your way well down should because each
    just those people how too little state good very make world still own see men work long
    get here between both life being under never day same another know while last might us
    great old year off come since against go came right used take three states himself few
    house use during without again place around however home small found thought went say
    part once general high upon school every don does got united left number course war
    until always away something fact though water less public put think almost hand enough
    far took head yet government system better set told nothing night end why called didn
    eyes find going look asked later knew open seemed together next white children begin
    given present large often important young room order point city play light best story
    form idea clear turn early mind river moment across quite field road side kind answer
    letter month sound watch south north east west green blue morning
    """.split()  # noqa: SIM905
)
_SPACED = tuple(" " + word for word in _VOCABULARY)
if len(_VOCABULARY) != 256:  # pragma: no cover - guards the one-byte-per-word mapping
    raise RuntimeError(f"the vocabulary must hold 256 words, not {len(_VOCABULARY)}")


def count_tokens(text: str) -> int:
    """Tokens of a rendered prompt: one per started group of CHARS_PER_TOKEN characters."""
    return -(-len(text) // CHARS_PER_TOKEN)


def chat_prompt(body: Mapping[str, Any]) -> str:
    """The canonical, prefix-stable rendering of a chat request: tools first (they come first
    in a provider's cached prefix), then one `role\ncontent\n` block per message."""
    tools = body.get("tools")
    parts = [orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode() + "\n"] if tools else []
    for message in body["messages"]:
        content = message.get("content")
        if type(content) is not str:
            content = "" if content is None else _content_parts(content)
        calls = message.get("tool_calls")
        if calls:
            content += orjson.dumps(calls, option=orjson.OPT_SORT_KEYS).decode()
        parts.append(f"{message['role']}\n{content}\n")
    return "".join(parts)


def _content_parts(content: Any) -> str:
    if not isinstance(content, list):
        return orjson.dumps(content, option=orjson.OPT_SORT_KEYS).decode()
    texts: list[str] = []
    for part in content:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            texts.append(orjson.dumps(part, option=orjson.OPT_SORT_KEYS).decode())
    return "\n".join(texts)


def completion_prompts(prompt: Any) -> list[tuple[str, int]]:
    """(rendered text, tokens) per prompt of a /v1/completions request: a string, a list of
    strings, a list of token ids, or a list of token-id lists (ids count one token each)."""
    if isinstance(prompt, str):
        return [(prompt, count_tokens(prompt))]
    if prompt and all(isinstance(item, int) for item in prompt):
        return [(" ".join(map(str, prompt)), len(prompt))]
    rendered: list[tuple[str, int]] = []
    for item in prompt:
        if isinstance(item, str):
            rendered.append((item, count_tokens(item)))
        elif isinstance(item, list) and all(isinstance(i, int) for i in item):
            rendered.append((" ".join(map(str, item)), len(item)))
        else:
            raise TypeError("each prompt must be a string or a list of token ids")
    return rendered


def embedding_inputs(value: Any) -> list[tuple[str, int]]:
    """(text, tokens) per input of an embeddings request, same shapes as completion prompts."""
    items = completion_prompts(value)
    if not items or any(tokens == 0 for _, tokens in items):
        raise ValueError("input must not be empty")
    return items


def words(*, seed: int, text: str, salt: str, count: int) -> list[str]:
    """`count` output tokens for a request: the same (seed, rendered prompt, salt) always gives
    the same words, and a shorter answer is a prefix of a longer one.

    Each word is picked by one byte of a blake2b stream over (seed, prompt, salt), from a
    vocabulary of exactly 256 words. (A `random.Random` seeded per request does the same job,
    but seeding a Mersenne Twister costs about 5 us, a sixth of the simulator's whole budget
    per request at 10,000 requests per second; the hash costs a fraction of that.) The first
    word is capitalised and the rest carry a leading space, so the message content is exactly
    the concatenation of the stream deltas."""
    if count <= 0:
        return []
    block = hashlib.blake2b(b"%d\x00%b\x00%b" % (seed, salt.encode(), text.encode())).digest()
    stream = block
    counter = 0
    while len(stream) < count:  # 64 words per block; later blocks chain from the first
        counter += 1
        stream += hashlib.blake2b(block + counter.to_bytes(8, "little")).digest()
    picked = list(map(_SPACED.__getitem__, stream[:count]))
    picked[0] = picked[0][1:].capitalize()
    return picked


def embedding(*, seed: int, text: str, dim: int) -> list[float]:
    """A deterministic unit vector for `text`: SHAKE-256 of (seed, text) read as signed 32-bit
    integers, normalised. Different texts are near-orthogonal in high dimensions, equal texts
    are identical (cosine 1), which is what cache and routing tests need."""
    stream = hashlib.shake_256(seed.to_bytes(8, "little", signed=True) + text.encode())
    raw = struct.unpack(f"<{dim}i", stream.digest(4 * dim))
    norm = math.sqrt(math.fsum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def encode_base64(vector: Sequence[float]) -> str:
    """OpenAI's `encoding_format: "base64"`: little-endian float32 bytes, base64-encoded."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def schema_value(schema: Any, words: list[str], depth: int = 0) -> Any:
    """A value that fits a JSON schema (the subset structured outputs allow), from the answer's
    words: what the simulator answers a structured-output request with (chat's
    `response_format`, the Responses API's `text.format`, a tool call's arguments)."""
    if not isinstance(schema, dict) or depth > 8:
        return {}
    if isinstance(choices := schema.get("enum"), list) and choices:
        return choices[0]
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {name: schema_value(sub, words, depth + 1) for name, sub in props.items()}
    if kind == "array":
        return [schema_value(schema.get("items"), words, depth + 1)]
    if kind == "integer":
        return len(words)
    if kind == "number":
        return float(len(words)) / 2
    if kind == "boolean":
        return True
    return "".join(words[:3]).strip() or "x"

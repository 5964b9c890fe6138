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
import random
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

CHARS_PER_TOKEN = 4
# A fixed vocabulary keeps generated text readable and free of the stop markers clients use.
_VOCABULARY = tuple(
    """the of and to in is that for it as was with be by on not he this are or his from at which
    but have an they you were her she there been one all we their has would when if so no will
    more can out up about into them some could time what only other new these two may first
    then do any like my now over such our man me even most made after also did many before must
    through back years where much your way well down should because each just those people how
    too little state good very make world still own see men work long get here between both
    life being under never day same another know while last might us great old year off come
    since against go came right used take three states himself few house use during without
    again place around however home small found thought went say part once general high upon
    school every don does got united left number course war until always away something fact
    though water less public put think almost hand enough far took head yet government system
    better set told nothing night end why called didn eyes find going look asked later knew""".split()
)


def count_tokens(text: str) -> int:
    """Tokens of a rendered prompt: one per started group of CHARS_PER_TOKEN characters."""
    return -(-len(text) // CHARS_PER_TOKEN)


def chat_prompt(body: Mapping[str, Any]) -> str:
    """The canonical, prefix-stable rendering of a chat request: tools first (they come first
    in a provider's cached prefix), then one `role\\ncontent\\n` block per message."""
    parts: list[str] = []
    tools = body.get("tools")
    if tools:
        parts.append(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode())
        parts.append("\n")
    for message in body["messages"]:
        parts.append(str(message.get("role")))
        parts.append("\n")
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif content is not None:
            parts.append(_content_parts(content))
        calls = message.get("tool_calls")
        if calls:
            parts.append(orjson.dumps(calls, option=orjson.OPT_SORT_KEYS).decode())
        parts.append("\n")
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


def request_rng(*, seed: int, text: str, salt: str) -> random.Random:
    """The generator for one request's words: same seed + same request -> same answer. The
    digest is blake2b, stable across processes (unlike `hash()`)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8, person=b"levergate-sim")
    digest.update(salt.encode())
    return random.Random((seed << 64) ^ int.from_bytes(digest.digest(), "little"))


def words(*, rng: random.Random, count: int) -> list[str]:
    """`count` output tokens: the first bare, the rest with a leading space, so the message
    content is exactly the concatenation of the stream deltas."""
    picked = rng.choices(_VOCABULARY, k=count)
    if picked:
        picked[0] = picked[0].capitalize()
        picked[1:] = [" " + word for word in picked[1:]]
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

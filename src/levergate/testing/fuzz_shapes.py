"""The fuzz's shapes from issue 20 (testing/fuzzing.py draws on them): JSON nested around and far
past the gateway's bound, embeddings requests made of copies, hostile multipart uploads, and
valid bodies for the routes added since the first fuzz (Responses, Messages, async requests,
batches), so every way JSON enters is reached.

Deep JSON is written as text after the rest of the body (no serializer writes 1,000 levels):
the body holds `DEEP` where the nesting goes, and `deepen` replaces it."""

from __future__ import annotations

import json
import random
from typing import Any

from levergate.config import MAX_JSON_DEPTH

DEEP = "__lg_deep__"
# Around the bound, around orjson's writing limit (254) and its reading limit (1,024).
DEPTHS = (4, MAX_JSON_DEPTH - 8, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 252, 255, 300, 1000, 1030)
BOUNDARY = "lgfuzzboundary"
USER = [{"role": "user", "content": "hi"}]


def deep_text(rng: random.Random, depth: int) -> bytes:
    """`depth` levels of arrays or objects (or both, alternating)."""
    kind = rng.choice(["array", "object", "mixed"])
    if kind == "array":
        return b"[" * depth + b"]" * depth
    if kind == "object":
        return b'{"d":' * (depth - 1) + b"{}" + b"}" * (depth - 1)
    opens = b"".join(b'[{"d":' if i % 2 else b"[" for i in range(depth - 1))
    closes = b"".join(b"]}" if i % 2 else b"]" for i in reversed(range(depth - 1)))
    return opens + b"[]" + closes


def deepen(rng: random.Random, text: bytes) -> bytes:
    """The body's `DEEP` placeholder (if any) replaced by nesting of a drawn depth."""
    placeholder = json.dumps(DEEP).encode()
    if placeholder not in text:
        return text
    return text.replace(placeholder, deep_text(rng, rng.choice(DEPTHS)), 1)


def place_deep(rng: random.Random, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """`DEEP` where a real client's JSON nests: a tool's schema, an input item, an extra field,
    metadata."""
    schema = {"type": "object", "properties": {}, "x": DEEP}
    where = rng.random()
    if path.endswith("/messages"):
        body["tools"] = [{"name": "f", "input_schema": schema}]
    elif path.endswith("/responses") and where < 0.5:
        body["input"] = [{"role": "user", "content": "hi", "x": DEEP}]
    elif path.endswith("/responses"):
        body["tools"] = [{"type": "function", "name": "f", "parameters": schema}]
    elif path.endswith(("/chat/completions", "/completions")) and where < 0.6:
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    else:
        body[rng.choice(["x_extra", "metadata", "user"])] = DEEP
    return body


def copies(rng: random.Random) -> list[str]:
    """Embeddings inputs made of copies: at, just past and far past the bound of 16 inputs per
    distinct one."""
    distinct = rng.choice([1, 2, 8, 64])
    per = rng.choice([15, 16, 17, 100, 2048])
    return [f"text {i % distinct}" for i in range(min(2048, distinct * per))]


def valid(rng: random.Random, path: str, model: str) -> dict[str, Any]:
    """A valid body for the routes fuzzing.py's `_valid` does not know."""
    if path.endswith("/responses"):
        return {"model": model, "input": rng.choice(["hi", USER]), "max_output_tokens": 4,
                "stream": rng.random() < 0.3}  # fmt: skip
    if path.endswith("/messages"):
        return {"model": model, "max_tokens": 4, "messages": USER, "stream": rng.random() < 0.3}
    if path.endswith("/batches"):
        return {"input_file_id": rng.choice(["file-nope", "x" * 300]), "completion_window": "24h",
                "endpoint": "/v1/chat/completions"}  # fmt: skip
    return {"model": model, "max_tokens": 2, "messages": USER}  # /v1/async/chat/completions


# The fuzz gateway's upload bound (fuzzing.py gateway_config): a "huge" part is past it.
UPLOAD_BYTES = 64 << 10


def huge(rng: random.Random) -> bytes:
    """A file's content past the upload bound: lines, or one line with no end."""
    if rng.random() < 0.5:
        return b'{"custom_id": "h", "body": "' + b"h" * (UPLOAD_BYTES + rng.randint(1, 4096))
    line = b'{"custom_id": "h", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    return line * (UPLOAD_BYTES // len(line) + rng.randint(1, 50))


def multipart(rng: random.Random) -> tuple[str, bytes]:
    """(content-type, body) of an upload, valid or broken in one of the ways clients break it."""
    line = {"custom_id": "c", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "sim-small", "max_tokens": 1, "messages": USER}}  # fmt: skip
    content = json.dumps(line).encode() + b"\n"
    roll = rng.random()
    if roll < 0.15:
        content = deepen(rng, json.dumps({**line, "x": DEEP}).encode()) + b"\n"
    elif roll < 0.25:
        content = b'{"custom_id": "c", "body": ' + b"[" * 5000
    elif roll < 0.33:  # a part past the upload bound
        content = huge(rng)
    boundary = BOUNDARY
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
    part = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            'filename="in.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n')  # fmt: skip
    close = f"\r\n--{boundary}--\r\n"
    body = head.encode() + part.encode() + content + close.encode()
    kind = f"multipart/form-data; boundary={boundary}"
    broken = rng.random()
    if broken < 0.15:  # no closing boundary: the file would be kept cut short
        body = body[: -len(close)]
    elif broken < 0.25:  # cut anywhere
        body = body[: rng.randint(0, len(body))]
    elif broken < 0.32:  # no file part
        body = head.encode() + close.encode()[2:]
    elif broken < 0.38:  # two file parts
        body = head.encode() + (part.encode() + content + b"\r\n") * 2 + close.encode()[2:]
    elif broken < 0.44:  # a part header past every bound
        body = f"--{boundary}\r\nX-Junk: {'j' * 20_000}\r\n\r\n".encode() + body
    elif broken < 0.48:  # a form field (not the file) past every bound
        field = f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n'
        body = field.encode() + b"b" * (UPLOAD_BYTES + 1) + b"\r\n" + body
    elif broken < 0.54:  # a boundary that never appears, or none
        kind = rng.choice(["multipart/form-data", "multipart/form-data; boundary=",
                           "multipart/form-data; boundary=" + "b" * 2000,
                           "application/json"])  # fmt: skip
    return kind, body

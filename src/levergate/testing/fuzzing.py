"""Hostile requests, generated from a seed, sent over raw sockets: the gateway's standing fuzz.

`hostile_requests(seed)` mutates valid OpenAI requests the way an attacker or a buggy client
would — wrong types, huge and non-finite numbers, bad UTF-8, truncated JSON, unknown fields,
absurd counts, crafted levergate headers, wrong methods and paths; and since issue 20 JSON
nested around and far past the gateway's bound (to 1,030 levels) where clients nest it,
embeddings made of copies, hostile multipart uploads, and the Responses, Messages, async and
batch routes (testing/fuzz_shapes.py), huge upload parts, and requests that stall mid-head or
mid-body — and `fuzz`
sends them with `Connection: close` over plain sockets (no client library to tidy them up),
recording each status and every request that went unanswered. The CI test
(tests/e2e/test_fuzz.py) sends 10,000; benchmarks/fuzz.py sends as many as it is asked to.

What counts as a failure: a 5xx other than 502/504 (those are documented answers to upstream
faults), no status line at all, or no answer within the per-request bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from levergate.control_headers import ASYNC_HEADERS, CACHE_CONTROL_HEADER, CONTROL_HEADERS
from levergate.principal import TENANT_HEADER
from levergate.testing import fuzz_shapes

PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/messages",
    "/v1/async/chat/completions",
    "/v1/batches",
    "/v1/files",
    "/v1/models",
    "/v1/models/sim-small",
    "/healthz",
    "/readyz",
    "/metrics",
)
METHODS = ("GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS")
ALLOWED_5XX = frozenset({502, 504})
# Small answers: the fuzz is about the gateway's handling, not the simulator's output.
SIM_ARGS = ("--max-tokens-default", "4", "--embedding-dim", "8")

_STRANGE: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1 << 70,
    -(1 << 70),
    1e308,
    -1e-300,
    float("nan"),
    float("inf"),
    "",
    "x" * 5000,
    "\u0000\u202e\ud7ff\U0001f600",
    [],
    {},
    [[[[[]]]]],
    {"$ref": "#"},
    ["a"] * 300,
)
_HEADER_VALUES = (
    "inf", "-inf", "nan", "1e306", "1e20", "-1", "0", "1e-9", "abc", "", "9" * 400,
    "max-age=-1", "max-age=nan", "no-store, max-age=1e20", "interactive", "batch", "\u00e9",
)  # fmt: skip
# Every header the gateway parses, named by its parsers (so a new control is fuzzed too), and
# the plain ones every request carries.
_HEADERS = (
    *CONTROL_HEADERS,
    CACHE_CONTROL_HEADER,
    TENANT_HEADER,
    *ASYNC_HEADERS,
    "x-request-id",
    "authorization",
    "content-type",
)


@dataclass(frozen=True, slots=True)
class RawRequest:
    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    # Send only this many bytes of the encoded request, then nothing more (a stalled head or
    # body): the gateway's head and body timeouts must answer it (408) and close.
    stall_at: int | None = None

    def encode(self) -> bytes:
        head = [f"{self.method} {self.path} HTTP/1.1", "host: 127.0.0.1", "connection: close"]
        head += [f"{name}: {value}" for name, value in self.headers]
        head.append(f"content-length: {len(self.body)}")
        return ("\r\n".join(head) + "\r\n\r\n").encode("utf-8", "surrogateescape") + self.body


def _valid(rng: random.Random, path: str) -> dict[str, Any]:
    model = rng.choice(["sim-small", "sim-large", "anything", "gpt-4o-mini"])
    if path.endswith(("/responses", "/messages", "/batches", "/async/chat/completions")):
        return fuzz_shapes.valid(rng, path, model)
    if path.endswith("/embeddings"):
        return {"model": model, "input": rng.choice(["hello", ["a", "b", "a"], [1, 2, 3]])}
    body: dict[str, Any] = {"model": model, "max_tokens": rng.randint(1, 8)}
    if path.endswith("/chat/completions"):
        body["messages"] = [{"role": "user", "content": f"question {rng.randint(0, 50)}"}]
    else:
        body["prompt"] = f"prompt {rng.randint(0, 50)}"
    if rng.random() < 0.3:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": rng.random() < 0.5}
    if rng.random() < 0.3:
        body["temperature"] = 0
    return body


_FIELDS = (
    "model", "messages", "prompt", "input", "max_tokens", "max_completion_tokens", "n",
    "temperature", "top_p", "stream", "stream_options", "stop", "tools", "tool_choice",
    "response_format", "logit_bias", "logprobs", "top_logprobs", "seed", "user", "metadata",
    "encoding_format", "dimensions", "presence_penalty", "frequency_penalty",
)  # fmt: skip


def _mutate(rng: random.Random, path: str, body: dict[str, Any]) -> dict[str, Any]:
    if rng.random() < 0.25:
        body = fuzz_shapes.place_deep(rng, path, body)
    if path.endswith("/embeddings") and rng.random() < 0.3:
        body["input"] = fuzz_shapes.copies(rng)
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        name = rng.choice(_FIELDS)
        if roll < 0.45:
            body[name] = rng.choice(_STRANGE)
        elif roll < 0.6:
            body.pop(name, None)
        elif roll < 0.75 and isinstance(body.get("messages"), list):
            body["messages"] = [_strange_message(rng) for _ in range(rng.randint(0, 4))]
        elif roll < 0.85:
            body["input"] = ["a"] * rng.choice([2048, 2049, 5000]) if rng.random() < 0.5 else "b"
        else:
            body[f"x_{rng.randint(0, 9)}"] = rng.choice(_STRANGE)
    return body


def _strange_message(rng: random.Random) -> Any:
    content = rng.choice(
        [
            "hi",
            rng.choice(_STRANGE),
            [{"type": "text", "text": "hi"}],
            [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}],
            [{"type": rng.choice(_STRANGE)}],
        ]
    )
    return rng.choice(
        [
            {"role": rng.choice(["user", "system", "assistant", "tool", "nobody", 7]),
             "content": content},
            {"role": "assistant", "tool_calls": rng.choice(_STRANGE)},
            rng.choice(_STRANGE),
        ]
    )  # fmt: skip


def _body_bytes(rng: random.Random, body: dict[str, Any]) -> bytes:
    roll = rng.random()
    text = fuzz_shapes.deepen(rng, json.dumps(body, allow_nan=True).encode()).decode()
    if roll < 0.05:
        return text[: rng.randint(0, len(text))].encode()
    if roll < 0.08:
        return b"[" * rng.choice([100, 5000, 100_000])
    if roll < 0.1:
        return text.encode()[:10] + b"\xff\xfe\xc3(" + text.encode()[10:]
    if roll < 0.12:
        return rng.choice([b"", b"null", b"[]", b'"text"', b"42", b"not json"])
    return text.encode()


def _headers(rng: random.Random, key: str) -> tuple[tuple[str, str], ...]:
    headers = [("content-type", "application/json")]
    if rng.random() < 0.85:
        headers.append(("authorization", f"Bearer {key}"))
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        value = rng.choice(_HEADER_VALUES)
        headers.append((rng.choice(_HEADERS), value))
    return tuple(headers)


def hostile_requests(seed: int, *, key: str = "lg-fuzz-key") -> Iterator[RawRequest]:
    """An endless, reproducible sequence of hostile requests (`key` authenticates most)."""
    rng = random.Random(seed)
    while True:
        roll = rng.random()
        if roll < 0.1:
            method = rng.choice(METHODS)
            path = rng.choice([*PATHS, "/v1/unknown", "/" + "a" * 2000, "/v1/models/%00%ff",
                               "/v1/chat/completions?x=1", "//v1//models"])  # fmt: skip
            yield RawRequest(method, path, _headers(rng, key), b"")
            continue
        path = rng.choice(PATHS[:8])
        if path == "/v1/files":
            kind, upload = fuzz_shapes.multipart(rng)
            headers = ((n, v) for n, v in _headers(rng, key) if n != "content-type")
            yield _stalled(
                rng, RawRequest("POST", path, (("content-type", kind), *headers), upload)
            )
            continue
        body = _valid(rng, path)
        if roll < 0.8:
            body = _mutate(rng, path, body)
        yield _stalled(rng, RawRequest("POST", path, _headers(rng, key), _body_bytes(rng, body)))


def _stalled(rng: random.Random, request: RawRequest) -> RawRequest:
    """One request in 100 stops mid-way: mostly in its body, sometimes in its head (after the
    request line: a silent connection is closed without an answer, by design)."""
    if rng.random() >= 0.01:
        return request
    whole = request.encode()
    body_at = len(whole) - len(request.body)
    line = whole.index(b"\r\n") + 2
    cut = rng.randint(line, body_at - 1) if rng.random() < 0.2 or not request.body else (
        body_at + rng.randint(0, len(request.body) - 1))  # fmt: skip
    return dataclasses.replace(request, stall_at=cut)


@dataclass
class FuzzReport:
    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[tuple[RawRequest, str]] = field(default_factory=list)

    def record(self, request: RawRequest, status: int | None, why: str = "") -> None:
        self.sent += 1
        if status is not None:
            self.statuses[status] += 1
        if status is None or (status >= 500 and status not in ALLOWED_5XX):
            self.failures.append((request, why or f"status {status}"))


async def send(host: str, port: int, request: RawRequest, *, timeout: float) -> int | None:
    """The response's status, reading to the end; None when the answer had no status line.
    Raises TimeoutError when nothing complete came back within `timeout`."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request.encode()[: request.stall_at])
            await writer.drain()
            answer = await reader.read(-1)
        finally:
            writer.close()
    line = answer.split(b"\r\n", 1)[0].split(b" ")
    return int(line[1]) if len(line) > 1 and line[0].startswith(b"HTTP/") else None


async def fuzz(
    host: str,
    port: int,
    requests: Iterator[RawRequest],
    *,
    count: int,
    concurrency: int = 16,
    timeout: float = 30.0,
) -> FuzzReport:
    report = FuzzReport()
    batch = itertools.islice(requests, count)

    async def worker() -> None:
        for request in batch:
            try:
                status = await send(host, port, request, timeout=timeout)
            except TimeoutError:
                report.record(request, None, f"no answer within {timeout} s")
                continue
            except OSError as exc:
                report.record(request, None, f"connection error: {exc!r}")
                continue
            report.record(request, status, "" if status else "no status line")

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return report


REDIS_URL = "redis://127.0.0.1:6379/0"


def gateway_config(tmp: Path, *, sim_port: int, port: int, key: str, redis_prefix: str) -> Path:
    """A gateway with auth (one key) and the exact cache on in Redis with no in-memory front (so
    every crafted TTL reaches the shared store), every model to the simulator, the Batch API and
    async requests on (their store and files under `tmp`)."""
    store = {"backend": "redis", "redis_prefix": redis_prefix, "front_bytes": 0}
    settings = {
        # Tight timeouts and upload bound, so stalled requests and huge parts (fuzz_shapes.py)
        # are answered within the fuzz's bound and cheaply.
        "server": {"port": port, "head_timeout_seconds": 2, "body_timeout_seconds": 1,
                   "max_upload_bytes": fuzz_shapes.UPLOAD_BYTES},
        "upstreams": [{"name": "sim", "base_url": f"http://127.0.0.1:{sim_port}/v1"}],
        "models": [{"name": "*", "upstream": "sim"}],
        "auth": {"enabled": True, "keys": [{"key": key, "tenant": "fuzz"}]},
        "cache": {"enabled": True, "store": store},
        "stores": {"default": {"redis_url": REDIS_URL}},
        "batch": {"enabled": True, "dir": str(tmp / "batch"),
                  "store": {"sqlite_path": str(tmp / "batch.sqlite3")}},
        "async_requests": {"enabled": True},
    }  # fmt: skip
    path = tmp / "levergate.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path

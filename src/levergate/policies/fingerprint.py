"""Canonical fingerprints: the exact-cache key of a request, as a pure function.

A cached answer may be served only for a request that would have produced it, so the key covers
every field that shapes the output and nothing else. Rather than list the shaping fields (and
silently miss a provider-specific extra someone adds tomorrow), the key takes the *whole* body
minus the fields known not to shape the output:

    stream, stream_options   transport only: a streamed and a whole answer share one entry
    user, metadata, store,   bookkeeping: abuse monitoring, stored-completion tags, billing tier,
    service_tier,            and the provider's prompt-cache routing hint
    prompt_cache_key,
    safety_identifier

So model (resolved: the alias *and* the upstream model it maps to), messages / prompt, tools,
tool_choice, parallel_tool_calls, response_format, temperature, top_p, seed, max_tokens,
max_completion_tokens, stop, n, logit_bias, logprobs, penalties, reasoning_effort and any
provider extra are all in, together with the request kind and the cache namespace (the tenant,
unless the config shares a namespace). A test changes each of them and expects a miss.

Canonicalisation only merges spellings the OpenAI API defines as identical: a top-level `null`
is the same as an absent field, `n: 1` is the default, `stop: "x"` is `stop: ["x"]`, empty
`stop` / `tools` / `logit_bias` are absent, and message `content` given as a single text part is
the plain string. Object keys are sorted, except inside `tools`, `functions` and
`response_format`: those carry client-authored JSON Schemas whose property order is rendered
into the prompt (and, for structured outputs, decides the order of the answer's keys).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

FORMAT_VERSION = b"lgfp1"
NON_SHAPING: frozenset[str] = frozenset(
    {
        "stream",
        "stream_options",
        "user",
        "metadata",
        "store",
        "service_tier",
        "prompt_cache_key",
        "safety_identifier",
    }
)
# Fields whose inner key order is kept: they hold JSON Schemas the model sees in order.
ORDERED: tuple[str, ...] = ("tools", "functions", "response_format")
_EMPTY_IS_ABSENT = frozenset({"stop", "tools", "functions", "logit_bias"})


# The fields `canonical_body_bytes` does more with than copy (every other one is copied when not
# null): the ones whose empty value is no value, `n`, the messages, and the ordered ones.
_NOT_COPIED = _EMPTY_IS_ABSENT | {"n", "messages"} | frozenset(ORDERED)
# The fields not copied as they are (non-shaping or `_NOT_COPIED`).
_NOT_PLAIN = NON_SHAPING | _NOT_COPIED


def _canonical_message(message: Any) -> Any:
    if type(message) is not dict and not isinstance(message, Mapping):  # a dict: no ABC check
        return message
    content = message.get("content")
    if (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], Mapping)
        and content[0].get("type") == "text"
        and set(content[0]) == {"type", "text"}
        and isinstance(content[0].get("text"), str)
    ):
        return {**message, "content": content[0]["text"]}
    return message


def canonical_bytes(
    body: Mapping[str, Any],
    *,
    kind: str,
    resolved_model: str,
    namespace: str,
    exclude: frozenset[str] = frozenset(),
) -> bytes:
    """The bytes a fingerprint digests: the format version, the kind, model and namespace
    (`head_bytes`), then the canonical body (`canonical_body_bytes`). `exclude` drops further
    fields (the semantic cache keys its partitions on everything but the final user text)."""
    return head_bytes(kind, resolved_model, namespace) + canonical_body_bytes(body, exclude=exclude)


_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def canonical_body_bytes(
    body: Mapping[str, Any], *, exclude: frozenset[str] = frozenset()
) -> bytes:
    """The canonical body's part of `canonical_bytes`: the body's output-shaping fields, with
    equivalent spellings merged (a null, an empty `stop`/`tools`/`logit_bias`, `n` 1 as absent; a
    `stop` text as a list of one; a message of one text part as its text), keys sorted, then
    each ordered field with its keys as given. The same for every kind, model and
    namespace, so one computation serves the exact cache's key and the request log's replay
    fingerprint (`Call.canonical_bytes`).

    One loop, written for the common body (plain fields, messages of text kept as the list they
    came in), for the bytes it was until 2026-12-04: the canonical body's dict built, its ordered
    fields popped, `exclude`'s loop, the parts joined (a property test compares the two).
    Counted (callgrind, `inprocess_cpu.py`'s one-message body with `stream`): 14.3k instructions
    a call as that composition, 10.6k fused; a plain field tested once (`_NOT_PLAIN`) rather
    than against `NON_SHAPING` then `_NOT_COPIED`, 9,428 -> 9,103 (`log_breakdown.py`)."""
    out: dict[str, Any] = {}
    ordered: list[tuple[str, Any]] | None = None
    for name, value in body.items():
        if value is None:
            continue
        if name not in _NOT_PLAIN:  # one test for most fields
            out[name] = value
        elif name in NON_SHAPING:
            continue
        elif name == "messages" and isinstance(value, list):
            # The list itself when every message is kept as it is (the common one): no copy.
            messages = value
            for message in value:
                if type(message) is not dict or type(message.get("content")) is not str:
                    messages = [_canonical_message(m) for m in value]
                    break
            out[name] = messages
        elif (name in _EMPTY_IS_ABSENT and not value) or (
            name == "n" and value == 1 and not isinstance(value, bool)
        ):
            continue
        elif name in ORDERED:
            if ordered is None:
                ordered = []
            ordered.append((name, value))
        elif name == "stop" and isinstance(value, str):
            out[name] = [value]
        else:
            out[name] = value
    if exclude:
        for name in exclude:
            out.pop(name, None)
    if ordered is None:
        try:  # a parsed body's keys are text: sorted without `OPT_NON_STR_KEYS` (~1k fewer)
            return orjson.dumps(out, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # a key that is not text (or a value that is not JSON: raises again)
            return orjson.dumps(out, option=_SORTED)
    parts = [orjson.dumps(out, option=_SORTED)]
    for name in ORDERED:  # in this order, whatever the body's
        for field, value in ordered:
            if field == name:
                parts += (b"\x00" + name.encode() + b"\x00",
                          orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))  # fmt: skip
    return b"".join(parts)


@functools.lru_cache(maxsize=1024)
def head_bytes(kind: str, model: str, namespace: str) -> bytes:
    """The bytes of `canonical_bytes` before the canonical body's: the same for every request
    of a kind, model and namespace."""
    head = {"kind": kind, "model": model, "ns": namespace}
    return FORMAT_VERSION + orjson.dumps(head, option=orjson.OPT_SORT_KEYS) + b"\x00"


def fingerprint(
    body: Mapping[str, Any],
    *,
    kind: str,
    resolved_model: str,
    namespace: str,
    exclude: frozenset[str] = frozenset(),
) -> str:
    """Hex SHA-256 naming the request (`canonical_bytes`' arguments): a cache key, so a
    collision would serve one request another's answer."""
    data = head_bytes(kind, resolved_model, namespace) + canonical_body_bytes(body, exclude=exclude)
    return hashlib.sha256(data).hexdigest()


def key_of(body_bytes: bytes, *, kind: str, resolved_model: str, namespace: str) -> str:
    """`fingerprint` of a body whose `canonical_body_bytes` are `body_bytes` (no `exclude`)."""
    return hashlib.sha256(head_bytes(kind, resolved_model, namespace) + body_bytes).hexdigest()

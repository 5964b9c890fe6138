"""Anthropic's prompt-cache accounting for the simulator's `/v1/messages`.

Anthropic caches only where the request says so: a `cache_control: {type: "ephemeral", ttl}`
on a tool, a system block or a message content block marks the prefix up to and including that
block as cacheable (at most 4 breakpoints; a top-level `cache_control` puts one on the last
block). The prefix order is tools, then system, then messages. A prefix shorter than the
model's minimum (settings.prompt_cache.anthropic_min_tokens) is not cached. On a request:

- `cache_read_input_tokens`: the longest breakpoint prefix that is remembered and not expired
  (the hit refreshes its TTL);
- `cache_creation_input_tokens`: from there to the last eligible breakpoint, each stretch
  charged to the TTL of the breakpoint that ends it (`cache_creation.ephemeral_5m_input_tokens`
  / `ephemeral_1h_input_tokens`), and those prefixes are remembered;
- `input_tokens`: the rest of the prompt, EXCLUDING both buckets (Anthropic's convention).

Source: Anthropic's prompt-caching page (breakpoints, 5m / 1h TTL, minimum lengths, the usage
fields). Entries live in the simulator's `PromptCache` (bounded LRU), scoped by key and model.
The rendering is prefix-stable and ignores `cache_control` itself, so marking a block does not
change the prefix it ends.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from levergate.simulator.prompt_cache import PromptCache
from levergate.simulator.responses import SimError
from levergate.simulator.tokens import count_tokens

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
MAX_BREAKPOINTS = 4


@dataclass(frozen=True, slots=True)
class Rendered:
    """The prompt as text, and after which characters a breakpoint (with its TTL) falls."""

    text: str
    breakpoints: tuple[tuple[int, str], ...]  # (end offset in `text`, ttl)


@dataclass(frozen=True, slots=True)
class CacheUsage:
    input_tokens: int
    read: int = 0
    written_5m: int = 0
    written_1h: int = 0

    @property
    def written(self) -> int:
        return self.written_5m + self.written_1h


def render(body: Mapping[str, Any]) -> Rendered:
    """Tools, system and messages as one canonical string, with the breakpoint offsets."""
    parts: list[str] = []
    breakpoints: list[tuple[int, str]] = []
    size = 0

    def add(text: str, marker: Any) -> None:
        nonlocal size
        parts.append(text)
        size += len(text)
        if marker is not None:
            breakpoints.append((size, _ttl(marker)))

    for tool in _list(body.get("tools")):
        add(_canonical(tool) + "\n", tool.get("cache_control") if isinstance(tool, dict) else None)
    system = body.get("system")
    if isinstance(system, str):
        add(f"system\n{system}\n", None)
    else:
        for block in _list(system):
            add(f"system\n{_block_text(block)}\n", _marker(block))
    for message in _list(body.get("messages")):
        content = message.get("content")
        add(f"{message.get('role')}\n", None)
        if isinstance(content, str):
            add(content + "\n", None)
        else:
            for block in _list(content):
                add(_block_text(block) + "\n", _marker(block))
    top = body.get("cache_control")
    if top is not None and size:
        breakpoints.append((size, _ttl(top)))
    if len(breakpoints) > MAX_BREAKPOINTS:
        raise SimError(
            400,
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(breakpoints)}.",
        )
    return Rendered("".join(parts), tuple(breakpoints))


def account(
    cache: PromptCache, *, scope: str, rendered: Rendered, min_tokens: int, now: float
) -> CacheUsage:
    """Read the longest live breakpoint prefix, write the eligible ones after it."""
    total = count_tokens(rendered.text)
    if not cache.settings.enabled or not rendered.breakpoints:
        return CacheUsage(input_tokens=total)
    running = hashlib.blake2b(scope.encode(), digest_size=16, person=b"lg-sim-anthr")
    eligible: list[tuple[int, bytes, str]] = []
    start = 0
    for end, ttl in rendered.breakpoints:
        running.update(rendered.text[start:end].encode())
        start = end
        tokens = count_tokens(rendered.text[:end])
        if tokens >= min_tokens:
            eligible.append((tokens, running.digest(), ttl))
    read = 0
    for tokens, digest, ttl in reversed(eligible):
        if cache.live(digest, now=now):
            read = tokens
            cache.put(digest, expiry=now + TTL_SECONDS[ttl])
            break
    written = {"5m": 0, "1h": 0}
    covered = read
    for tokens, digest, ttl in eligible:
        if tokens > covered:
            written[ttl] += tokens - covered
            covered = tokens
            cache.put(digest, expiry=now + TTL_SECONDS[ttl])
    if eligible:
        cache.stats.lookups += 1
    if read:
        cache.stats.hits += 1
        cache.stats.cached_tokens += read
    return CacheUsage(
        input_tokens=total - covered,
        read=read,
        written_5m=written["5m"],
        written_1h=written["1h"],
    )


def _ttl(marker: Any) -> str:
    if not isinstance(marker, dict) or marker.get("type") != "ephemeral":
        raise SimError(400, "cache_control: the only supported type is 'ephemeral'.")
    ttl = marker.get("ttl", "5m")
    if ttl not in TTL_SECONDS:
        raise SimError(400, f"cache_control.ttl: expected '5m' or '1h', got {ttl!r}.")
    return str(ttl)


def _marker(block: Any) -> Any:
    return block.get("cache_control") if isinstance(block, dict) else None


def _block_text(block: Any) -> str:
    if (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ):
        text: str = block["text"]
        return text
    return _canonical(block)


def _canonical(value: Any) -> str:
    if isinstance(value, dict) and "cache_control" in value:
        value = {k: v for k, v in value.items() if k != "cache_control"}
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []

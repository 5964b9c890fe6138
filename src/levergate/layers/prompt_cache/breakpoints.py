"""Automatic Anthropic `cache_control` breakpoints on the pipeline's OpenAI-shaped chat body.

The body carries Anthropic's breakpoints the way the Anthropic adapter reads them back
(`cache_control` on a tool, on a system or message content part). Candidate boundaries, in
the order Anthropic caches a prompt (tools → system → messages):

- `tools`: the end of the tool definitions;
- `system`: the end of the system prompt(s);
- `document`: the end of any long content part before the last one (a retrieved document
  followed by a question);
- `history`: the end of the whole prompt — the next turn of the conversation reads it.

Each boundary whose prefix reaches the model's minimum cacheable length gets a TTL from
`policies/prompt_cache.best_ttl` with the reuse observed for that prefix (`tools`, `system`,
`document`: the same prefix seen again; `history`: how often this alias's prompts are
continued by a next turn, and how soon), or none when the reuse does not pay for the write.
At most 4 breakpoints in all, the client's included (theirs are never moved); 1-hour entries
must come before 5-minute ones, so a 1-hour choice after a 5-minute breakpoint is downgraded.
Token counts here are estimates (4 bytes a token): they decide only whether a prefix is long
enough to be worth a breakpoint.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import xxhash

from levergate.config.prompt_cache import BreakpointsSettings
from levergate.errors import BadRequest
from levergate.policies.prompt_cache import (
    FIVE_MINUTES,
    ONE_HOUR,
    CacheRates,
    ReuseStats,
    Ttl,
    best_ttl,
)

MAX_BREAKPOINTS = 4  # Anthropic's limit per request
BYTES_PER_TOKEN = 4
_PRIORITY = {"history": 0, "system": 1, "tools": 2, "document": 3}


@dataclass(frozen=True, slots=True)
class Boundary:
    kind: str
    message: int  # index in messages (-1: the tools)
    part: int  # content part index (-1: the whole content, a string)
    tokens: int  # estimated prompt tokens up to here
    digest: int


@dataclass(frozen=True, slots=True)
class Placed:
    boundary: Boundary
    ttl: Ttl


def count_client_breakpoints(body: Mapping[str, Any]) -> int:
    count = sum(
        1 for t in body.get("tools") or () if isinstance(t, Mapping) and "cache_control" in t
    )
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            count += sum(1 for p in content if isinstance(p, Mapping) and "cache_control" in p)
    return count


def boundaries(body: Mapping[str, Any], *, document_tokens: int) -> list[Boundary]:
    """The candidate boundaries of a chat body, in prompt order."""
    found: list[Boundary] = []
    hasher = xxhash.xxh3_64()
    size = 0

    def feed(data: bytes) -> None:
        nonlocal size
        hasher.update(data)
        size += len(data)

    tools = body.get("tools")
    if tools:
        feed(orjson.dumps(tools))
        found.append(Boundary("tools", -1, -1, size // BYTES_PER_TOKEN, hasher.intdigest()))
    messages = body.get("messages") or []
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            continue
        feed(orjson.dumps(message.get("role")))
        content = message.get("content")
        system = message.get("role") in ("system", "developer")
        parts = content if isinstance(content, list) else [content]
        writable = isinstance(content, str) or (isinstance(content, list) and content)
        for j, part in enumerate(parts):
            before = size
            feed(orjson.dumps(part))
            if not writable or (isinstance(content, list) and not isinstance(part, Mapping)):
                continue
            end_of_prompt = i == last and j == len(parts) - 1
            index = j if isinstance(content, list) else -1
            long_part = (size - before) // BYTES_PER_TOKEN >= document_tokens
            if system and j == len(parts) - 1 and _next_is_not_system(messages, i):
                kind = "system"
            elif end_of_prompt:
                kind = "history"
            elif long_part and not system:
                kind = "document"
            else:
                continue
            found.append(Boundary(kind, i, index, size // BYTES_PER_TOKEN, hasher.intdigest()))
    return found


def _next_is_not_system(messages: Sequence[Any], i: int) -> bool:
    nxt = messages[i + 1] if i + 1 < len(messages) else None
    return not (isinstance(nxt, Mapping) and nxt.get("role") in ("system", "developer"))


class Continuations:
    """How often an alias's prompts are continued by a next turn, and how soon: what a
    breakpoint at the end of a prompt is worth. Remembers the last `capacity` prompts."""

    # The shares are recomputed at most this often: a walk over every remembered prompt per
    # request cost ~400 us once thousands were remembered (measured, benchmarks/prompt_cache.py).
    REFRESH_SECONDS = 1.0

    def __init__(self, *, capacity: int) -> None:
        self._capacity = capacity
        self._prompts: OrderedDict[int, list[float]] = OrderedDict()  # digest -> [at, gap]
        self._shares = (0.0, 0.0)
        self._computed: float | None = None

    def observe(self, body: Mapping[str, Any], whole: int, *, now: float) -> float | None:
        """Record this prompt; if it continues an earlier one, the gap since it (seconds)."""
        return self.observe_digests(continued(body), whole, now=now)

    def observe_digests(self, earlier: int | None, whole: int, *, now: float) -> float | None:
        """`observe` by digests (`continued`, `whole_digest`): what `levergate analyze` keeps."""
        gap = None
        if earlier is not None:
            entry = self._prompts.get(earlier)
            if entry is not None and entry[1] < 0:
                gap = entry[1] = now - entry[0]
        self._prompts[whole] = [now, -1.0]
        self._prompts.move_to_end(whole)
        while len(self._prompts) > self._capacity:
            self._prompts.popitem(last=False)
        return gap

    def shares(self, *, now: float) -> tuple[float, float]:
        """(f5, f60) over the prompts old enough to know: continued, or older than the window
        (as of at most `REFRESH_SECONDS` ago)."""
        if self._computed is None or now - self._computed >= self.REFRESH_SECONDS:
            self._shares, self._computed = self._count(now), now
        return self._shares

    def _count(self, now: float) -> tuple[float, float]:
        counted5 = counted60 = hit5 = hit60 = 0
        for at, gap in self._prompts.values():
            age = now - at
            if gap >= 0 or age >= FIVE_MINUTES:
                counted5 += 1
                hit5 += 0 <= gap < FIVE_MINUTES
            if gap >= 0 or age >= ONE_HOUR:
                counted60 += 1
                hit60 += 0 <= gap < ONE_HOUR
        return (hit5 / counted5 if counted5 else 0.0, hit60 / counted60 if counted60 else 0.0)


def continued(body: Mapping[str, Any]) -> int | None:
    """The digest of the prompt this one continues (everything before its last assistant
    message), or None when it continues none."""
    messages = body.get("messages") or []
    if not isinstance(messages, list):
        messages = list(messages)
    for k in range(len(messages) - 1, 0, -1):  # the last assistant message, if not the first
        if _role(messages[k]) == "assistant":
            return xxhash.xxh3_64_intdigest(_prefix_bytes(body, messages[:k]))
    return None


def whole_digest(body: Mapping[str, Any]) -> int:
    """The digest a later prompt's `continued` gives when it continues this one."""
    return xxhash.xxh3_64_intdigest(_prefix_bytes(body, body.get("messages") or []))


def _role(message: Any) -> object:
    return message.get("role") if isinstance(message, Mapping) else None


def _prefix_bytes(body: Mapping[str, Any], messages: Sequence[Any]) -> bytes:
    return orjson.dumps(body.get("tools")) + orjson.dumps(list(messages))


class Placer:
    """Decides and writes the breakpoints of one model alias's requests."""

    def __init__(self, settings: BreakpointsSettings) -> None:
        self._settings = settings
        self._rates = CacheRates(settings.write_5m, settings.write_1h, settings.read)
        self._reuse = ReuseStats(capacity=settings.prefixes)
        self._continued = Continuations(capacity=min(settings.prefixes, 5000))

    def place(self, body: Mapping[str, Any], *, now: float) -> tuple[dict[str, Any], list[Placed]]:
        """The body changes (`tools`, `messages`) and what was placed; ({}, []) for none."""
        taken = count_client_breakpoints(body)
        if taken > MAX_BREAKPOINTS:
            raise BadRequest(
                f"The request sets {taken} cache_control breakpoints; Anthropic allows at "
                f"most {MAX_BREAKPOINTS}.",
                code="too_many_cache_breakpoints",
            )
        found = boundaries(body, document_tokens=self._settings.document_tokens)
        if not found:
            return {}, []
        chosen = self.decide(found, continued(body), whole_digest(body), taken=taken, now=now)
        return (_write(body, chosen), chosen) if chosen else ({}, [])

    def decide(
        self, found: Sequence[Boundary], earlier: int | None, whole: int, *, taken: int,
        now: float,
    ) -> list[Placed]:  # fmt: skip
        """Which of a prompt's boundaries get a breakpoint, and their TTLs (`taken`: the
        client's own breakpoints). By digests only, so `levergate analyze` replays it from
        the request log's features (requestlog/features.py)."""
        s = self._settings
        self._continued.observe_digests(earlier, whole, now=now)
        chosen: list[Placed] = []
        for b in found:
            if b.kind == "history":
                f5, f60 = self._continued.shares(now=now)
            else:
                f5, f60 = self._reuse.shares(b.digest, now=now)
                self._reuse.observe(b.digest, now=now)
            ttl = best_ttl(f5=f5, f60=f60, rates=self._rates) if s.ttl == "auto" else Ttl(s.ttl)
            if b.tokens >= s.min_tokens and ttl is not Ttl.NONE:
                chosen.append(Placed(b, ttl))
        chosen = sorted(chosen, key=lambda p: _PRIORITY[p.boundary.kind])
        chosen = sorted(chosen[: MAX_BREAKPOINTS - taken], key=lambda p: p.boundary.tokens)
        return _long_lived_first(chosen)


def _long_lived_first(placed: list[Placed]) -> list[Placed]:
    """Anthropic wants 1-hour entries before 5-minute ones: a 1-hour choice after a 5-minute
    breakpoint becomes a 5-minute one."""
    out: list[Placed] = []
    short = False
    for p in placed:
        ttl = Ttl.FIVE_MINUTES if p.ttl is Ttl.ONE_HOUR and short else p.ttl
        short = short or ttl is Ttl.FIVE_MINUTES
        out.append(Placed(p.boundary, ttl))
    return out


def _control(ttl: Ttl) -> dict[str, str]:
    return {"type": "ephemeral", "ttl": "1h"} if ttl is Ttl.ONE_HOUR else {"type": "ephemeral"}


def _write(body: Mapping[str, Any], placed: Sequence[Placed]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    messages = list(body.get("messages") or [])
    for p in placed:
        b, control = p.boundary, _control(p.ttl)
        if b.message < 0:
            tools = list(body["tools"])
            tools[-1] = {**tools[-1], "cache_control": control}
            changes["tools"] = tools
            continue
        message = dict(messages[b.message])
        content = message.get("content")
        if isinstance(content, list):
            parts = list(content)
            parts[b.part] = {**parts[b.part], "cache_control": control}
        else:
            parts = [{"type": "text", "text": content or "", "cache_control": control}]
        message["content"] = parts
        messages[b.message] = message
        changes["messages"] = messages
    return changes

"""What the request log keeps of every request so that `levergate analyze` can replay it, bodies
logged or not: privacy-preserving features, one JSON object in the row's `replay` column.

    fp        the exact cache's fingerprint (policies/fingerprint.py) of the body under the alias
              asked for, in no namespace (the analyzer scopes it by the tenant itself), as
              XXH3-128 of the same canonical bytes (`v` 2; `v` 1 rows hold SHA-256 cut to 128
              bits, which the analyzer keeps apart): equal fingerprints are requests the exact
              cache would answer alike. Not a cache key, so nothing is served on it: a collision
              would merge two requests in an estimate, and the prompt's own XXH3 digests are in
              `blocks` and `whole` already. SHA-256 cost a logged request ~8,000 instructions
              (callgrind), XXH3 a few hundred
    det       temperature 0 or a seed: cacheable under the default `deterministic` mode
    n         the choices asked for (more than one bypasses the cache unless `cache_n`)
    blocks    the chained digests of the prompt's leading `BLOCK_BYTES`-byte blocks (the ones
              prefix affinity computes, policies/affinity.py: tools, then the messages), as
              little-endian 64-bit integers in base64: equal k-th digests mean the same first k
              blocks, which is all a provider prompt cache or an engine's KV reuse needs
    pb        the prompt's bytes (with the prompt's tokens, how many tokens a block holds)
    tools     a digest of the tools and response_format (None: neither), to tell a route's
              tool-using traffic apart
    stream    whether the answer was streamed (TTFT is measured for streams only)
    timeout_s the client's deadline (`x-levergate-timeout`), seconds after arrival
    not_after_s  `x-levergate-deadline`, seconds after arrival (what makes a request deferrable)
    defer     `x-levergate-defer` was asked
    pck       a digest of the client's own OpenAI `prompt_cache_key` (absent: none set)
    bp        the prompt's candidate Anthropic breakpoint boundaries, as the gateway's
              breakpoint layer finds them (layers/prompt_cache/breakpoints.py, at the default
              `document_tokens`): [kind, estimated tokens, digest] in prompt order, at most
              `MAX_BOUNDARIES`, for prompts of `BOUNDARY_MIN_BYTES` or more; `cont` / `whole`
              the digests that tell a conversation's next turn (`continued`, `whole_digest`);
              `cbp` the client's own breakpoints

Which lever needs what (the analyzer says what it could not evaluate and why):

    exact cache, coalescing     fp, det, n, tenant, feature, model, timings, tokens
    prompt cache: affinity,     blocks, pb, tokens (the four buckets), upstream, timings
      prompt_cache_key          blocks (the first names the prefix OpenAI routes by), tenant, pck
      automatic breakpoints     bp, cont, whole, cbp, pb, tokens
    deferral to batch           not_after_s / defer, priority, tokens
    semantic cache, routing,    the prompt's text: only with bodies logged (request_body)
      trimming, cascade

Computed once per logged request, on the event loop after the request finished, from its parsed
body (requestlog/writer.py `settle`, for 32 held records together: 1.5-2 us a small prompt
there against 4.0 us one at a time, timed in place; until h/loginline the body's part waited
for the writer's batch, its bytes held and parsed again there): 9 us for a small prompt,
~200 us for a 48 KB one (timeit, on the shared 2-core machine: the fingerprint's serialisation and
SHA-256 ~55 us, the prompt's serialisation ~15 us and its XXH3 blocks ~30 us, the rest serialising
the features); the breakpoint boundaries and continuation digests add ~6 us to a small chat prompt
and ~45 us to a 48 KB one (timeit at load average ~9, so an upper bound); the blocks are bounded by
`MAX_BLOCKS` whatever the prompt's size. Counted (callgrind, a one-message chat prompt): 80k
instructions a record with SHA-256 and the messages serialised twice (for the prompt's bytes and
for `whole`), 47k with XXH3 and once, 34k with the canonical body's loop trimmed
(policies/fingerprint.py: ~21k of it there, 16k after) and the breakpoint features not looked for
in a short one-message prompt (the same bytes out); `replay_text` 27.0k -> 23.6-24.1k (two runs)
with `_body_features`' short way for the common chat body and the canonical bytes sorted without
`OPT_NON_STR_KEYS` (results/logfeat.md); 23.5k -> 20.9k (h/logfeat2, results/logfeat2.md) with
that short way in `replay_text` itself (no tuple, no frame), the text's constant pieces
precomputed and one set test for a plain field in the canonical body's loop. The rest is near
what Python costs for it (pieces counted alone): the canonical body's loop and its sorted output
~8.3k (a loop of `body.items()` doing nothing ~1.6k for three fields, orjson's sorted output of
the body ~3k), the text's f-string ~2.6k (a 20-digit `whole` ~0.7k; `%`-formatting it was ~1.4k
more, a dict and orjson ~3k more), the messages serialised ~1.9k (orjson's fixed cost mostly)
and digested ~0.9k, the fingerprint ~2.1k (`head_bytes`' `lru_cache` ~1k of it), the test for
`_UNCOMMON` ~0.9k (five `in` tests ~1.1k). The messages are serialised twice for a reason: the
canonical body sorts their keys (the exact cache's key), the prompt's bytes keep the client's
order (the breakpoint layer's `whole_digest`), so neither serialisation serves the other. Of the
layers' work only the exact cache's canonical body bytes are
reused, when it computed them for this very body (`replay_of`): its key is in the tenant's
namespace under the resolved model (and off by default), affinity's and the prompt cache's digests
are of other block sizes (settings; 2 KB), and the prompt cache's of the body as sent.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson
from xxhash import xxh3_64_intdigest, xxh3_128_hexdigest

from levergate.config.prompt_cache import BreakpointsSettings
from levergate.layers.prompt_cache.breakpoints import (
    boundaries,
    continued,
    count_client_breakpoints,
)
from levergate.policies.affinity import block_digests, prompt_bytes
from levergate.policies.fingerprint import canonical_body_bytes, head_bytes

if TYPE_CHECKING:
    from levergate.core.call import Call

__all__ = [
    "BLOCK_BYTES",
    "MAX_BLOCKS",
    "MAX_BOUNDARIES",
    "REPLAY_VERSION",
    "controls_of",
    "decode_blocks",
    "encode_blocks",
    "features",
    "features_of_body",
    "replay_of",
    "replay_text",
]  # fmt: skip

# 2: `fp` is XXH3-128 (1: SHA-256 cut to 128 bits; the analyzer keeps the two apart).
REPLAY_VERSION = 2
# 1 KB blocks (~256 tokens): a provider caches in 128-token steps past 1,024 tokens, so a
# prediction is off by at most one block's tokens per request; 128 of them cover a 128 KB
# prompt in ~1.4 KB of text per row.
BLOCK_BYTES = 1024
MAX_BLOCKS = 128
MAX_BOUNDARIES = 16
DOCUMENT_TOKENS = BreakpointsSettings().document_tokens
# Boundaries are kept for prompts of at least 4 KB: ~1,024 tokens at the layer's 4 bytes a
# token, Anthropic's smallest cacheable prefix (a shorter prompt has no boundary to cache).
BOUNDARY_MIN_BYTES = 4 * 1024
_NULL = orjson.dumps(None)


def encode_blocks(blocks: Sequence[int]) -> str:
    return base64.b64encode(struct.pack(f"<{len(blocks)}Q", *blocks)).decode("ascii")


def decode_blocks(text: str) -> tuple[int, ...]:
    """The digests `encode_blocks` wrote; () for anything else (a hand-edited export)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return ()
    if len(raw) % 8 or len(raw) > MAX_BLOCKS * 8 * 64:
        return ()
    return struct.unpack(f"<{len(raw) // 8}Q", raw)


def features_of_body(
    body: Mapping[str, Any], *, kind: str, model: str, canonical: bytes | None = None
) -> dict[str, Any]:
    """The body's part of the features (no controls): also what the analyzer computes for an
    OpenAI request file. `canonical`: the body's `canonical_body_bytes`, when known (a call's,
    which the exact cache computed already: `replay_of`)."""
    return _as_dict(_any_body_features(body, kind, model, canonical))


def _as_dict(values: _Features) -> dict[str, Any]:
    """`_any_body_features`' values as the features' dict."""
    fp, det, n, blocks, pb, tools, stream, whole, more = values
    found: dict[str, Any] = {"v": REPLAY_VERSION, "fp": fp, "det": det, "n": n,
                             "blocks": blocks, "pb": pb, "tools": tools,
                             "stream": stream}  # fmt: skip
    if whole is not None:
        found["whole"] = whole
    if more:
        found.update(more)
    return found


# `_any_body_features`' values: fp, det, n, blocks, pb, tools, stream, whole, and the rest
# (`pck`, the breakpoint features: None when none).
_Features = tuple[str, bool, int, str, int, str | None, bool, int | None, dict[str, Any] | None]


# The fields that change a feature from the common chat body's (`tools` and `whole`: tools,
# response_format; `n`; `det`: seed; `pck`: prompt_cache_key): a body with none of them takes
# `replay_text`'s short way, one test for all five.
_UNCOMMON = frozenset(("tools", "response_format", "n", "seed", "prompt_cache_key"))
# The common record's text in the pieces that do not vary with the request, in `_as_dict`'s
# order (`replay_text`): the version, det and n, tools and stream.
_TEXT_HEAD = f'{{"v":{REPLAY_VERSION},"fp":"'
_TEXT_DET = ('","det":false,"n":1,"blocks":"', '","det":true,"n":1,"blocks":"')
_TEXT_STREAM = (',"tools":null,"stream":false,"whole":', ',"tools":null,"stream":true,"whole":')


def _any_body_features(
    body: Mapping[str, Any], kind: str, model: str, canonical: bytes | None
) -> _Features:
    """The body's features of any body, each field read and tested (`replay_text`'s short way
    for the common chat body gives the same values)."""
    get = body.get
    messages, tools = get("messages"), get("tools")
    whole: int | None = None
    turns = 0
    if isinstance(messages, list):
        turns = len(messages)
        prompt = orjson.dumps(messages)
        if tools is None:  # most prompts: no call
            whole = xxh3_64_intdigest(_NULL + prompt)
        else:
            head = orjson.dumps(tools)
            whole = xxh3_64_intdigest(head + prompt)
            if tools:
                prompt = head + prompt
    else:
        prompt = prompt_bytes(body)
    if canonical is None:
        canonical = canonical_body_bytes(body)
    pb = len(prompt)
    tools_digest = None
    if tools or get("response_format"):
        tools_digest = _digest({k: body[k] for k in ("tools", "response_format") if get(k)})
    seed, n = get("seed"), get("n")
    more = None
    key = get("prompt_cache_key")
    if key is not None and isinstance(key, str):
        more = {"pck": _digest(key)}
    if whole is not None and (turns > 1 or pb >= BOUNDARY_MIN_BYTES):  # one message: no other
        more = {**(more or {}), **_breakpoint_features(body, long=pb >= BOUNDARY_MIN_BYTES)}
    return (
        xxh3_128_hexdigest(head_bytes(kind, model, "") + canonical),
        get("temperature") == 0 or (isinstance(seed, int) and not isinstance(seed, bool)),
        n if isinstance(n, int) and not isinstance(n, bool) else 1,
        encode_blocks(block_digests(prompt, block_bytes=BLOCK_BYTES, max_blocks=MAX_BLOCKS))
        if pb >= BLOCK_BYTES else "",
        pb, tools_digest, get("stream") is True, whole, more,
    )  # fmt: skip


def _breakpoint_features(body: Mapping[str, Any], *, long: bool) -> dict[str, Any]:
    """What the breakpoint layer decides by besides `whole` (`bp`, `cont`, `cbp`; module
    docstring): the continuation digest of every chat prompt (the layer's shares count them
    all), the boundaries only of a `long` one (a shorter has none a provider would cache)."""
    found: dict[str, Any] = {}
    earlier = continued(body)
    if earlier is not None:
        found["cont"] = earlier
    cut = boundaries(body, document_tokens=DOCUMENT_TOKENS) if long else []
    if not cut:
        return found
    if len(cut) > MAX_BOUNDARIES:  # the documents past the first ones are left out
        kept = [b for b in cut if b.kind != "document"]
        kept += [b for b in cut if b.kind == "document"][: MAX_BOUNDARIES - len(kept)]
        cut = sorted(kept, key=lambda b: b.tokens)
    found["bp"] = [[b.kind, b.tokens, b.digest] for b in cut]
    taken = count_client_breakpoints(body)
    if taken:
        found["cbp"] = taken
    return found


def _digest(value: Any) -> str | None:
    try:
        return hashlib.blake2b(orjson.dumps(value), digest_size=8).hexdigest()
    except TypeError:  # not JSON (a library caller's object): no digest
        return None


def controls_of(call: Call, *, now: float, wall: float, total: float) -> dict[str, Any]:
    """The features of a finished `call`'s deadlines, read when it finishes (`now`: the
    gateway's clock, `wall`: epoch seconds, both at the finish; `total`: its seconds): a few
    attribute reads, where the clocks are."""
    found: dict[str, Any] = {}
    controls = call.ctx.controls
    if controls.deadline is not None:
        found["timeout_s"] = round(controls.deadline - now + total, 3)
    ask = controls.run_async
    if ask is not None:
        if ask.not_after is not None:
            found["not_after_s"] = round(ask.not_after - wall + total, 3)
        if ask.defer:
            found["defer"] = True
    return found


def replay_text(
    body: Mapping[str, Any], *, kind: str, model: str, controls: Mapping[str, Any],
    canonical: bytes | None = None,
) -> str | None:  # fmt: skip
    """The replay features as the row's JSON text: the body's, then its `controls_of`. None for
    a body that cannot be serialised (a library caller's objects): not replayable.

    A chat body with none of `_UNCOMMON`'s fields (most) has its values computed here, where
    `_any_body_features` reads each of those fields and tests it: the same values. A chat
    prompt's messages are serialised once, for the prompt's bytes and the breakpoint layer's
    whole-prompt digest alike (`whole_digest`'s bytes); a prompt of one message, short, has
    no breakpoint features to look for (it continues no other). Such a record with no deadline
    (the common one) is written as text directly, from constant pieces and the values, the
    bytes orjson writes for `features_of_body`'s dict (a property test compares them on
    bodies of every shape): the dict of nine keys and its serialisation counted 3.1k and 3.4k
    instructions a record (callgrind). Counted (callgrind, `inprocess_cpu.py`'s body): this
    short way ~2.8k fewer than the general reading (h/logfeat); in `replay_text` itself rather
    than returning a tuple to it, with the text's constant pieces precomputed (the version and
    the choices of det and stream), 23.7k -> 21.7k a record (h/logfeat2)."""
    messages = body.get("messages")
    if type(messages) is not list or not _UNCOMMON.isdisjoint(body):
        return _text_of(body, kind, model, controls, canonical)
    try:
        prompt = orjson.dumps(messages)
        if canonical is None:
            canonical = canonical_body_bytes(body)
        pb = len(prompt)
        more = None
        if len(messages) > 1 or pb >= BOUNDARY_MIN_BYTES:  # one message: no other
            more = _breakpoint_features(body, long=pb >= BOUNDARY_MIN_BYTES)
    except TypeError:
        return None
    fp = xxh3_128_hexdigest(head_bytes(kind, model, "") + canonical)
    det = body.get("temperature") == 0
    stream = body.get("stream") is True
    blocks = encode_blocks(block_digests(prompt, block_bytes=BLOCK_BYTES, max_blocks=MAX_BLOCKS)
                           ) if pb >= BLOCK_BYTES else ""  # fmt: skip
    whole = xxh3_64_intdigest(_NULL + prompt)
    if more is None and not controls:  # fp: hex, blocks: base64; nothing to escape
        return (
            f'{_TEXT_HEAD}{fp}{_TEXT_DET[1 if det else 0]}{blocks}","pb":{pb}'
            f"{_TEXT_STREAM[1 if stream else 0]}{whole}}}"
        )
    found = _as_dict((fp, det or False, 1, blocks, pb, None, stream, whole, more))
    if controls:
        found.update(controls)
    return orjson.dumps(found).decode()


def _text_of(
    body: Mapping[str, Any], kind: str, model: str, controls: Mapping[str, Any],
    canonical: bytes | None,
) -> str | None:  # fmt: skip
    """`replay_text` of any body, from `_any_body_features`' dict."""
    try:
        found = _as_dict(_any_body_features(body, kind, model, canonical))
    except TypeError:
        return None
    if controls:
        found.update(controls)
    return orjson.dumps(found).decode()


def replay_of(call: Call, controls: Mapping[str, Any]) -> str | None:
    """`replay_text` of a finished `call` with its deadlines' features (`controls_of`), from
    the canonical bytes of its body when the exact cache computed them for this very body
    (`Trace.canonical`, `Call.canonical_bytes`); else computed here (not kept: no one else
    reads them after the request)."""
    known = call.ctx.trace.canonical
    canonical = known[1] if known is not None and known[0] is call.body else None
    return replay_text(call.body, kind=call.kind, model=call.model, controls=controls,
                       canonical=canonical)  # fmt: skip


def features(call: Call, *, now: float, wall: float, total: float) -> str | None:
    """The replay features of a finished `call` as the row's JSON text (`controls_of`'s
    arguments); None when it is not replayable."""
    return replay_of(call, controls_of(call, now=now, wall=wall, total=total))

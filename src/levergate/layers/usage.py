"""CountUsage: a chat or completions stream whose upstream reported no usage ends with a usage
chunk counted here, so every protocol's client still reads its tokens.

The gateway asks every chat and completions stream for its usage chunk
(`stream_options.include_usage`), but some servers send none (llama.cpp's Python server ignores
the option). Without it an Anthropic stream would end with 0 input and 0 output tokens, a
Responses stream with `usage: null`, and a chat client that asked for the usage chunk would get
none, while the same request unstreamed reports its usage. So when a stream has ended cleanly
and its last event carried no usage (where every server that reports it puts it), one chunk is
added: OpenAI's usage-only chunk (`choices: []`) with the prompt counted as Trim counts it
(OpenAI's framing per message, `protocol/openai/prompt_tokens.py`) and the output's text counted,
both with the alias's tokenizer (`layers.shared.alias_tokenizer`: Trim's setting, the catalog's,
tiktoken's by name, else the text's length). The block says it was filled here: `"levergate_source":
"counted"` (a real tokenizer) or `"estimated"` (the length estimate) — `core.tokenizer.
USAGE_SOURCE`, which the Anthropic and Responses translations carry into their own usage and the
ledger reads as counted, not reported.

Where in the stack: per model, above Retry (whichever attempt answered, its stream is counted
once) and under Trim and the prompt-cache optimizer (the prompt is counted as it was sent); under
the caches and the Responses bridge, so a cached stream replays the counted usage and the bridge
translates it. A stream pays a list append per event (`Ended.events`); the counting, only
for a stream that needs it, runs in a worker thread (a tokenizer may load on first use). An
alias served only by the embedded engine or Anthropic upstreams, which always report usage, has
no CountUsage at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from levergate.config import (
    AnthropicUpstreamSettings,
    AnyUpstream,
    LocalUpstreamSettings,
    ModelSettings,
    TrimSettings,
)
from levergate.core.call import Call
from levergate.core.reply import Completed, Ended, Event, Reply, Watcher
from levergate.core.service import Answer, Layer, Service
from levergate.core.tokenizer import USAGE_SOURCE, LengthEstimate, TextTokenizer
from levergate.layers.shared import Shared, alias_tokenizer
from levergate.protocol.openai.body import generated_text, is_token_ids
from levergate.protocol.openai.prompt_tokens import Counter, func_init_for

log = logging.getLogger("levergate.usage")

_REPORTING = (LocalUpstreamSettings, AnthropicUpstreamSettings)
_OBJECT = {"chat": "chat.completion.chunk", "completion": "text_completion"}


class CountUsage:
    @classmethod
    def layer(
        cls,
        trim: TrimSettings,
        *,
        model: ModelSettings,
        upstreams: Sequence[AnyUpstream],
        shared: Shared,
    ) -> Layer | None:
        """None for an alias served only by upstreams that always report a stream's usage (the
        embedded engine, Anthropic's Messages API): its streams pay nothing."""
        kinds = {u.name: u for u in upstreams}
        if all(isinstance(kinds.get(t.upstream), _REPORTING) for t in model.endpoints):
            return None
        rule = trim.models.get(model.name)
        return partial(cls, model=model, wanted=rule.tokenizer if rule else "auto",
                       shared=shared, image_tokens=trim.image_tokens)  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        model: ModelSettings,
        wanted: str,
        shared: Shared,
        image_tokens: int,
    ) -> None:
        self._inner = inner
        self._model = model
        self._wanted = wanted
        self._shared = shared
        self._image_tokens = image_tokens

    def __call__(self, call: Call) -> Answer:
        # Only a stream is watched (an upstream streams only a call that asks to: `call.stream`):
        # any other call's answer passes through, with no coroutine of this layer's.
        if call.kind not in _OBJECT or not call.stream:
            return self._inner(call)
        return self._watched(call)

    async def _watched(self, call: Call) -> Reply:
        reply = await self._inner(call)
        if isinstance(reply, Completed):
            return reply
        return reply.watch(_Counting(self, call))

    def usage_chunk(self, call: Call, events: list[Event]) -> dict[str, Any]:
        """OpenAI's usage-only chunk for a stream of `call` that reported no usage."""
        tokenizer = self._tokenizer(call.model)
        if call.kind == "chat":
            counter = Counter(tokenizer, func_init=func_init_for(getattr(tokenizer, "name", None)),
                              image_tokens=self._image_tokens)  # fmt: skip
            counted = counter.prompt(call.body)
            prompt, how = counted.total, counted.how
        else:
            prompt, how = _completion_prompt(call.body.get("prompt"), tokenizer), tokenizer.how
        output = tokenizer.tokens("".join(generated_text(e.json()) for e in events))
        last = events[-1].json()
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
            USAGE_SOURCE: how.value,
        }
        return {
            "id": last.get("id", ""),
            "object": _OBJECT[call.kind],
            "created": last.get("created", 0),
            "model": last.get("model", call.model),
            "choices": [],
            "usage": usage,
        }

    def _tokenizer(self, model: str) -> TextTokenizer:
        tokenizers = self._shared.tokenizers
        try:
            found = alias_tokenizer(self._model, wanted=self._wanted, tokenizers=tokenizers,
                                    catalog=self._shared.catalog)  # fmt: skip
            return found or tokenizers.resolve("auto", model=model)
        except (ImportError, OSError, ValueError) as exc:  # flagged as the estimate it is
            log.warning("usage of %s estimated: its tokenizer cannot load: %s", model, exc)
            return LengthEstimate()


class _Counting(Watcher):
    """A stream's events kept; the usage chunk added after a clean end that reported none."""

    __slots__ = ("_call", "_layer")
    keeps = True

    def __init__(self, layer: CountUsage, call: Call) -> None:
        self._layer, self._call = layer, call

    async def end(self, ended: Ended) -> Event | None:
        seen = ended.events
        if ended.error is not None or not seen or seen[-1].usage() is not None:
            return None
        return Event.of(await asyncio.to_thread(self._layer.usage_chunk, self._call, seen))


def _completion_prompt(prompt: Any, tokenizer: TextTokenizer) -> int:
    """A completions prompt's tokens: a string, strings, or token ids (counted as they are)."""
    if isinstance(prompt, str):
        return tokenizer.tokens(prompt)
    if is_token_ids(prompt):
        return len(prompt)
    if isinstance(prompt, list):
        return sum(_completion_prompt(p, tokenizer) for p in prompt)
    return 0

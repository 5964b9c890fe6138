"""Trim: fit a chat request to its model's window before it is sent.

PER MODEL, under the prompt-cache optimizer and above Retry: the window, the output limit and
the tokenizer are the alias's own, and a retry or another endpoint of the same alias resends the
same trimmed request instead of trimming again. What it does, in order:

1. the output budget: `default_max_tokens` when the request names none, the cap (or a 400)
   above `max_tokens` or the model's `max_output`;
2. oversized tool results and documents are cut with a visible marker (edit.py);
3. the prompt is counted (protocol/openai/prompt_tokens.py) and windowed to the budget — the rule's
   `budget`, else the context window minus the output budget — by `policies.trim.plan`: system
   prompts and the last user turn always, then the newest turns that fit, tool calls never
   split from their results; optionally a cheap alias summarises what was dropped (summary.py);
4. `trace.trimmed_input` records the prompt tokens not sent (the ledger prices the saving) and
   `trace.trimmed_how` whether they were counted or estimated.

Completions (`prompt`) get the output budget only; embeddings pass untouched. Streaming makes
no difference: only the request is rewritten, nothing of the answer is buffered.

When the pinned messages alone do not fit, the answer is a 400 with OpenAI's
`context_length_exceeded` code. Counting costs nothing when it cannot matter: a prompt whose
JSON bytes (plus framing) are within the budget cannot be over it, because no tokenizer here
makes more tokens than UTF-8 bytes, so such a request is passed on without tokenizing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from levergate.config import ModelSettings, TrimRuleSettings, TrimSettings
from levergate.core.call import Call
from levergate.core.reply import Reply
from levergate.core.service import Layer, Service
from levergate.core.tokenizer import TextTokenizer, TokenSource
from levergate.errors import BadRequest, ConfigError
from levergate.layers.shared import alias_tokenizer
from levergate.layers.trim.edit import output_budget, truncate
from levergate.layers.trim.summary import PREFIX, summarise
from levergate.policies.trim import PINNED_ROLES, TrimPlan, Turn, plan
from levergate.protocol.openai.prompt_tokens import Counter, PromptCount, func_init_for
from levergate.protocol.tokens import Tokenizers

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

# Framing slack of the byte bound: per message, per tool, and once (priming, the tool list).
_BOUND_PER_MESSAGE = 4
_BOUND_PER_TOOL = 10
_BOUND_ONCE = 16


class Trim:
    @classmethod
    def layer(
        cls,
        settings: TrimSettings,
        *,
        model: ModelSettings,
        shared: Shared,
        summarise_with: Service | None = None,
    ) -> Layer | None:
        """None for an alias without a `trim.models` entry: its stack pays nothing."""
        rule = settings.models.get(model.name)
        if rule is None:
            return None
        # What the rule leaves unset comes from the model catalog: the window, the output cap,
        # and the tokenizer. "*" on "auto" resolves by each request's name; the rest now.
        spec = shared.catalog.spec(model.name)
        try:
            tokenizer = alias_tokenizer(model, wanted=rule.tokenizer, catalog=shared.catalog,
                                        tokenizers=shared.tokenizers)  # fmt: skip
        except (ImportError, OSError, ValueError) as exc:
            raise ConfigError(f"trim.models.{model.name}: {exc}") from exc
        return partial(
            cls, rule=rule, settings=settings, window=rule.context_window or spec.context_window,
            max_output=rule.max_output or spec.max_output, tokenizer=tokenizer,
            tokenizers=shared.tokenizers, summarise_with=summarise_with,
        )  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        rule: TrimRuleSettings,
        settings: TrimSettings,
        window: int | None,
        max_output: int | None,
        tokenizer: TextTokenizer | None,
        tokenizers: Tokenizers,
        summarise_with: Service | None = None,
    ) -> None:
        self._inner = inner
        self._rule = rule
        self._settings = settings
        self._window = window
        self._max_output = max_output
        self._tokenizer = tokenizer
        self._tokenizers = tokenizers
        self._summarise = summarise_with if rule.summary_model else None
        self._counts = bool(window or rule.wants_counts())

    async def __call__(self, call: Call) -> Reply:
        if call.kind == "embedding":
            return await self._inner(call)
        output = output_budget(call, rule=self._rule, max_output=self._max_output)
        call = output.call
        if call.kind == "chat" and self._counts:
            call = await self._fit(call, self._budget(output.tokens))
        return await self._inner(call)

    def _budget(self, output: int) -> int | None:
        budgets = [b for b in (self._rule.budget,) if b]
        if self._window:
            budgets.append(max(0, self._window - output))
        return min(budgets) if budgets else None

    async def _fit(self, call: Call, budget: int | None) -> Call:
        messages: list[Any] = call.body["messages"]
        tools = call.body.get("tools")
        cuts = self._rule.tool_result_tokens or self._rule.document_tokens
        if not cuts and (
            budget is None or _byte_bound(call, messages, tools, self._settings) <= budget
        ):
            return call
        if _chars(call) > self._settings.thread_chars:
            return await asyncio.to_thread(self._rewrite_sync, call, budget)
        return await self._rewrite(call, budget)

    def _rewrite_sync(self, call: Call, budget: int | None) -> Call:
        """The counting part, for a worker thread (no summary: that needs the event loop)."""
        return self._apply(call, self._plan(call, budget, summary=False))

    async def _rewrite(self, call: Call, budget: int | None) -> Call:
        fitted = self._plan(call, budget, summary=True)
        trim = fitted.trim
        if trim is not None and trim.dropped and self._summarise is not None:
            dropped = [fitted.messages[i] for i in trim.dropped]
            text = await summarise(
                call, dropped, service=self._summarise, alias=str(self._rule.summary_model),
                max_tokens=self._rule.summary_tokens,
                input_chars=self._rule.summary_input_tokens * 4,
            )  # fmt: skip
            if text is not None:
                summary = {"role": "system", "content": PREFIX + text}
                messages = _with_summary(fitted.messages, trim, summary)
                after = trim.tokens + fitted.counter.message(summary)[0]
                if budget is None or after <= budget:  # else the summary ran long: without it
                    return _finish(call, fitted.before, messages, after)
                call.ctx.trace.note(layer="trim", text="summary left out: over the budget")
        return self._apply(call, fitted)

    def _plan(self, call: Call, budget: int | None, *, summary: bool) -> _Fitted:
        counter = self._counter(call.model)
        original: list[Any] = call.body["messages"]
        before = counter.prompt(call.body)
        cuts = truncate(
            original, tokenizer=counter.tokenizer, tool_tokens=self._rule.tool_result_tokens,
            document_tokens=self._rule.document_tokens, marker=self._settings.marker,
        )  # fmt: skip
        messages, count = original, before
        if cuts.cut:  # recount only the messages that were cut
            messages = cuts.messages
            shares = tuple(
                n if new is old else counter.message(new)[0]
                for new, old, n in zip(messages, original, before.messages, strict=True)
            )
            count = PromptCount(shares, before.fixed, before.how)
        if budget is None or count.total <= budget:
            return _Fitted(before, count, messages, None, counter)
        roles = [m.get("role", "") if isinstance(m, dict) else "" for m in messages]
        turns = [Turn(r, t) for r, t in zip(roles, count.messages, strict=True)]
        start = self._rule.start_with_user
        trim = plan(turns, budget=budget, fixed=count.fixed, start_with_user=start)
        if trim.dropped and summary and self._summarise is not None:
            reserve = self._rule.summary_tokens + 8  # the summary's message and framing
            trim = plan(turns, budget=max(0, budget - reserve), fixed=count.fixed,
                        start_with_user=start)  # fmt: skip
            if not trim.fits:  # no room for a summary: plain trimming
                trim = plan(turns, budget=budget, fixed=count.fixed, start_with_user=start)
        if not trim.fits:
            raise _too_long(budget, trim.tokens, count)
        return _Fitted(before, count, messages, trim, counter)

    def _apply(self, call: Call, fitted: _Fitted) -> Call:
        trim, messages = fitted.trim, fitted.messages
        if trim is not None and trim.dropped:
            return _finish(call, fitted.before, [messages[i] for i in trim.kept], trim.tokens)
        if messages is call.body["messages"]:
            return call
        return _finish(call, fitted.before, messages, fitted.count.total)

    def _counter(self, model: str) -> Counter:
        tokenizer = self._tokenizer or self._tokenizers.resolve(self._rule.tokenizer, model=model)
        return Counter(
            tokenizer,
            func_init=func_init_for(getattr(tokenizer, "name", None)),
            image_tokens=self._settings.image_tokens,
        )


@dataclass(frozen=True, slots=True)
class _Fitted:
    before: PromptCount  # the request as it came
    count: PromptCount  # after the cuts
    messages: list[Any]  # after the cuts
    trim: TrimPlan | None  # None: it fits
    counter: Counter


def _finish(call: Call, before: PromptCount, messages: list[Any], after: int) -> Call:
    trace = call.ctx.trace
    trace.trimmed_input += max(0, before.total - after)
    trace.trimmed_how = before.how
    dropped = max(0, len(call.body["messages"]) - len(messages))
    trace.note(layer="trim", text=f"{before.total} -> {after} prompt tokens, "
               f"{dropped} messages fewer")  # fmt: skip
    return call.with_body(messages=messages)


def _with_summary(messages: Sequence[Any], trim: TrimPlan, summary: dict[str, str]) -> list[Any]:
    """The kept messages with the summary after the leading system prompts."""
    kept = [messages[i] for i in trim.kept]
    at = 0
    while at < len(kept) and isinstance(kept[at], dict) and kept[at].get("role") in PINNED_ROLES:
        at += 1
    return [*kept[:at], summary, *kept[at:]]


def _byte_bound(call: Call, messages: Sequence[Any], tools: Any, settings: TrimSettings) -> int:
    """An upper bound of the prompt's tokens from its JSON size (see the module docstring)."""
    raw = call.raw if call.raw is not None else orjson.dumps(call.body)
    images = raw.count(b"image_url")
    tool_count = len(tools) if isinstance(tools, list) else 0
    return (
        len(raw) + _BOUND_PER_MESSAGE * len(messages) + _BOUND_PER_TOOL * tool_count
        + _BOUND_ONCE + images * settings.image_tokens
    )  # fmt: skip


def _chars(call: Call) -> int:
    return len(call.raw) if call.raw is not None else len(orjson.dumps(call.body["messages"]))


def _too_long(budget: int, tokens: int, count: PromptCount) -> BadRequest:
    estimate = " (estimated)" if count.how is TokenSource.ESTIMATED else ""
    return BadRequest(
        f"This model's maximum prompt length is {budget} tokens. However, your messages "
        f"resulted in {tokens} tokens{estimate} even after dropping older turns: the system "
        "prompt and the last user message alone do not fit. Please reduce the length of the "
        "messages.",
        param="messages",
        code="context_length_exceeded",
    )

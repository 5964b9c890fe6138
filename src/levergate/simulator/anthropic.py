"""The simulator speaking Anthropic: `POST /v1/messages` (whole and streamed) and
`POST /v1/messages/count_tokens`.

Same order of checks as the OpenAI routes (simulator.py), in Anthropic's conventions:

    x-api-key, anthropic-version -> parse + validate -> forced fault | concurrency -> RPM/TPM
          -> drawn fault -> prompt cache (explicit breakpoints) -> latency plan -> words -> reply

Every refusal is Anthropic's error envelope with Anthropic's status (a 503 fault answers 529
`overloaded_error`, which Anthropic sends instead), and rate limits travel as
`anthropic-ratelimit-*` with RFC 3339 resets plus `retry-after`. Every answer carries a
`request-id`. Output is the simulator's deterministic words; the answer's natural length is
`x-sim-output-tokens` or `max_tokens_default`, so it ends with `end_turn` when that fits under
`max_tokens` (which Anthropic requires) and with `max_tokens` otherwise.

Structured outputs: with `output_config.format` (`json_schema`) the answer is one text block
holding a JSON value that fits the schema (`tokens.schema_value`).

Tool use: with `tools` given and `tool_choice` `any` or `tool` (named), or `auto` when the last
user message names a tool, the answer is a short text block then a `tool_use` block whose
`input` follows the tool's `input_schema` (stop reason `tool_use`); a turn that sends
`tool_result`s back gets a text answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from levergate.simulator import anthropic_wire as wire
from levergate.simulator import generate, tokens
from levergate.simulator.anthropic_cache import account, render
from levergate.simulator.faults import FAULT_HEADER, Fault
from levergate.simulator.latency import ZERO, plan_timing
from levergate.simulator.responses import Reply, SimError
from levergate.simulator.stats import key_label

if TYPE_CHECKING:
    from levergate.simulator.simulator import Simulator

MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
PATHS = frozenset({MESSAGES, COUNT_TOKENS})
API_KEY_HEADER = "x-api-key"
VERSION_HEADER = "anthropic-version"
_ROLES = frozenset({"user", "assistant"})


def handle(sim: Simulator, *, path: str, headers: Mapping[str, str], raw: bytes) -> Reply:
    """Answer one Anthropic request; every refusal in Anthropic's error shape."""
    request_id = f"req_{sim._id_prefix}{next(sim._ids):010x}"
    try:
        reply = _count(sim, headers, raw) if path == COUNT_TOKENS else _messages(sim, headers, raw)
    except SimError as exc:
        status = 529 if exc.status == 503 else exc.status
        body = wire.error_body(status, exc.message, request_id=request_id)
        extra = wire.ratelimit_headers(exc.headers, wall=sim._wall())
        allow = tuple(h for h in exc.headers if h[0] == "allow")
        reply = Reply(status=status, body=body, headers=extra + allow)
    reply.headers = (*reply.headers, ("request-id", request_id))
    return reply


def _authenticated(sim: Simulator, headers: Mapping[str, str], raw: bytes) -> tuple[str, Any]:
    # `x-api-key`, or `Authorization: Bearer` (what the `anthropic` SDK 2.x sends its key as).
    key = headers.get(API_KEY_HEADER, "").strip() or generate.bearer_key(
        headers.get("authorization")
    )
    if not key:
        raise SimError(401, "x-api-key header is required")
    if not headers.get(VERSION_HEADER):
        raise SimError(400, "anthropic-version: header is required")
    sim.stats.keys[key_label(key)] += 1
    return key, generate.parse_json(raw)


def _count(sim: Simulator, headers: Mapping[str, str], raw: bytes) -> Reply:
    _, body = _authenticated(sim, headers, raw)
    _check(body, need_max_tokens=False, settings_max=sim.settings.max_output_tokens)
    return Reply(status=200, body=wire.count_body(tokens.count_tokens(render(body).text)))


def _check(body: Any, *, need_max_tokens: bool, settings_max: int) -> dict[str, Any]:
    if type(body) is not dict:
        raise SimError(400, "The request body must be a JSON object.")
    if type(body.get("model")) is not str:
        raise SimError(400, "model: Field required (a string)")
    if need_max_tokens:
        generate.check_int("max_tokens", body.get("max_tokens"), high=settings_max)
    messages = body.get("messages")
    if type(messages) is not list or not messages:
        raise SimError(400, "messages: at least one message is required")
    for index, message in enumerate(messages):
        if type(message) is not dict or message.get("role") not in _ROLES:
            raise SimError(400, f"messages.{index}.role: Input should be 'user' or 'assistant'")
        if type(message.get("content")) not in (str, list):
            raise SimError(400, f"messages.{index}.content: Field required")
    stream = body.get("stream")
    if stream is not None and type(stream) is not bool:
        raise SimError(400, "stream: Input should be a valid boolean")
    return body


def _messages(sim: Simulator, headers: Mapping[str, str], raw: bytes) -> Reply:
    s = sim.settings
    key, parsed = _authenticated(sim, headers, raw)
    body = _check(parsed, need_max_tokens=True, settings_max=s.max_output_tokens)
    forced = generate.forced_fault(headers[FAULT_HEADER]) if FAULT_HEADER in headers else None
    rendered = render(body)
    prompt_tokens = tokens.count_tokens(rendered.text)
    cap: int = body["max_tokens"]
    natural = _natural(headers.get(generate.OUTPUT_TOKENS_HEADER), s.max_tokens_default)
    count, stop = (natural, "end_turn") if natural <= cap else (cap, "max_tokens")
    now = sim.clock.now()
    model: str = body["model"]
    fault, limit_headers = sim._admit(key, model, prompt_tokens + cap, forced, now)
    limit_headers = wire.ratelimit_headers(limit_headers, wall=sim._wall())
    if fault is Fault.HANG:
        return Reply(status=200, hang=True, holds_slot=True)
    usage = account(
        sim._anthropic_cache,
        scope=f"{key}\x00{model}",
        rendered=rendered,
        min_tokens=s.prompt_cache.anthropic_min_tokens,
        now=now,
    )
    words = tokens.words(seed=s.seed, text=rendered.text, salt=f"{model}|anthropic", count=count)
    if (schema := _schema(body.get("output_config"))) is not None:
        words = [orjson.dumps(tokens.schema_value(schema, words)).decode()]
        count, stop = tokens.count_tokens(words[0]), "end_turn"
    tool = _tool_use(body, words, tool_id=f"toolu_{sim._id_prefix}{next(sim._ids):010x}")
    output = count
    if tool is not None:
        words, stop = words[: max(1, min(len(words), 8))], "tool_use"
        output = len(words) + tokens.count_tokens(orjson.dumps(tool["input"]).decode())
    message = wire.Message(
        id=f"msg_{sim._id_prefix}{next(sim._ids):010x}",
        model=model,
        text=words,
        tool=tool,
        stop_reason=stop,
        usage=usage,
        output_tokens=output,
    )
    sim.stats.prompt_tokens += prompt_tokens
    sim.stats.completion_tokens += output
    sim.stats.cached_tokens += usage.read
    extra = s.faults.slow_ms / 1000.0 if fault is Fault.SLOW else 0.0
    timing = ZERO
    if not sim._zero_latency or extra:
        timing = plan_timing(
            latency=s.latency,
            uncached_tokens=prompt_tokens - usage.read,
            output_tokens=output,
            rng=sim._rng,
            extra_ttft=extra,
        )
    reply = _laid_out(
        message, stream=body.get("stream") is True, fault=fault, sim=sim, timing=timing
    )
    reply.headers = limit_headers
    reply.holds_slot = True
    return reply


def _schema(config: Any) -> dict[str, Any] | None:
    """`output_config.format`'s JSON schema (structured outputs), if the request gave one."""
    form = config.get("format") if isinstance(config, dict) else None
    if not isinstance(form, dict) or form.get("type") != "json_schema":
        return None
    schema = form.get("schema")
    if not isinstance(schema, dict):
        raise SimError(400, "output_config.format.schema: Input should be an object")
    return schema


def _natural(header: str | None, default: int) -> int:
    if header is None:
        return default
    try:
        return max(1, int(header))
    except ValueError:
        raise SimError(400, f"{generate.OUTPUT_TOKENS_HEADER} must be an integer.") from None


def _laid_out(
    message: wire.Message, *, stream: bool, fault: Fault | None, sim: Simulator, timing: Any
) -> Reply:
    if not stream:
        if fault is Fault.MALFORMED:
            return Reply(status=200, body=wire.malformed_body(stream=False), delay=timing.total)
        body = wire.message_body(message)
        cut = len(body) // 2 if fault is Fault.DISCONNECT else None
        return Reply(status=200, body=body, delay=timing.total, cut_after=cut)
    events, steps = wire.stream_events(message)
    if fault is Fault.MALFORMED:
        events, steps = [events[0], wire.malformed_body(stream=True)], [0, 0]
    delays = None if timing.is_zero else generate._event_delays(steps, timing)
    cut_after = sim.settings.faults.disconnect_after_chunks
    cut = min(cut_after, len(events) - 1) if fault is Fault.DISCONNECT else None
    return Reply(
        status=200,
        content_type="text/event-stream; charset=utf-8",
        events=events,
        event_delays=delays,
        cut_after=cut,
    )


def _tool_use(body: Mapping[str, Any], words: list[str], *, tool_id: str) -> dict[str, Any] | None:
    """The tool_use block the answer carries, or None (see the module docstring)."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and "name" in t]
    if not tools:
        return None
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else "auto"
    picked: dict[str, Any] | None = None
    if kind == "tool":
        picked = next((t for t in tools if t["name"] == choice.get("name")), None)  # type: ignore[union-attr]
    elif kind == "any":
        picked = tools[0]
    elif kind == "auto":
        text = _last_user_text(body["messages"])
        picked = next((t for t in tools if text is not None and t["name"] in text), None)
    if picked is None:
        return None
    schema = picked.get("input_schema")
    return {"id": tool_id, "name": picked["name"], "input": _input_for(schema, words)}


def _last_user_text(messages: list[Any]) -> str | None:
    """The text of the last message when it is the user's and sends no tool results."""
    last = messages[-1]
    if last.get("role") != "user":
        return None
    content = last["content"]
    if isinstance(content, str):
        return content
    if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    return " ".join(
        b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)
    )


def _input_for(schema: Any, words: list[str]) -> dict[str, Any]:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    word = (words[0] if words else "value").strip().lower()
    values: dict[str, Any] = {}
    for name, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        enum = spec.get("enum") if isinstance(spec, dict) else None
        if isinstance(enum, list) and enum:
            values[name] = enum[0]
        else:
            values[name] = _SAMPLES.get(kind, word) if kind != "string" else word
    return values


_SAMPLES: dict[Any, Any] = {
    "integer": 42,
    "number": 1.5,
    "boolean": True,
    "array": [],
    "object": {},
}

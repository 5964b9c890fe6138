"""From a parsed request body to the simulated answer: parsing the fields that shape the output,
choosing the words, and laying the answer out as a `Reply` (plain or streamed, faulted or not).

Output length: the request's cap is `max_completion_tokens` or `max_tokens`. Without a cap the
answer is `max_tokens_default` tokens long and ends with "stop"; with a cap the model "fills"
it and ends with "length". A test that needs a natural stop under a cap sends
`x-sim-output-tokens: N` (the answer's natural length): then it is min(N, cap) tokens, "stop"
when N fits under the cap.

Structured output: a chat request with `response_format` `json_schema` is answered with one JSON
value that fits the schema (`tokens.schema_value`), as the Responses API's `text.format` is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from levergate.simulator import hardness, responses, tokens
from levergate.simulator.faults import Fault, malformed_body, parse_forced
from levergate.simulator.latency import Timing
from levergate.simulator.responses import Answer, Reply, SimError
from levergate.simulator.settings import SimSettings

OUTPUT_TOKENS_HEADER = "x-sim-output-tokens"
_MAX_CHOICES = 128
# Output tokens one request may make the simulator generate (choices x prompts x cap), so a
# careless request cannot tie the process up for seconds.
_MAX_TOTAL_OUTPUT = 262_144


@dataclass(slots=True)
class Spec:
    """The parts of a chat or completion request that shape the simulated answer. (Not frozen:
    this is built on every request, and frozen dataclasses are several times slower to make.)"""

    chat: bool
    model: str
    prompts: list[tuple[str, int]]  # (rendered text, tokens), one per prompt
    prompt_tokens: int
    n: int
    output_tokens: int
    finish: str
    stream: bool
    include_usage: bool
    salt: str
    # What TPM admission charges: the prompt plus every choice's output cap.
    reserved_tokens: int
    # `top_logprobs` when the request asked for `logprobs: true` (chat only), else None.
    logprobs: int | None = None
    # The prompt is hard (settings.hard); the mean token logprob of the answer.
    hard: bool = False
    mean_logprob: float = 0.0
    json_answers: bool = False
    # `response_format` json_schema's schema (chat): the answer is one JSON value that fits it.
    schema: dict[str, Any] | None = None


_REQUIRED = {"chat": "messages", "completion": "prompt", "embedding": "input"}  # and "model"


def check_request(kind: str, body: Any) -> dict[str, Any]:
    """The checks a provider makes before generating, with OpenAI's messages. Only what the
    simulator reads is checked (typed fields are checked where they are read), because this
    runs on every request."""
    if type(body) is not dict:
        raise SimError(400, "The request body must be a JSON object.")
    model, required = body.get("model"), _REQUIRED[kind]
    if model is None or body.get(required) is None:
        name = "model" if model is None else required
        raise SimError(400, f"Missing required parameter: '{name}'.", param=name)
    if type(model) is not str:
        raise SimError(400, "Invalid type for 'model': expected a string.", param="model")
    stream = body.get("stream")
    if stream is not None and type(stream) is not bool:
        raise SimError(400, "Invalid type for 'stream': expected a boolean.", param="stream")
    if kind == "chat":
        messages = body["messages"]
        if type(messages) is not list or not messages:
            raise SimError(400, "'messages' must be a non-empty array.", param="messages")
        for message in messages:
            if type(message) is not dict or type(message.get("role")) is not str:
                index = messages.index(message)
                raise SimError(
                    400,
                    f"Invalid message at index {index}: each message must be an object with a "
                    "'role'.",
                    param=f"messages[{index}]",
                )
    return body


def prompt_cache_key(value: Any) -> str:
    """OpenAI's `prompt_cache_key` (it steers which cache machine serves a prefix): a string,
    accepted and counted in the stats; anything else is OpenAI's 400."""
    if type(value) is not str:
        raise SimError(
            400, "Invalid type for 'prompt_cache_key': expected a string.", param="prompt_cache_key"
        )
    return value


def _prompts(*, chat: bool, body: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The request's prompts with their token counts: one for a chat, one or more for a
    completion."""
    if chat:
        text = tokens.chat_prompt(body)
        return [(text, tokens.count_tokens(text))]
    try:
        prompts = tokens.completion_prompts(body["prompt"])
    except TypeError as exc:
        raise SimError(400, f"Invalid 'prompt': {exc}.", param="prompt") from None
    if not prompts:
        raise SimError(400, "'prompt' must not be an empty list.", param="prompt")
    return prompts


def parse_spec(
    *, chat: bool, body: Mapping[str, Any], settings: SimSettings, natural: str | None
) -> Spec:
    prompts = _prompts(chat=chat, body=body)
    prompt_tokens = sum(count for _, count in prompts)
    n = body.get("n")
    if n is None:
        n = 1
    else:
        check_int("n", n, high=_MAX_CHOICES)
    output, finish = _output_length(body, settings=settings, natural=natural)
    stream = body.get("stream") is True
    options = body.get("stream_options")
    if options is not None:
        _check_stream_options(options, stream=stream)
    window = settings.context_window
    if window is not None:
        _check_window(prompts, output=output, window=window, chat=chat)
    if output * n * len(prompts) > _MAX_TOTAL_OUTPUT:
        raise SimError(
            400,
            f"The simulator generates at most {_MAX_TOTAL_OUTPUT} output tokens per request "
            "(choices x prompts x max_tokens).",
            param="n",
        )
    model = body["model"]
    spec = Spec(
        chat=chat,
        model=model,
        prompts=prompts,
        prompt_tokens=prompt_tokens,
        n=n,
        output_tokens=output,
        finish=finish,
        stream=stream,
        include_usage=options is not None and options.get("include_usage") is True,
        salt=f"{model}|{body.get('seed')}",
        reserved_tokens=prompt_tokens + output * n * len(prompts),
    )
    if chat:
        spec.schema = _schema_asked(body.get("response_format"))
    if chat and (body.get("logprobs") is not None or body.get("top_logprobs") is not None):
        spec.logprobs = _logprobs_asked(body)
    if chat and settings.hard.enabled:
        hard = settings.hard
        spec.hard = hardness.is_hard(hard, model=model, text=prompts[0][0], seed=settings.seed)
        spec.mean_logprob = hardness.mean_logprob(hard, hard=spec.hard)
        spec.json_answers = hard.json_answers
    elif spec.logprobs is not None:
        spec.mean_logprob = settings.hard.easy_logprob
    return spec


def _schema_asked(form: Any) -> dict[str, Any] | None:
    """The schema of OpenAI's `response_format: {type: json_schema, json_schema: {schema}}`."""
    if not isinstance(form, Mapping) or form.get("type") != "json_schema":
        return None
    wanted = form.get("json_schema")
    schema = wanted.get("schema") if isinstance(wanted, Mapping) else None
    if not isinstance(schema, dict):
        raise SimError(400, "'response_format.json_schema.schema' must be an object.",
                       param="response_format")  # fmt: skip
    return schema


def _logprobs_asked(body: Mapping[str, Any]) -> int | None:
    """OpenAI's rules: `logprobs` a boolean, `top_logprobs` 0..20 and only with logprobs on."""
    asked, top = body.get("logprobs"), body.get("top_logprobs")
    if asked is not None and type(asked) is not bool:
        raise SimError(400, "Invalid type for 'logprobs': expected a boolean.", param="logprobs")
    if top is not None:
        check_int("top_logprobs", top, high=hardness.MAX_TOP_LOGPROBS, low=0)
        if asked is not True:
            raise SimError(
                400, "'logprobs' must be true when 'top_logprobs' is set.", param="top_logprobs"
            )
    return (top or 0) if asked else None


def _check_stream_options(options: Any, *, stream: bool) -> None:
    if type(options) is not dict:
        raise SimError(
            400, "Invalid type for 'stream_options': expected an object.", param="stream_options"
        )
    if not stream:
        raise SimError(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
        )


def _check_window(prompts: list[tuple[str, int]], *, output: int, window: int, chat: bool) -> None:
    longest = max(count for _, count in prompts)
    if longest + output > window:
        raise SimError(
            400,
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{longest + output} tokens ({longest} in the messages, {output} in the completion). "
            "Please reduce the length of the messages or completion.",
            code="context_length_exceeded",
            param="messages" if chat else "prompt",
        )


def _output_length(
    body: Mapping[str, Any], *, settings: SimSettings, natural: str | None
) -> tuple[int, str]:
    name = "max_completion_tokens"
    cap = body.get(name)
    if cap is None:
        name = "max_tokens"
        cap = body.get(name)
    if cap is not None:
        check_int(name, cap, high=settings.max_output_tokens)
    if natural is not None:
        try:
            wanted = max(1, int(natural))
        except ValueError:
            raise SimError(400, f"{OUTPUT_TOKENS_HEADER} must be an integer.") from None
        wanted = min(wanted, settings.max_output_tokens)
        if cap is None or wanted <= cap:
            return wanted, "stop"
        return cap, "length"
    if cap is None:
        return settings.max_tokens_default, "stop"
    return cap, "length"


def check_int(name: str, value: Any, *, high: int, low: int = 1) -> None:
    if type(value) is not int:
        raise SimError(400, f"Invalid type for '{name}': expected an integer.", param=name)
    if not low <= value <= high:
        raise SimError(
            400,
            f"Invalid '{name}': {value} is out of range; it must be between {low} and {high}.",
            param=name,
            code="integer_out_of_range",
        )


def choose(*, spec: Spec, seed: int) -> list[list[str]]:
    """The words of every choice, a pure function of (seed, prompt, model, request seed), so
    the same request always gets the same answer and a shorter cap gives a prefix of a longer
    one. Choice i of n hashes with its index, so the n choices differ."""
    count = spec.output_tokens
    if len(spec.prompts) == 1 and spec.n == 1:
        return [tokens.words(seed=seed, text=spec.prompts[0][0], salt=spec.salt, count=count)]
    return [
        tokens.words(seed=seed, text=text, salt=f"{spec.salt}|{index}", count=count)
        for text, _ in spec.prompts
        for index in range(spec.n)
    ]


def answer(
    *, spec: Spec, seed: int, cached_tokens: int, id: str, created: int,  # noqa: A002 - the OpenAI field name
    choices: list[list[str]] | None = None,
) -> Answer:  # fmt: skip
    """The answer (`choose`'s words, or `choices` when they were chosen elsewhere:
    isolation.py)."""
    if choices is None:
        choices = choose(spec=spec, seed=seed)
    count = spec.output_tokens
    if spec.schema is not None:  # structured output: one JSON value per choice
        choices = [[orjson.dumps(tokens.schema_value(spec.schema, list(c))).decode()]
                   for c in choices]  # fmt: skip
        count = tokens.count_tokens(choices[0][0])
    result = Answer(
        id=id,
        created=created,
        model=spec.model,
        choices=choices,
        finish=spec.finish,
        prompt_tokens=spec.prompt_tokens,
        cached_tokens=cached_tokens,
        completion_tokens=count * len(choices),
    )
    if spec.json_answers or spec.logprobs is not None:
        _add_confidence(result, spec)
    return result


def _add_confidence(answer: Answer, spec: Spec) -> None:
    """Hard-prompt shaping (JSON answers) and token logprobs, only when configured or asked."""
    mean = spec.mean_logprob
    if spec.json_answers:
        answer.choices = [
            hardness.json_tokens(c, mean=mean, hard=spec.hard) for c in answer.choices
        ]
    if spec.logprobs is not None:
        answer.top_logprobs = spec.logprobs
        answer.logprobs = [
            hardness.token_logprobs(len(c), mean=mean, salt=index)
            for index, c in enumerate(answer.choices)
        ]


def generation_reply(
    *,
    spec: Spec,
    answer: Answer,
    timing: Timing,
    fault: Fault | None,
    cut_after: int,
    spaced_json: bool = False,
) -> Reply:
    """Lay the answer out on the wire, applying a disconnect or malformed fault if drawn."""
    dumps = responses.dumps_for(spaced=spaced_json)
    if not spec.stream:
        if fault is Fault.MALFORMED:
            return Reply(status=200, body=malformed_body(stream=False), delay=timing.total)
        body = (
            responses.chat_body(answer, dumps=dumps)
            if spec.chat
            else responses.completion_body(answer, dumps=dumps)
        )
        cut = len(body) // 2 if fault is Fault.DISCONNECT else None
        return Reply(status=200, body=body, delay=timing.total, cut_after=cut)
    events, steps = responses.stream_events(
        answer, chat=spec.chat, include_usage=spec.include_usage, dumps=dumps
    )
    if fault is Fault.MALFORMED:
        events = [events[0], malformed_body(stream=True), events[-1]]
        steps = [0, 0, 0]
    delays = None if timing.is_zero else _event_delays(steps, timing)
    cut = min(cut_after, len(events) - 1) if fault is Fault.DISCONNECT else None
    return Reply(
        status=200,
        content_type="text/event-stream; charset=utf-8",
        events=events,
        event_delays=delays,
        cut_after=cut,
    )


def _event_delays(steps: list[int], timing: Timing) -> list[float]:
    """The wait before each event: TTFT before the first, the token gap before the first event
    of each later token, nothing between events of the same token."""
    delays: list[float] = []
    previous = -1
    for step in steps:
        if step == previous:
            delays.append(0.0)
        elif step == 0:
            delays.append(timing.ttft)
        else:
            delays.append(timing.gaps[step - 1] if step - 1 < len(timing.gaps) else 0.0)
        previous = step
    return delays


def forced_fault(value: str) -> Fault | None:
    try:
        return parse_forced(value)
    except ValueError as exc:
        raise SimError(400, str(exc)) from None


def parse_json(raw: bytes | bytearray) -> Any:
    if not raw:
        raise SimError(400, "The request body is empty; expected a JSON object.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SimError(400, f"The request body is not valid JSON: {exc}.") from None


def bearer_key(value: str | None) -> str:
    """The API key of `Authorization: Bearer <key>`; requests without one share the key ''."""
    if not value:
        return ""
    if value.startswith("Bearer "):  # what every SDK sends
        return value[7:].strip()
    scheme, _, key = value.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else value.strip()

"""Reading an OpenAI request body into the engine's `Request`, and refusing what it cannot do.

The gateway's edge has already checked the types of the common fields; here the values are
checked against this engine: the context window (a 400 with `context_length_exceeded`, the
code OpenAI uses, so clients that trim on it keep working), one choice only, text only, and
logprobs within OpenAI's bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from levergate.config import LocalUpstreamSettings
from levergate.core.call import Call, Kind
from levergate.errors import BadRequest
from levergate.upstreams.local.sampling import SamplingParams
from levergate.upstreams.local.sequence import Draft

MAX_STOPS = 4
# OpenAI's bounds: alternatives per token on chat, and on legacy completions.
MAX_TOP_LOGPROBS = 20
MAX_COMPLETION_LOGPROBS = 5


def refuse_unsupported(body: Mapping[str, Any]) -> None:
    if body.get("n") not in (None, 1):
        raise BadRequest("the local engine returns one choice: n must be 1", param="n")
    for name in ("tools", "functions"):
        if body.get(name):
            raise BadRequest(
                f"the local engine does not support '{name}'",
                param=name,
                code="unsupported_parameter",
            )
    if body.get("echo"):
        raise BadRequest(
            "the local engine does not support 'echo'", param="echo", code="unsupported_parameter"
        )
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping) and response_format.get("type") not in (None, "text"):
        raise BadRequest(
            "the local engine supports response_format 'text' only",
            param="response_format",
            code="unsupported_parameter",
        )


def logprobs(body: Mapping[str, Any], *, kind: Kind) -> int | None:
    """How many alternatives to score per token, None when no logprobs are asked. OpenAI's
    rules: on chat `logprobs` is a boolean and `top_logprobs` 0-20 needs it true; on legacy
    completions `logprobs` is the number of alternatives, 0-5."""
    asked = body.get("logprobs")
    if kind != "chat":
        if asked is None or asked is False:
            return None
        return _count(asked, name="logprobs", high=MAX_COMPLETION_LOGPROBS)
    top = body.get("top_logprobs")
    if asked is not None and not isinstance(asked, bool):
        raise BadRequest("'logprobs' must be a boolean", param="logprobs", code="invalid_type")
    if top is None:
        return 0 if asked else None
    count = _count(top, name="top_logprobs", high=MAX_TOP_LOGPROBS)
    if not asked:
        raise BadRequest("'logprobs' must be true when 'top_logprobs' is set", param="top_logprobs")
    return count


def _count(value: Any, *, name: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise BadRequest(f"'{name}' must be an integer from 0 to {high}", param=name)
    return value


def completion_prompt(body: Mapping[str, Any]) -> str | list[int]:
    """A completion prompt: a string, one string in a list, or a list of token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        if len(prompt) == 1 and isinstance(prompt[0], str):
            return str(prompt[0])
        if prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return [int(t) for t in prompt]
    raise BadRequest(
        "the local engine takes one prompt: a string or a list of token ids", param="prompt"
    )


def check_context(prompt_tokens: int, *, limit: int, param: str) -> None:
    if prompt_tokens + 1 > limit:
        raise BadRequest(
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"resulted in {prompt_tokens} tokens. Please reduce the length of the prompt.",
            param=param,
            code="context_length_exceeded",
        )


def max_tokens(
    body: Mapping[str, Any], *, prompt_tokens: int, limit: int, default: int, param: str
) -> int:
    asked = body.get("max_completion_tokens", body.get("max_tokens"))
    if asked is None:
        return max(1, min(default, limit - prompt_tokens))
    if not isinstance(asked, int) or asked < 1:
        raise BadRequest("max_tokens must be a positive integer", param="max_tokens")
    if prompt_tokens + asked > limit:
        raise BadRequest(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_tokens + asked} tokens ({prompt_tokens} in the prompt, {asked} for the "
            "completion). Please reduce the prompt or the completion length.",
            param=param,
            code="context_length_exceeded",
        )
    return asked


def sampling(body: Mapping[str, Any], *, settings: LocalUpstreamSettings) -> SamplingParams:
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    seed = body.get("seed")
    top_k = body.get("top_k")
    if top_k is not None and (type(top_k) is not int or top_k < 0):
        raise BadRequest("top_k must be an integer of at least 0", param="top_k")
    return SamplingParams(
        temperature=settings.temperature if temperature is None else float(temperature),
        top_p=settings.top_p if top_p is None else float(top_p),
        top_k=top_k or 0,
        seed=seed if isinstance(seed, int) else None,
        logit_bias=_logit_bias(body.get("logit_bias")),
    )


def _logit_bias(value: Any) -> dict[int, float]:
    if not value:
        return {}
    try:
        return {int(token): float(bias) for token, bias in dict(value).items()}
    except (TypeError, ValueError):
        raise BadRequest(
            "logit_bias maps token ids to numbers", param="logit_bias", code="invalid_type"
        ) from None


def stop_strings(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOPS or not all(isinstance(s, str) for s in stops):
        raise BadRequest(f"stop takes up to {MAX_STOPS} strings", param="stop")
    return tuple(s for s in stops if s)


def draft_options(call: Call, *, settings: LocalUpstreamSettings) -> Draft | None:
    """Prompt-lookup decoding for this call: the call's own control (`x-levergate-speculative`,
    or `speculative=` in the library) wins, then the route (the model name this upstream
    received), then the upstream's default."""
    options = settings.speculative
    wanted = call.ctx.controls.speculative
    if wanted is None:
        wanted = options.enabled or call.model in options.models
    if not wanted:
        return None
    return Draft(
        ngram_min=min(options.ngram_min, options.ngram_max),
        ngram_max=options.ngram_max,
        tokens=options.draft_tokens,
    )

"""Request bodies to engine requests: the 400s a client sees, and the speculative switch."""

from __future__ import annotations

import pytest

from levergate.config import LocalUpstreamSettings, SpeculationSettings
from levergate.core.call import Call, Context
from levergate.errors import BadRequest
from levergate.upstreams.local import params
from levergate.upstreams.local.template import chatml, message_texts

SETTINGS = LocalUpstreamSettings(
    model_path=None, speculative=SpeculationSettings(models=["lookup"])
)


def call(model: str = "m") -> Call:
    ctx = Context(request_id="r")
    return Call(kind="chat", body={"model": model, "messages": []}, ctx=ctx)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 2}, "n"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"echo": True}, "echo"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
    ],
)
def test_what_the_engine_cannot_do_is_refused_by_name(body: dict[str, object], param: str) -> None:
    with pytest.raises(BadRequest) as raised:
        params.refuse_unsupported(body)
    assert raised.value.param == param


def test_logprobs_follow_openais_rules_and_bounds() -> None:
    chat = {"logprobs": True, "top_logprobs": 20}
    assert params.logprobs(chat, kind="chat") == 20
    assert params.logprobs({"logprobs": True}, kind="chat") == 0
    assert params.logprobs({"logprobs": False}, kind="chat") is None
    assert params.logprobs({}, kind="chat") is None
    assert params.logprobs({"logprobs": 5}, kind="completion") == 5
    assert params.logprobs({"logprobs": 0}, kind="completion") == 0
    assert params.logprobs({}, kind="completion") is None
    refused: list[tuple[dict[str, object], str, str]] = [
        ({"logprobs": True, "top_logprobs": 21}, "chat", "top_logprobs"),
        ({"logprobs": True, "top_logprobs": -1}, "chat", "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 10**12}, "chat", "top_logprobs"),
        ({"logprobs": True, "top_logprobs": True}, "chat", "top_logprobs"),
        ({"top_logprobs": 3}, "chat", "top_logprobs"),  # needs logprobs: true
        ({"logprobs": "yes"}, "chat", "logprobs"),
        ({"logprobs": 1}, "chat", "logprobs"),
        ({"logprobs": 6}, "completion", "logprobs"),
        ({"logprobs": 2.5}, "completion", "logprobs"),
    ]
    for body, kind, param in refused:
        with pytest.raises(BadRequest) as raised:
            params.logprobs(body, kind="chat" if kind == "chat" else "completion")
        assert raised.value.param == param, body


def test_context_length_errors_use_openais_code() -> None:
    params.check_context(99, limit=100, param="messages")
    with pytest.raises(BadRequest) as raised:
        params.check_context(100, limit=100, param="messages")
    assert raised.value.code == "context_length_exceeded"
    with pytest.raises(BadRequest) as raised:
        params.max_tokens({"max_tokens": 50}, prompt_tokens=60, limit=100, default=10, param="p")
    assert raised.value.code == "context_length_exceeded"
    assert params.max_tokens({}, prompt_tokens=95, limit=100, default=1024, param="p") == 5
    assert params.max_tokens({"max_completion_tokens": 7}, prompt_tokens=1, limit=100,
                             default=10, param="p") == 7  # fmt: skip


def test_sampling_defaults_come_from_the_settings_and_the_body_wins() -> None:
    default = params.sampling({}, settings=SETTINGS)
    assert (default.temperature, default.top_p) == (SETTINGS.temperature, SETTINGS.top_p)
    given = params.sampling({"temperature": 0, "seed": 3, "logit_bias": {"5": -100}},
                            settings=SETTINGS)  # fmt: skip
    assert given.greedy
    assert given.seed == 3
    assert given.logit_bias == {5: -100.0}
    assert default.top_k == 0
    assert params.sampling({"top_k": 40}, settings=SETTINGS).top_k == 40
    for bad in (-1, 2.5, "40", True):
        with pytest.raises(BadRequest, match="top_k"):
            params.sampling({"top_k": bad}, settings=SETTINGS)
    with pytest.raises(BadRequest):
        params.stop_strings({"stop": ["a", "b", "c", "d", "e"]})
    assert params.stop_strings({"stop": "x"}) == ("x",)


def test_speculation_per_route_and_per_request() -> None:
    assert params.draft_options(call("m"), settings=SETTINGS) is None
    assert params.draft_options(call("lookup"), settings=SETTINGS) is not None
    assert params.draft_options(call("m").with_controls(speculative=True), settings=SETTINGS)
    off = call("lookup").with_controls(speculative=False)
    assert params.draft_options(off, settings=SETTINGS) is None


def test_completion_prompts_and_chat_messages() -> None:
    assert params.completion_prompt({"prompt": ["one"]}) == "one"
    assert params.completion_prompt({"prompt": [1, 2]}) == [1, 2]
    with pytest.raises(BadRequest):
        params.completion_prompt({"prompt": ["a", "b"]})
    pairs = message_texts(
        [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ]
    )
    assert pairs == [("system", "be brief"), ("user", "hi")]
    assert chatml(pairs).endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(BadRequest):
        message_texts([{"role": "user", "content": [{"type": "image_url"}]}])

"""The engine's knobs (issue 29): each passed to llama.cpp as set, and one out of range refused
at start with the range it allows: threads 0 or above the cores, n_ctx above the model's
training context, a compute pass larger than the step."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.config import LocalUpstreamSettings
from levergate.errors import ConfigError
from levergate.upstreams.local import LocalEndpoint
from levergate.upstreams.local.knobs import KV_TYPES, runtime_options, usable_cores
from tests.unit.upstreams.local.helpers import (
    SYSTEM,
    answer,
    chat_call,
    local_settings,
    running,
)


def test_unset_threads_take_every_usable_core_and_set_ones_are_kept() -> None:
    options = runtime_options(LocalUpstreamSettings(), cores=4)
    assert (options.threads, options.threads_batch) == (4, 4)
    options = runtime_options(LocalUpstreamSettings(threads=1, threads_batch=3), cores=4)
    assert (options.threads, options.threads_batch) == (1, 3)
    options = runtime_options(LocalUpstreamSettings(threads=3), cores=4)  # prefill follows decode
    assert (options.threads, options.threads_batch) == (3, 3)
    assert options.ubatch_tokens == options.batch_tokens == 512
    assert options.kv_type == KV_TYPES["f16"]
    tuned = runtime_options(
        LocalUpstreamSettings(
            batch_tokens=256, ubatch_tokens=64, kv_cache_type="q8_0", n_gpu_layers=-1
        ),
        cores=2,
    )
    assert (tuned.batch_tokens, tuned.ubatch_tokens, tuned.kv_type) == (256, 64, 8)
    assert tuned.n_gpu_layers == -1


@pytest.mark.parametrize(
    ("values", "message"),
    [({"threads": 0}, "threads 0 is out of range: 1..2"),
     ({"threads": 3}, "threads 3 is out of range: 1..2"),
     ({"threads_batch": -1}, "threads_batch -1 is out of range: 1..2"),
     ({"batch_tokens": 128, "ubatch_tokens": 256}, "ubatch_tokens 256 is out of range: 32..128")],
)  # fmt: skip
def test_a_knob_out_of_range_is_refused_with_its_range(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        runtime_options(LocalUpstreamSettings(**values), cores=2)


@pytest.mark.parametrize("values", [{"n_gpu_layers": -2}, {"kv_cache_type": "q2_k"},
                                    {"ubatch_tokens": 8}, {"n_ctx": 100}])  # fmt: skip
def test_settings_refuse_what_no_machine_allows(values: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(values))):
        LocalUpstreamSettings(**values)


def test_n_ctx_above_the_training_context_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match=r"n_ctx 16384 is out of range: 256\.\.8192"):
        LocalEndpoint(local_settings(n_ctx=16384))
    with pytest.raises(ConfigError, match=r"threads 0 is out of range: 1\.\."):
        LocalEndpoint(local_settings(threads=0))


async def test_the_knobs_reach_llama_cpp() -> None:
    """A q8_0 KV cache stores about half the bytes per token of f16 (what the prefix cache
    keeps per saved prompt), and the engine still answers with small compute passes and
    prefill threads of their own."""
    cores = usable_cores()
    knobs = {"kv_cache_type": "q8_0", "batch_tokens": 128, "ubatch_tokens": 64,
             "threads": 1, "threads_batch": cores}  # fmt: skip
    for endpoint in running(local_settings(**knobs)):
        data = await answer(endpoint, chat_call("What is the capital of France?", max_tokens=8))
        assert "Paris" in data["choices"][0]["message"]["content"]
        saved = await answer(endpoint, chat_call("Hello", system=SYSTEM, max_tokens=2))
        per_token = endpoint.engine.cache.ram_used / saved["usage"]["prompt_tokens"]
        # f16 is 30 layers x 2 x 192 values x 2 bytes = 23,040 bytes a token; q8_0 ~ 12,240.
        assert 10_000 < per_token < 14_000

"""The embedded local engine: llama.cpp in-process, with prefix KV reuse, continuous batching and
prompt-lookup speculative decoding (needs the `local` extra).

    runtime.py       the llama.cpp C API, typed and small (model, context, batch, KV state)
    model.py         finding, checking and re-quantizing the model file at start-up
    template.py      chat messages -> prompt text (the model's template, ChatML fallback)
    params.py        an OpenAI body -> the engine's Request; the 400s
    sampling.py      greedy / temperature + top-p over a logits row
    logprobs.py      token logprobs when asked: scored from the same row, shaped as OpenAI's
    prefix_cache.py  KV states of recent prompts in a RAM budget (LRU, optional disk spill)
    speculative.py   prompt-lookup drafts and their verification
    sequence.py      what crosses between the event loop and the engine thread
    scheduler.py     continuous batching: admission, prefix sharing, per-step plan
    cells.py         which KV cells each sequence holds (shared prefixes, kept slots)
    engine.py        the thread that owns the context and runs the steps
    replies.py       tokens -> text (stop strings) -> OpenAI JSON
    endpoint.py      `LocalEndpoint`, the `Endpoint` the pipeline sees
"""

from __future__ import annotations

from levergate.upstreams.local.endpoint import LocalEndpoint

__all__ = ["LocalEndpoint"]

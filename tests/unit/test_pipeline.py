"""`build_pipeline` and the layer builders it reads as: a lever that is off builds no layer,
`stack` skips it, and the state the layers share is built once for the whole pipeline."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from levergate.config import (
    CacheSettings,
    ModelSettings,
    RateLimitsSettings,
    RetrySettings,
    Settings,
    TrafficSettings,
)
from levergate.core.call import Call, Context
from levergate.core.reply import Completed, Reply
from levergate.core.service import Layer, Service, stack
from levergate.layers.cache.build import semantic_layer
from levergate.layers.cache.exact import ExactCache
from levergate.layers.shared import Shared
from levergate.layers.traffic.admission import Admission
from levergate.layers.traffic.fallback import Fallback
from levergate.layers.traffic.health_checks import HealthChecks
from levergate.layers.traffic.retry import Retry
from levergate.pipeline import build_pipeline
from levergate.testing import ManualClock
from levergate.upstreams.client import client_for
from levergate.upstreams.h1 import H1Client

UPSTREAM = {"name": "u", "base_url": "http://127.0.0.1:9/v1"}


def shared_for(settings: Settings) -> Shared:
    models = {m.name: m for m in settings.models}
    return Shared.build(settings, models=models, clock=ManualClock(), registry=CollectorRegistry())


class Answer:
    async def __call__(self, call: Call) -> Reply:
        return Completed(data={"seen": call.ctx.request_id})


def test_a_lever_that_is_off_builds_no_layer() -> None:
    settings = Settings.load(upstreams=[UPSTREAM], models=[{"name": "m", "upstream": "u"}],
                             cache={"enabled": False})  # fmt: skip
    shared = shared_for(settings)
    assert Retry.layer(RetrySettings(enabled=False), shared=shared) is None
    assert Retry.layer(RetrySettings(), shared=shared) is not None
    assert Admission.layer(TrafficSettings(), shared=shared) is None
    assert (
        Admission.layer(TrafficSettings(tenant_default=RateLimitsSettings(rpm=5)), shared=shared)
        is not None
    )
    assert Fallback.layer(settings.models, on=("timeout",), shared=shared) is None
    with_fallback = [
        ModelSettings(name="a", upstream="u", fallbacks=["b"]),
        ModelSettings(name="b", upstream="u"),
    ]
    assert Fallback.layer(with_fallback, on=("timeout",), shared=shared) is not None
    assert (
        ExactCache.layer(CacheSettings(), shared=shared) is None
    )  # the cache is off: no CacheState
    assert semantic_layer(CacheSettings(), shared=shared, routes=Answer(), embedder=None) is None
    checks = TrafficSettings().health_checks
    assert HealthChecks.job(checks, keys=[], shared=shared, http_client=client_for) is None


async def test_stack_skips_a_switched_off_layer() -> None:
    seen: list[str] = []

    def mark(name: str) -> Layer:
        def layer(inner: Service) -> Service:
            async def service(call: Call) -> Reply:
                seen.append(name)
                return await inner(call)

            return service

        return layer

    service = stack(Answer(), [mark("outer"), None, mark("inner"), None])
    reply = await service(Call(kind="chat", body={"model": "m"}, ctx=Context("r1")))
    assert seen == ["outer", "inner"]
    assert isinstance(reply, Completed)


async def test_endpoint_keys_are_built_once_and_shared_by_every_alias() -> None:
    upstream = {**UPSTREAM, "api_keys": ["k-a", "k-b"], "key_limits": {"rpm": 100}}
    models = [{"name": "one", "upstream": "u"}, {"name": "two", "upstream": "u"},
              {"name": "*", "upstream": "u"}]  # fmt: skip
    pipeline = build_pipeline(Settings.load(upstreams=[upstream], models=models))
    try:
        names = sorted(state.name for state in pipeline.shared.traffic.group._members)
        assert names == ["u/key0", "u/key1"]  # one state per key, not per key and alias
    finally:
        await pipeline.aclose()


async def test_every_upstream_key_s_unsolicited_bytes_are_counted_on_metrics() -> None:
    """The H1 client's count of connections closed for bytes no request asked for reaches
    /metrics, summed over an upstream's keys (each key has a client of its own)."""
    upstream = {**UPSTREAM, "api_keys": ["k-a", "k-b"]}
    models = [{"name": "*", "upstream": "u"}]
    pipeline = build_pipeline(Settings.load(upstreams=[upstream], models=models))
    name, labels = "levergate_upstream_unsolicited_total", {"upstream": "u"}
    try:
        registry = pipeline.telemetry.registry
        assert registry.get_sample_value(name, labels) == 0
        assert pipeline.wire is not None
        clients = [client for _, client in pipeline.wire.clients]
        assert len(clients) == 2
        assert all(isinstance(client, H1Client) for client in clients)
        for client in clients:
            assert isinstance(client, H1Client)
            client.unsolicited += 2  # as two connections closed for stray bytes leave it
        assert registry.get_sample_value(name, labels) == 4
    finally:
        await pipeline.aclose()

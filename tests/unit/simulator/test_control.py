"""Live control of the simulator: /sim/stats, /sim/config, /sim/reset, /v1/models, /health."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from levergate.errors import ConfigError
from levergate.simulator import LatencySettings, SimSettings, Simulator
from levergate.testing import ManualClock


def call(sim: Simulator, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
    reply = sim.handle(method=method, path=path, headers={}, body=raw)
    sim.finish(reply)
    return reply.status, orjson.loads(reply.body)


def test_models_and_health() -> None:
    sim = Simulator(settings=SimSettings(models=("a", "b")))
    status, body = call(sim, "GET", "/v1/models")
    assert status == 200
    assert [model["id"] for model in body["data"]] == ["a", "b"]
    assert call(sim, "GET", "/v1/models/zzz")[1]["id"] == "zzz"
    assert call(sim, "GET", "/health")[1] == {"status": "ok", "simulated": True}
    strict = Simulator(settings=SimSettings(models=("a",), strict_models=True))
    assert call(strict, "GET", "/v1/models/zzz")[0] == 404


def test_config_patch_is_deep_merged_and_validated() -> None:
    sim = Simulator(settings=SimSettings(latency=LatencySettings(ttft_ms=5)))
    status, body = call(sim, "POST", "/sim/config", {"faults": {"error_rate": 0.5}})
    assert status == 200
    assert body["faults"]["error_rate"] == 0.5
    assert sim.settings.latency.ttft_ms == 5
    status, body = call(sim, "POST", "/sim/config", {"faults": {"error_rate": 2}})
    assert status == 400
    assert "faults.error_rate" in body["error"]["message"]
    assert call(sim, "POST", "/sim/config", {"nope": 1})[0] == 400
    assert call(sim, "POST", "/sim/config", b"[1]")[0] == 400
    assert call(sim, "POST", "/sim/config", b"{")[0] == 400
    assert call(sim, "POST", "/sim/config", {"port": 1})[0] == 400
    assert sim.settings.faults.error_rate == 0.5


def test_config_put_replaces_and_get_reads() -> None:
    sim = Simulator(settings=SimSettings(latency=LatencySettings(ttft_ms=5), seed=3))
    status, body = call(sim, "PUT", "/sim/config", {"seed": 4})
    assert status == 200
    assert body["latency"]["ttft_ms"] == 0
    assert call(sim, "GET", "/sim/config")[1]["seed"] == 4
    sim.configure({"latency": {"ttft_ms": 7}})
    status, body = call(sim, "POST", "/sim/config?replace=true", {"seed": 5})
    assert (status, body["seed"], body["latency"]["ttft_ms"]) == (200, 5, 0)


def test_changing_limits_takes_effect_and_reset_forgets_everything() -> None:
    sim = Simulator(settings=SimSettings(), clock=ManualClock())
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    sim.configure({"limits": {"rpm": 1}})
    assert call(sim, "POST", "/v1/chat/completions", chat)[0] == 200
    assert call(sim, "POST", "/v1/chat/completions", chat)[0] == 429
    _, stats = call(sim, "GET", "/sim/stats")
    assert stats["rate_limited"] == 1
    assert call(sim, "POST", "/sim/reset")[1] == {"reset": True}
    assert sim.snapshot()["requests_total"] == 0
    assert call(sim, "POST", "/v1/chat/completions", chat)[0] == 200


def test_settings_load_merges_yaml_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text("seed: 7\nlatency:\n  ttft_ms: 100\n  jitter: 0.1\n")
    settings = SimSettings.load(path, overrides={"latency": {"ttft_ms": 5}})
    assert (settings.seed, settings.latency.ttft_ms, settings.latency.jitter) == (7, 5, 0.1)
    path.write_text("latency: {ttft_ms: -1}\n")
    with pytest.raises(ConfigError, match=r"latency\.ttft_ms"):
        SimSettings.load(path)
    path.write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        SimSettings.load(path)
    with pytest.raises(ConfigError, match="cannot read"):
        SimSettings.load(tmp_path / "missing.yaml")

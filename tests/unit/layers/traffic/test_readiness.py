"""Readiness from the endpoints' verdicts: an alias serves while one of its endpoint keys (or one
of a fallback's) is neither ejected nor failing its health checks; the mode decides what the
gateway needs of its aliases; starting and draining are never ready."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from levergate.config import ModelSettings, TargetSettings
from levergate.config.server import ReadinessMode
from levergate.layers.traffic.endpoints import EndpointState
from levergate.layers.traffic.readiness import judge, unavailable
from levergate.layers.traffic.waiting import WaitingRoom
from levergate.policies.ejection import Ejection, EjectionPolicy
from levergate.stores.limits import MemoryLimitStore
from levergate.testing import ManualClock
from tests.unit.layers.traffic.fakes import shed

MODELS = {
    "fast": ModelSettings(name="fast", upstream="vllm", fallbacks=["smart"]),
    "smart": ModelSettings(name="smart", upstream="openai"),
    "solo": ModelSettings(
        name="solo", endpoints=[TargetSettings(upstream="a"), TargetSettings(upstream="b")]
    ),
}


def state(name: str, *, ejected: bool = False, probed_down: bool = False) -> EndpointState:
    room = WaitingRoom(store=MemoryLimitStore(clock=ManualClock()), clock=ManualClock(),
                       shed_error=shed)  # fmt: skip
    found = EndpointState(name=name, room=room, health=Ejection(policy=EjectionPolicy()))
    if ejected:
        found.health.eject(0.0)  # out for base_seconds (30 s)
    found.probed_down = probed_down
    return found


def endpoints(*down: str, probed: bool = False) -> dict[str, list[EndpointState]]:
    out = {name: name in down for name in ("vllm", "openai", "a", "b")}
    return {
        name: [state(name, ejected=is_out and not probed, probed_down=is_out and probed)]
        for name, is_out in out.items()
    }


def test_every_alias_serves_while_its_endpoints_do() -> None:
    assert unavailable(MODELS, endpoints(), now=1.0) == ()


def test_an_alias_with_its_only_endpoint_ejected_is_down_unless_a_fallback_serves() -> None:
    assert unavailable(MODELS, endpoints("openai"), now=1.0) == ("smart",)
    # `fast` falls back to `smart`: with vllm out it still answers.
    assert unavailable(MODELS, endpoints("vllm"), now=1.0) == ()
    assert unavailable(MODELS, endpoints("vllm", "openai"), now=1.0) == ("fast", "smart")


def test_health_check_verdicts_count_even_where_the_ejection_cap_kept_an_endpoint_in() -> None:
    assert unavailable(MODELS, endpoints("a", probed=True), now=1.0) == ()
    assert unavailable(MODELS, endpoints("a", "b", probed=True), now=1.0) == ("solo",)


def test_an_ejection_that_ran_out_is_half_open_and_counts_as_serving() -> None:
    assert unavailable(MODELS, endpoints("openai"), now=31.0) == ()


@given(
    mode=st.sampled_from(["any_model", "every_model", "started"]),
    started=st.booleans(),
    draining=st.booleans(),
    down=st.sets(st.sampled_from(["vllm", "openai", "a", "b"])),
)
def test_ready_only_when_started_not_draining_and_the_mode_is_met(
    mode: ReadinessMode, started: bool, draining: bool, down: set[str]
) -> None:
    result = judge(mode=mode, started=started, draining=draining, models=MODELS,
                   endpoints=endpoints(*down), now=1.0)  # fmt: skip
    missing = unavailable(MODELS, endpoints(*down), now=1.0)
    needs = {"started": True, "any_model": len(missing) < len(MODELS), "every_model": not missing}
    assert result.ready == (started and not draining and needs[mode])
    if draining:
        assert result.status == "draining"
    elif not started:
        assert result.status == "starting"
    elif mode != "started":
        assert result.unavailable == missing
        assert result.status == ("ok" if not missing else "degraded" if result.ready
                                 else "unavailable")  # fmt: skip

"""What replicas sharing limits compare at start: the shared limits of a configuration, their
digest, and the lines that name each disagreement."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from levergate.config import Settings
from levergate.layers.traffic.agreement import differences, digest, shared_limits


def settings(**limits: Any) -> Settings:
    return Settings.load(
        upstreams=[{"name": "p", "base_url": "http://127.0.0.1:9/v1", **limits}],
        models=[{"name": "m", "upstream": "p"}],
        traffic={"tenants": {"acme": {"rpm": 5}}},
    )


def test_shared_limits_name_each_scope_with_what_decides_it() -> None:
    found = shared_limits(settings(limits={"rpm": 60, "max_concurrency": 4},
                                   key_limits={"tpm": 1000}))  # fmt: skip
    assert set(found) == {"endpoint:p", "key:p", "tenant:acme"}
    assert found["endpoint:p"]["rpm"] == 60
    assert "max_concurrency" not in found["endpoint:p"]  # per process by design
    # A per-process field alone changes nothing replicas share.
    same = shared_limits(settings(limits={"rpm": 60, "max_concurrency": 9},
                                  key_limits={"tpm": 1000}))  # fmt: skip
    assert digest(same) == digest(found)


def test_a_different_value_is_named_with_both_sides() -> None:
    ours = shared_limits(settings(limits={"rpm": 120}))
    theirs = shared_limits(settings(limits={"rpm": 60}))
    assert differences(ours, theirs) == ["endpoint:p: rpm=120 here, 60 there"]
    only_here = shared_limits(settings(limits={"rpm": 60}, key_limits={"rpm": 5}))
    assert differences(only_here, theirs) == ["key:p: set here, absent there"]


limit = st.fixed_dictionaries({"rpm": st.none() | st.integers(1, 10**6),
                               "tpm": st.none() | st.integers(1, 10**9),
                               "window_seconds": st.sampled_from([1.0, 60.0])})  # fmt: skip
configs = st.dictionaries(st.sampled_from(["endpoint:a", "key:a", "tenant:x"]), limit)


@given(configs, configs)
def test_configurations_disagree_exactly_when_their_digests_differ(
    a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]
) -> None:
    assert (differences(a, b) == []) == (a == b) == (digest(a) == digest(b))
    assert len(differences(a, b)) == len(differences(b, a))

"""Whatever a client sends, the simulator answers with OpenAI-shaped JSON and keeps serving."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.simulator import SimSettings, Simulator

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "model": JSON | st.just("m"),
        "messages": JSON | st.just([{"role": "user", "content": "hi"}]),
        "prompt": JSON | st.just("hi"),
        "input": JSON | st.just(["a", "b"]),
        "max_tokens": JSON | st.integers(-5, 40),
        "max_completion_tokens": JSON,
        "n": JSON | st.integers(-1, 4),
        "stream": JSON | st.booleans(),
        "stream_options": JSON | st.just({"include_usage": True}),
        "dimensions": JSON | st.integers(-1, 64),
        "encoding_format": JSON | st.sampled_from(["float", "base64"]),
        "tools": JSON,
        "seed": JSON,
    },
)
PATHS = st.sampled_from(
    [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/models",
        "/sim/config",
        "/nope",
    ]
)


def check(sim: Simulator, reply: Any, *, fault: str | None = None) -> None:
    assert 200 <= reply.status < 600
    if reply.hang or (fault or "").strip().lower() == "malformed":
        pass  # by request: no answer at all, or a 200 whose body is deliberately not JSON
    elif reply.events is not None:
        assert reply.events[-1] == b"data: [DONE]\n\n"
    else:
        parsed = orjson.loads(reply.body)
        if reply.status >= 400:
            assert set(parsed["error"]) == {"message", "type", "param", "code"}
    sim.finish(reply)


@settings(max_examples=200)
@given(path=PATHS, method=st.sampled_from(["GET", "POST", "PUT"]), body=FIELDS)
def test_arbitrary_json_bodies_never_crash(path: str, method: str, body: dict[str, Any]) -> None:
    sim = Simulator(settings=SimSettings(embedding_dim=8))
    if path == "/sim/config":
        body = {}  # arbitrary settings patches are covered by the control tests
    reply = sim.handle(method=method, path=path, headers={}, body=orjson.dumps(body))
    check(sim, reply)
    assert sim.snapshot()["in_flight"] == 0


FAULTS = st.none() | st.text(max_size=12) | st.sampled_from(["500", "hang", "malformed", "slow"])
VALID = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})


@given(
    raw=st.binary(max_size=64) | st.just(VALID),
    fault=FAULTS,
    length=st.none() | st.text(max_size=6),
)
def test_arbitrary_bytes_and_headers_never_crash(
    raw: bytes, fault: str | None, length: str | None
) -> None:
    sim = Simulator()
    headers = {} if fault is None else {"x-sim-fault": fault}
    if length is not None:
        headers["x-sim-output-tokens"] = length
    reply = sim.handle(method="POST", path="/v1/chat/completions", headers=headers, body=raw)
    check(sim, reply, fault=fault)

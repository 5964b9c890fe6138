"""What the bench sends and when: schedules, synthetic prompts, repeats and request shapes."""

from __future__ import annotations

import itertools

import orjson
import pytest

from levergate.bench import BenchConfig, TraceRecord
from levergate.bench.config import Endpoint
from levergate.bench.workload import Arrival, BodyFactory, PromptFactory, arrivals
from levergate.errors import ConfigError

URL = "http://127.0.0.1:1"


def test_fixed_rate_offsets_are_index_over_rate_and_end_before_the_deadline() -> None:
    plan = list(arrivals(BenchConfig(url=URL, rate=4.0, duration_s=2.0)))
    assert [a.offset_s for a in plan] == [i / 4.0 for i in range(8)]
    assert [a.index for a in plan] == list(range(8))


def test_requests_bound_the_plan_too() -> None:
    assert len(list(arrivals(BenchConfig(url=URL, rate=1000.0, requests=5)))) == 5
    assert len(list(arrivals(BenchConfig(url=URL, concurrency=2, requests=7)))) == 7


def test_poisson_arrivals_are_seeded_and_average_the_rate() -> None:
    config = BenchConfig(url=URL, rate=100.0, arrival="poisson", requests=4000, seed=3)
    offsets = [a.offset_s or 0.0 for a in arrivals(config)]
    assert offsets == [a.offset_s for a in arrivals(config)]
    assert offsets == sorted(offsets)
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.01, rel=0.1)
    assert len(set(gaps)) > 100  # not uniform


def test_closed_loop_arrivals_have_no_intended_time_and_default_lengths() -> None:
    first = next(arrivals(BenchConfig(url=URL, concurrency=3)))
    assert first.offset_s is None
    assert (first.prompt_tokens, first.max_tokens) == (128, 64)


def test_trace_supplies_times_and_lengths_unless_overridden() -> None:
    trace = [TraceRecord(0.0, 100, 5, (1, 2)), TraceRecord(2.0, 50, 3)]
    plan = list(arrivals(BenchConfig(url=URL, trace="t"), trace=trace))
    assert [(a.offset_s, a.prompt_tokens, a.max_tokens) for a in plan] == [
        (0.0, 100, 5),
        (2.0, 50, 3),
    ]
    assert plan[0].hash_ids == (1, 2)
    fixed = list(
        arrivals(BenchConfig(url=URL, trace="t", prompt_tokens=9, max_tokens=2), trace=trace)
    )
    assert [(a.prompt_tokens, a.max_tokens, a.hash_ids) for a in fixed] == [(9, 2, ()), (9, 2, ())]
    # --rate with a trace: the trace's lengths on a fixed schedule
    paced = list(arrivals(BenchConfig(url=URL, trace="t", rate=10.0), trace=trace))
    assert [a.offset_s for a in paced] == [0.0, 0.1]


def test_prompts_are_unique_and_about_the_asked_size() -> None:
    factory = PromptFactory(seed=1, nonce="n0nce")
    prompts = [factory.unique(index=i, tokens=200) for i in range(500)]
    assert len(set(prompts)) == 500
    assert len({p.split(":", 1)[0] for p in prompts}) == 500  # they differ from the first word
    assert all(190 <= len(p.split()) <= 200 for p in prompts)
    assert len(factory.unique(index=0, tokens=200_000).split()) == pytest.approx(200_000, abs=5)


def test_mooncake_blocks_share_text_exactly_where_hash_ids_match() -> None:
    factory = PromptFactory(seed=1, nonce="n")
    a = factory.blocks(index=0, tokens=1200, hash_ids=(7, 8, 9))
    b = factory.blocks(index=1, tokens=1100, hash_ids=(7, 8, 10))
    c = factory.blocks(index=2, tokens=600, hash_ids=(11, 8))
    first_two = a.split(" <9> ")[0]
    assert b.startswith(first_two)
    assert not c.startswith(a[:20])
    assert len(a.split()) == pytest.approx(1200, abs=12)  # ids and nonce are words too
    assert a != factory.blocks(index=3, tokens=1200, hash_ids=(7, 8, 9))


def test_repeat_rate_resends_earlier_bodies_exactly() -> None:
    factory = BodyFactory(config=BenchConfig(url=URL, repeat_rate=0.3, seed=5), nonce="n")
    bodies = [factory.body(Arrival(i, None, 32, 8)) for i in range(2000)]
    repeats = sum(1 for _, repeated in bodies if repeated)
    assert 500 <= repeats <= 700
    distinct = {body for body, _ in bodies}
    assert len(distinct) == 2000 - repeats
    none = BodyFactory(config=BenchConfig(url=URL), nonce="n")
    assert not any(none.body(Arrival(i, None, 32, 8))[1] for i in range(200))


@pytest.mark.parametrize(
    ("endpoint", "stream", "expected"),
    [
        ("chat", True, {"messages", "max_tokens", "model", "stream", "stream_options", "seed"}),
        ("chat", False, {"messages", "max_tokens", "model", "seed"}),
        ("completions", False, {"prompt", "max_tokens", "model", "seed"}),
        ("embeddings", False, {"input", "model", "seed"}),
    ],
)
def test_body_shape_per_endpoint(endpoint: Endpoint, stream: bool, expected: set[str]) -> None:
    config = BenchConfig(
        url=URL,
        endpoint=endpoint,
        stream=stream,
        model="m1",
        extra_body={"seed": 1},
    )
    plan = next(arrivals(config))
    body = orjson.loads(BodyFactory(config=config, nonce="n").body(plan)[0])
    assert set(body) == expected
    assert body["model"] == "m1"
    if stream:
        assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("url", "endpoint", "expected"),
    [
        ("http://h:1", "chat", "http://h:1/v1/chat/completions"),
        ("http://h:1/", "embeddings", "http://h:1/v1/embeddings"),
        ("http://h:1/v1", "completions", "http://h:1/v1/completions"),
        ("http://h:1/openai/v1/", "chat", "http://h:1/openai/v1/chat/completions"),
        ("http://h:1/x/chat/completions", "chat", "http://h:1/x/chat/completions"),
    ],
)
def test_target_url(url: str, endpoint: str, expected: str) -> None:
    assert BenchConfig(url=url, endpoint=endpoint).target_url() == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "values",
    [
        {"url": "ftp://h"},
        {"url": URL, "rate": 1.0, "concurrency": 2},
        {"url": URL, "rate": 0.0},
        {"url": URL, "repeat_rate": 1.5},
        {"url": URL, "stream": True, "endpoint": "embeddings"},
        {"url": URL, "time_scale": -1.0},
    ],
)
def test_contradictions_are_config_errors(values: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        BenchConfig(**values).validate()  # type: ignore[arg-type]

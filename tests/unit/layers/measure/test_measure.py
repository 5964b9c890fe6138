"""Measure over in-memory services: the finished-request record, its sinks, pricing at the model
that answered, the series bound of /metrics, labels only for authenticated callers, and output
tokens counted when an upstream reports no usage."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import cast

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest
from pydantic import SecretStr

from levergate.catalog import Catalog
from levergate.config import ApiKeySettings, AuthSettings, MetricsSettings, PriceSettings
from levergate.config.server import ResponseHeadersSettings
from levergate.core.call import CacheOutcome, CacheResult, Call, Context
from levergate.core.controls import Controls
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.core.service import Service
from levergate.core.tokenizer import LengthEstimate, TokenCount, Tokenizer, TokenSource
from levergate.errors import AuthenticationFailed, UpstreamUnavailable
from levergate.layers.auth import Authenticate
from levergate.layers.dispatch import Dispatch
from levergate.layers.measure.measure import Measure, Telemetry, _Watching
from levergate.layers.measure.record import RequestRecord, Sink
from levergate.layers.measure.recorder import Recorder, Seen
from levergate.layers.traffic.fallback import Fallback
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.policies.tiers import Tier
from levergate.protocol.openai.body import has_generated_token

USAGE = {"prompt_tokens": 1000, "completion_tokens": 500}
KEY = {"authorization": "Bearer k-1"}


def request(
    model: str = "big", *, feature: str = "", headers: dict[str, str] | None = None
) -> Call:
    body = {"model": model, "messages": [{"role": "user", "content": "x"}]}
    return Call(
        kind="chat",
        body=body,
        ctx=Context("r", headers=headers or {}, controls=Controls(feature=feature)),
    )


class Answers:
    """An alias's stack: answers with usage, or fails as told."""

    def __init__(self, reply: Reply | None = None, *, fails: bool = False) -> None:
        self.reply = reply
        self.fails = fails

    async def __call__(self, call: Call) -> Reply:
        if self.fails:
            raise UpstreamUnavailable("down", upstream="primary", upstream_status=503)
        call.ctx.trace.upstream = f"{call.model}-up"
        call.ctx.trace.upstream_model = call.model
        call.ctx.trace.attempts += 1
        return self.reply or Completed(data={"model": call.model, "usage": USAGE})


class Records:
    def __init__(self) -> None:
        self.seen: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.seen.append(record)


def metric(telemetry: Telemetry, name: str, **labels: str) -> float:
    value = telemetry.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def measured(
    inner: Service,
    telemetry: Telemetry,
    *,
    auth: AuthSettings | None = None,
    sinks: Sequence[Sink] = (),
    tokenizer: Tokenizer | None = None,
) -> Service:
    catalog = Catalog.of_prices(
        {
            "big": PriceSettings(input=10.0, output=30.0),
            "small": PriceSettings(input=1.0, output=2.0),
        }
    )
    recorder = Recorder(telemetry, catalog=catalog, sinks=sinks, tokenizer=tokenizer)
    return Measure(Authenticate(inner, settings=auth or AuthSettings()), recorder=recorder)


async def test_a_fallback_answer_is_priced_at_the_fallback_models_price() -> None:
    """Issue 9: the price was the alias asked for, not the one that answered."""
    dispatch = Dispatch({"big": Answers(fails=True), "small": Answers()}, fallback=None)
    fallback = Fallback(
        dispatch, chains={"big": ["small"]}, context_chains={}, on=["unavailable"],
        metrics=TrafficMetrics(),
    )  # fmt: skip
    telemetry = Telemetry(MetricsSettings())
    await measured(fallback, telemetry)(request("big"))
    await asyncio.sleep(0)
    spent = metric(telemetry, "levergate_cost_usd_total", model="big", upstream="small-up",
                   feature="")  # fmt: skip
    assert spent == pytest.approx((1000 * 1.0 + 500 * 2.0) / 1e6)


async def test_the_record_says_what_answered_and_what_it_cost() -> None:
    dispatch = Dispatch({"big": Answers(fails=True), "small": Answers()}, fallback=None)
    fallback = Fallback(
        dispatch, chains={"big": ["small"]}, context_chains={}, on=["unavailable"],
        metrics=TrafficMetrics(),
    )  # fmt: skip
    records = Records()
    await measured(fallback, Telemetry(MetricsSettings()), sinks=[records])(
        request("big", feature="f")
    )
    assert records.seen == []  # not before the answer has gone out
    await asyncio.sleep(0)
    (record,) = records.seen
    assert (record.model, record.alias, record.fallback) == ("big", "small", "small")
    assert (record.upstream, record.upstream_model) == ("small-up", "small")
    assert (record.outcome, record.status, record.error) == ("ok", 200, None)
    assert (record.tenant, record.feature, record.kind) == ("default", "f", "chat")
    assert record.tokens.input_uncached == 1000
    assert record.tokens.output == 500
    assert record.tokens.output_source is TokenSource.REPORTED
    assert record.cost_usd == pytest.approx(2000 / 1e6)
    assert record.attempts == 1
    assert record.timings.total >= record.timings.overhead >= 0


async def test_the_record_is_built_on_the_loop_the_edge_named() -> None:
    """The server names its connection's loop on the trace (`Trace.loop`): the record is
    deferred to it without asking asyncio for the running loop (a getpid system call on
    CPython 3.11); a trace naming none falls back to the running loop."""
    loop = asyncio.get_running_loop()
    asked: list[object] = []

    class Named:
        def call_soon(self, callback: object, *args: object) -> None:
            asked.append(callback)
            loop.call_soon(callback, *args)  # type: ignore[arg-type]

    records = Records()
    service = measured(Answers(), Telemetry(MetricsSettings()), sinks=[records])
    call = request("big")
    call.ctx.trace.loop = cast("asyncio.AbstractEventLoop", Named())
    await service(call)
    assert len(asked) == 1
    await asyncio.sleep(0)
    assert len(records.seen) == 1
    await service(request("big"))  # no loop named: the running one
    await asyncio.sleep(0)
    assert len(asked) == 1
    assert len(records.seen) == 2


async def test_a_cache_hit_spends_nothing_and_saves_what_the_answer_cost() -> None:
    class Hit:
        async def __call__(self, call: Call) -> Reply:
            call.ctx.trace.cache = CacheResult("exact", CacheOutcome.HIT, 1000, 500)
            return Completed(data={"usage": USAGE})

    records = Records()
    await measured(Hit(), Telemetry(MetricsSettings()), sinks=[records])(request("small"))
    await asyncio.sleep(0)
    (record,) = records.seen
    assert record.cost_usd == 0
    assert record.tokens.input == record.tokens.output == 0
    assert record.savings == {"exact": pytest.approx(2000 / 1e6)}


async def test_a_failing_sink_is_logged_once_counted_and_never_breaks_a_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        def emit(self, record: RequestRecord) -> None:
            raise RuntimeError("disk full")

    telemetry = Telemetry(MetricsSettings())
    records = Records()
    service = measured(Answers(), telemetry, sinks=[Broken(), records])
    with caplog.at_level(logging.ERROR, logger="levergate.measure"):
        for _ in range(3):
            reply = await service(request("small"))
            assert isinstance(reply, Completed)
            await asyncio.sleep(0)
    assert len(records.seen) == 3  # the sinks after it still get every record
    assert metric(telemetry, "levergate_sink_errors_total", sink="Broken") == 3
    assert len([r for r in caplog.records if "Broken" in r.getMessage()]) == 1


async def test_series_stay_bounded_across_every_label_combination() -> None:
    """Issue 10 #5: each label was bounded alone, so features x models made 10,000 series."""
    telemetry = Telemetry(MetricsSettings())
    service = measured(Answers(), telemetry)
    for i in range(10_000):
        await service(request(f"model-{i // 100}", feature=f"feature-{i % 100}"))
        if i % 500 == 0:
            await asyncio.sleep(0)
    await asyncio.sleep(0)
    text = generate_latest(telemetry.registry)
    # About 4 KB of text per label set here (8 KB with a stream's histograms), plus the rest;
    # it was 34 MB.
    assert len(text) < MetricsSettings().max_label_sets * 8_000
    assert b'feature="other"' in text


async def test_unauthenticated_callers_spend_no_label_slots() -> None:
    """Issue 10 #6: 150 requests refused with 401 took every feature slot."""
    telemetry = Telemetry(MetricsSettings())
    auth = AuthSettings(enabled=True, keys=[ApiKeySettings(key=SecretStr("k-1"), tenant="acme")])
    service = measured(Answers(), telemetry, auth=auth)
    for i in range(150):
        with pytest.raises(AuthenticationFailed):
            await service(request("small", feature=f"probe-{i}"))
    await service(request("small", feature="search", headers=KEY))
    await asyncio.sleep(0)
    assert metric(telemetry, "levergate_requests_total", route="chat", model="small",
                  upstream="small-up", feature="search", outcome="ok") == 1  # fmt: skip
    assert b"probe-" not in generate_latest(telemetry.registry)


def streamed(*chunks: bytes) -> Stream:
    async def events() -> EventSource:
        for chunk in chunks:
            yield Event(chunk)

    return Stream(events())


class Counting:
    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def count(self, text: str, *, model: str) -> TokenCount:
        self.texts.append((text, model))
        return LengthEstimate().count(text, model=model)


async def drain(service: Service, call: Call) -> None:
    reply = await service(call)
    assert isinstance(reply, Stream)
    async for _ in reply:
        pass
    await reply.aclose()
    await asyncio.sleep(0)


async def test_a_stream_without_usage_has_its_output_counted_and_flagged() -> None:
    """Issue 9 #6: llama.cpp's server sends no usage in a stream and 0 tokens were recorded."""
    chunks = [b'{"choices":[{"delta":{"role":"assistant","content":""}}]}'] + [
        b'{"choices":[{"delta":{"content":"%s"}}]}' % word for word in (b"Hello", b" there", b"!")
    ]
    records, tokenizer, telemetry = Records(), Counting(), Telemetry(MetricsSettings())
    service = measured(Answers(streamed(*chunks)), telemetry, sinks=[records],
                       tokenizer=tokenizer)  # fmt: skip
    await drain(service, request("small"))
    (record,) = records.seen
    assert tokenizer.texts == [("Hello there!", "small")]  # the model that answered
    assert metric(telemetry, "levergate_unreported_output_tokens_total", model="small",
                  upstream="small-up", feature="", how="estimated") == 3  # fmt: skip
    assert record.tokens.output == 3
    assert record.tokens.output_source is TokenSource.ESTIMATED
    assert record.cost_usd == pytest.approx(3 * 2.0 / 1e6)


async def test_nothing_is_counted_when_the_upstream_reported_usage() -> None:
    chunks = (
        b'{"choices":[{"delta":{"content":"Hello"}}]}',
        b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}',
    )
    records, tokenizer = Records(), Counting()
    service = measured(Answers(streamed(*chunks)), Telemetry(MetricsSettings()), sinks=[records],
                       tokenizer=tokenizer)  # fmt: skip
    await drain(service, request("small"))
    assert tokenizer.texts == []
    assert records.seen[0].tokens.output == 7
    assert records.seen[0].tokens.output_source is TokenSource.REPORTED


async def test_a_whole_answer_without_usage_has_its_output_counted_with_tiktoken() -> None:
    answer = Completed(data={"choices": [{"message": {"content": "hello world"}}]})
    records = Records()
    await measured(Answers(answer), Telemetry(MetricsSettings()), sinks=[records])(
        request("gpt-4o")
    )
    await asyncio.sleep(0)
    (record,) = records.seen
    assert (record.tokens.output, record.tokens.output_source) == (2, TokenSource.COUNTED)


async def test_a_refused_caller_leaves_a_record_without_a_tenant() -> None:
    records = Records()
    auth = AuthSettings(enabled=True, keys=[ApiKeySettings(key=SecretStr("k-1"), tenant="acme")])
    service = measured(Answers(), Telemetry(MetricsSettings()), auth=auth, sinks=[records])
    with pytest.raises(AuthenticationFailed):
        await service(request("small", feature="probe"))
    await service(request("small", headers=KEY))
    await asyncio.sleep(0)
    refused, served = records.seen
    assert (refused.tenant, refused.status, refused.outcome) == (None, 401, "authentication_error")
    assert refused.error == "AuthenticationFailed"
    assert not refused.authenticated
    assert served.tenant == "acme"


async def test_a_stream_cut_by_its_upstream_or_left_by_its_client_is_recorded_as_such() -> None:
    async def failing() -> EventSource:
        yield Event(b'{"choices":[{"delta":{"content":"Hello"}}]}')
        raise UpstreamUnavailable("cut", upstream="small-up", code="stream_interrupted")

    records = Records()
    service = measured(Answers(Stream(failing())), Telemetry(MetricsSettings()), sinks=[records])
    with pytest.raises(UpstreamUnavailable):
        await drain(service, request("small"))
    await asyncio.sleep(0)
    cut = records.seen[-1]
    assert (cut.outcome, cut.status, cut.error) == ("upstream_error", 200, "UpstreamUnavailable")
    assert cut.tokens.output > 0  # what was delivered is counted: no usage ever came

    left = await measured(
        Answers(streamed(b'{"choices":[{"delta":{"content":"x"}}]}')),
        Telemetry(MetricsSettings()),
        sinks=[records],
    )(request("small"))
    assert isinstance(left, Stream)
    await anext(aiter(left))
    await left.aclose()
    await asyncio.sleep(0)
    assert (records.seen[-1].outcome, records.seen[-1].status) == ("cancelled", 499)


async def test_a_record_that_cannot_be_built_is_counted_and_the_answer_unharmed() -> None:
    class Broken:
        def count(self, text: str, *, model: str) -> TokenCount:
            raise RuntimeError("no tokenizer")

    telemetry = Telemetry(MetricsSettings())
    answer = Completed(data={"choices": [{"message": {"content": "hi"}}]})
    service = measured(Answers(answer), telemetry, tokenizer=Broken())
    assert await service(request("small")) is answer
    await asyncio.sleep(0)
    assert metric(telemetry, "levergate_sink_errors_total", sink="record") == 1


@pytest.mark.parametrize(
    "data",
    [
        b'{"choices":[{"index":0,"delta":{"content":"He"},"finish_reason":null}]}',
        b'{"choices":[{"delta":{"content":"\\"quoted\\""}}]}',
        b'{"choices":[{"delta":{"content":""}}]}',
        b'{"choices":[{"delta":{"content": "spaced"}}]}',
        b'{"choices":[{"delta":{"role":"assistant","content":""}}]}',
        b'{"choices":[{"delta":{"content":"say \\"delta\\":{\\"content\\":\\"x\\""}}]}',
        b'{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}',
        b'{"choices":[{"delta":{},"finish_reason":"stop"}]}',
        b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}',
    ],
)
def test_a_chunk_judged_on_its_bytes_is_one_the_parse_judges_generated(data: bytes) -> None:
    """Measure reads a compact chat delta's text on the bytes, without parsing the event; it
    never calls a chunk generated that `has_generated_token` would not, and whatever it does
    not recognise goes to the parse, so both ways agree on every chunk."""
    parsed = has_generated_token(orjson.loads(data))
    watching = _Watching(cast("Measure", None), request("small"))  # `end` is never called
    watching.first(Event(b'{"choices":[{"delta":{"content":"first"}}]}'))
    watching.each(Event(b'{"choices":[{"delta":{"content":"first"}}]}'), 1.0)
    watching.each(Event(data), 2.0)
    assert (watching._gaps == 1) == parsed


async def test_a_whole_answer_is_seen_as_it_went_out() -> None:
    """`Measure` builds a whole answer's `Seen` positionally (on every request): each field
    holds its own value, as an observer (the request log) reads them."""
    reply = Completed(data={"usage": USAGE})
    observed: list[tuple[RequestRecord, Seen]] = []

    class Watch:
        def observe(self, record: RequestRecord, call: Call, seen: Seen) -> None:
            observed.append((record, seen))

    recorder = Recorder(Telemetry(MetricsSettings()), catalog=Catalog.of_prices({}))
    recorder.observe(Watch())
    measure = Measure(Answers(reply), recorder=recorder, headers=ResponseHeadersSettings())
    assert await measure(request()) is reply
    await asyncio.sleep(0)
    ((record, seen),) = observed
    assert seen.reply is reply
    assert (seen.outcome, seen.status, seen.error) == ("ok", 200, None)
    assert seen.total == record.timings.total
    assert seen.total is not None
    assert seen.total > 0
    assert (seen.ttft, seen.inter_token, seen.consumer_seconds) == (None, None, 0.0)
    assert (seen.generated, seen.answer, seen.usage) == ([], None, USAGE)
    assert seen.priced is not None  # priced before it went out, for its cost headers


@given(
    served=st.sampled_from([None, *Tier]),
    asked=st.sampled_from([None, *Tier]),
    batch=st.booleans(),
    outcome=st.sampled_from(["ok", "cancelled", "upstream_error"]),
    hit=st.booleans(),
)
def test_a_record_priced_before_the_answer_went_out_is_the_one_priced_after(
    served: Tier | None, asked: Tier | None, batch: bool, outcome: str, hit: bool
) -> None:
    """A whole answer is priced before it goes out (its cost headers: `Recorder.price`) and its
    record reuses that pricing, the tier and whether it was assumed included: the record is
    the one the recorder builds from the same `Seen` unpriced, whatever the tiers said."""
    recorder = Recorder(Telemetry(MetricsSettings()), catalog=Catalog.of_prices({}))
    call = request()
    trace = call.ctx.trace
    trace.tier, trace.batch, trace.alias, trace.upstream_model = asked, batch, "big", "big"
    if hit:
        trace.cache = CacheResult("exact", CacheOutcome.HIT, 10, 5, alias="big")

    def seen() -> Seen:
        return Seen(outcome, usage=USAGE, served=served, total=1.0)

    first = seen()
    assert recorder.price(call, first) is not None
    assert first.priced is not None
    priced, unpriced = recorder.record(call, first), recorder.record(call, seen())
    assert priced == unpriced

"""Bad input gets a clear OpenAI-style 4xx; upstream failures become 502/504 that keep the
upstream's message; nothing crashes the gateway."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.transport import GatewayTransport
from levergate.simulator import LatencySettings, SimHandle, SimSettings, run_simulator
from tests.e2e.conftest import USER, GatewayFactory


async def post(proxy: str, path: str, content: bytes, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(f"{proxy}{path}", content=content, headers=headers)


@pytest.mark.parametrize(
    ("content", "status", "fragment"),
    [
        (b"{not json", 400, "could not parse the JSON"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b'{"model": "m"}', 400, "'messages'"),
        (b'{"model": "m", "messages": "hello"}', 400, "expected an array"),
        (b'{"model": 7, "messages": []}', 400, "'model'"),
        (b'{"model": "m", "messages": [{"role": "user"}], "max_tokens": "ten"}', 400, "max_tokens"),
    ],
)
async def test_malformed_requests_get_a_clear_400(
    proxy: str, content: bytes, status: int, fragment: str
) -> None:
    response = await post(proxy, "/chat/completions", content)
    assert response.status_code == status
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"


async def test_unknown_paths_methods_and_oversized_bodies(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url, server={"max_body_bytes": 2048}) as proxy:
        assert (await post(proxy, "/nope", b"{}")).status_code == 404
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{proxy}/chat/completions")).status_code == 405
        big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * 4096 + b'"}]}'
        response = await post(proxy, "/chat/completions", big)
        assert response.status_code == 413
        assert "2048" in response.json()["error"]["message"]
        # The gateway still serves after all of that.
        ok = await post(
            proxy, "/chat/completions", b'{"model": "m", "messages": [{"role": "user"}]}'
        )
        assert ok.status_code == 200


async def test_unknown_model_is_a_404_when_no_wildcard_is_configured(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    async with gateway_for(
        upstreams=[{"name": "sim", "base_url": sim.base_url}],
        models=[{"name": "known", "upstream": "sim", "upstream_model": "sim-small"}],
    ) as proxy:
        sdk = openai.AsyncOpenAI(base_url=proxy, api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError) as caught:
            await sdk.chat.completions.create(model="ghost", messages=USER)
        assert caught.value.code == "model_not_found"
        reply = await sdk.chat.completions.create(model="known", messages=USER)
        assert reply.choices[0].message.content
        assert sim.stats()["requests_total"] == 1
        await sdk.close()


async def test_auth_refuses_missing_and_wrong_keys(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    auth = {"enabled": True, "keys": [{"key": "lg-good", "tenant": "team-a"}]}
    async with gateway_at(sim.base_url, auth=auth) as proxy:
        sdk = openai.AsyncOpenAI(base_url=proxy, api_key="lg-bad", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await sdk.chat.completions.create(model="m", messages=USER)
        await sdk.close()
        missing = await post(
            proxy, "/chat/completions", b'{"model":"m","messages":[{"role":"user"}]}'
        )
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "missing_api_key"
        sdk = openai.AsyncOpenAI(base_url=proxy, api_key="lg-good", max_retries=0)
        assert (await sdk.chat.completions.create(model="m", messages=USER)).choices
        await sdk.close()
    assert sim.stats()["requests_total"] == 1


async def test_an_upstream_5xx_becomes_502_with_the_upstreams_error_object(
    sim: SimHandle, proxy: str
) -> None:
    sim.configure({"faults": {"error_rate": 1.0}})
    response = await post(proxy, "/chat/completions", b'{"model":"m","messages":[{"role":"user"}]}')
    assert response.status_code == 502
    error = response.json()["error"]
    # The provider's message as it was, no prefix; levergate's context beside it.
    assert error["message"].startswith("The server had an error while processing your request.")
    assert error["levergate"] == {"upstream": "default", "status": 500}


async def test_a_malformed_upstream_body_is_a_502_in_levergates_words(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    sim.configure({"faults": {"malformed_rate": 1.0}})
    with pytest.raises(openai.InternalServerError) as caught:
        await client.chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 502
    assert "malformed" in str(caught.value)


async def test_an_upstream_4xx_keeps_its_param_type_code_and_message(
    client: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.embeddings.create(
            model="m",
            input="hi",
            encoding_format="bogus",  # type: ignore[arg-type]
        )
    assert caught.value.param == "encoding_format"
    assert caught.value.type == "invalid_request_error"
    assert (
        caught.value.message == "Error code: 400 - 'encoding_format' must be 'float' or 'base64'."
    )
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["message"] == "'encoding_format' must be 'float' or 'base64'."
    assert body["levergate"] == {"upstream": "default", "status": 400}


async def test_upstream_rate_limit_passes_through_as_429_with_retry_after(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    sim.configure({"limits": {"rpm": 1}})
    await client.chat.completions.create(model="m", messages=USER)
    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(model="m", messages=USER)
    headers = caught.value.response.headers
    assert int(headers["retry-after"]) >= 1
    # The precise wait too (the SDK prefers it), and the whole seconds rounded up, not down.
    assert 0 < int(headers["retry-after-ms"]) <= int(headers["retry-after"]) * 1000


async def test_a_hung_upstream_is_a_504_after_the_ttfb_timeout(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    sim.configure({"faults": {"hang_rate": 1.0}})
    async with gateway_for(
        upstreams=[{"name": "sim", "base_url": sim.base_url, "timeouts": {"ttfb": 0.3}}],
        models=[{"name": "*", "upstream": "sim"}],
    ) as proxy:
        sdk = openai.AsyncOpenAI(base_url=proxy, api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            await sdk.chat.completions.create(model="m", messages=USER)
        assert caught.value.status_code == 504
        await sdk.close()


async def test_a_stream_cut_mid_way_ends_with_an_error_event(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    sim.configure({"faults": {"disconnect_rate": 1.0, "disconnect_after_chunks": 2}})
    stream = await client.chat.completions.create(
        model="m", messages=USER, max_tokens=50, stream=True
    )
    received: list[ChatCompletionChunk] = []
    with pytest.raises(openai.APIError) as caught:
        await _drain(stream, received)
    assert len(received) >= 1
    assert "upstream 'default' failed while sending its answer" in str(caught.value)


async def test_a_stream_cut_before_its_first_token_is_an_http_error(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    # The role preamble arrived, no token yet: nothing the client needs has been sent, so the
    # failure is still a status code rather than a 200 that breaks off.
    sim.configure({"faults": {"disconnect_rate": 1.0, "disconnect_after_chunks": 1}})
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(model="m", messages=USER, max_tokens=50, stream=True)
    assert caught.value.status_code == 502


@pytest.mark.parametrize("tokens_per_second", [0.0, 20.0])
async def test_a_streams_head_preamble_and_first_token_arrive_together(
    tokens_per_second: float,
) -> None:
    """The head waits for the first token and no longer: what arrived with it goes out with it
    (from a simulator that sends everything at once, the whole stream), a token 50 ms later
    does not."""
    latency = LatencySettings(tokens_per_second=tokens_per_second)
    async with (
        run_simulator(SimSettings(port=0, latency=latency)) as sim,
        Gateway(Settings.for_upstream(sim.base_url)) as gateway,
    ):
        http = httpx.AsyncClient(transport=GatewayTransport(gateway), base_url="http://gateway")
        body = {"model": "m", "messages": USER, "max_tokens": 8, "stream": True}
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            first = await anext(response.aiter_raw())
        await http.aclose()
    assert b'"role":"assistant"' in first
    if tokens_per_second:
        assert first.count(b"data: ") == 2  # the preamble and the first token, nothing held back
    else:
        assert first.count(b"data: ") >= 2


async def _drain(
    stream: openai.AsyncStream[ChatCompletionChunk], into: list[ChatCompletionChunk]
) -> None:
    async for chunk in stream:
        into.append(chunk)  # noqa: PERF401 - keep what arrived before the error


async def test_an_unreachable_upstream_is_a_502_and_secrets_never_leak(
    gateway_for: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    async with gateway_for(
        upstreams=[
            {"name": "gone", "base_url": f"http://127.0.0.1:{closed}/v1", "api_key": "sk-SECRET"}
        ],
        models=[{"name": "*", "upstream": "gone"}],
    ) as proxy:
        body = b'{"model":"m","messages":[{"role":"user"}]}'
        response = await post(proxy, "/chat/completions", body)
    assert response.status_code == 502
    assert "gone" in response.json()["error"]["message"]
    assert "SECRET" not in response.text
    assert "SECRET" not in caplog.text

"""Async single requests end to end: a real gateway on loopback, the simulator upstream, the
official OpenAI SDK (raw responses, as a client of a 202 reads them), and a real loopback HTTP
receiver for the signed webhook, which answers 500 first so the retry is exercised."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from levergate.simulator import SimHandle
from levergate.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, verify
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_defer import MODEL, defer_settings, stats

SECRET = "whsec-simulated-0123456789abcdef"  # noqa: S105 - a test receiver's


class Receiver:
    """A loopback HTTP server that records deliveries; answers `fail_first` of them with 500."""

    def __init__(self, fail_first: int) -> None:
        self.fail_first = fail_first
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.arrived = asyncio.Event()
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")[1:]
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.got.append((headers, body))
        status = b"500 Internal Server Error" if len(self.got) <= self.fail_first else b"200 OK"
        writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        if status.startswith(b"200"):
            self.arrived.set()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver(fail_first=1)
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


def async_settings(sim: SimHandle, tmp: Path, receiver: Receiver) -> dict[str, Any]:
    return defer_settings(
        sim, tmp, async_requests={"enabled": True},
        webhooks={"targets": {"ops": {"url": f"http://127.0.0.1:{receiver.port}/hook",
                                      "secret": SECRET}},
                  "backoff_base_seconds": 0.05, "backoff_max_seconds": 0.1},
    )  # fmt: skip


@pytest.fixture
async def gateway(
    sim: SimHandle, gateway_for: GatewayFactory, tmp_path: Path, receiver: Receiver
) -> AsyncIterator[str]:
    async with gateway_for(**async_settings(sim, tmp_path, receiver)) as url:
        yield url


def sdk(url: str, tenant: str = "acme") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0,
                              default_headers={"x-levergate-tenant": tenant})  # fmt: skip


QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Are you asynchronous?"}]


async def until_done(url: str, request_id: str, tenant: str = "acme") -> dict[str, Any]:
    async with httpx.AsyncClient(headers={"x-levergate-tenant": tenant}) as http:
        for _ in range(400):
            found = (await http.get(f"{url}/async/{request_id}")).json()
            if found["status"] != "pending":
                return found  # type: ignore[no-any-return]
            await asyncio.sleep(0.05)
    raise AssertionError(f"{request_id} never finished")


async def test_an_async_request_answers_202_then_its_result_and_a_signed_webhook(
    gateway: str, receiver: Receiver
) -> None:
    async with sdk(gateway) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=QUESTION,
            max_tokens=4,
            extra_headers={"x-levergate-async": "true", "x-levergate-webhook": "ops"},
        )
    assert raw.status_code == 202
    accepted = orjson.loads(raw.content)
    assert accepted["object"] == "async_request"
    assert accepted["status"] == "pending"
    assert raw.headers["location"] == f"/v1/async/{accepted['id']}"
    done = await until_done(gateway, accepted["id"])
    assert done["status"] == "completed"
    assert done["deferred"] is False
    assert done["response"]["status_code"] == 200
    assert done["response"]["body"]["usage"]["completion_tokens"] == 4
    await asyncio.wait_for(receiver.arrived.wait(), 30)
    assert len(receiver.got) == 2  # the first answered 500, the retry 200
    first, second = receiver.got
    assert first[0][EVENT_ID_HEADER] == second[0][EVENT_ID_HEADER]
    for headers, body in receiver.got:
        verify(SECRET, header=headers[SIGNATURE_HEADER], body=body)
    event = orjson.loads(second[1])
    assert event["type"] == "async_request.completed"
    assert event["data"]["id"] == accepted["id"]
    assert event["data"]["response"]["body"]["choices"][0]["message"]["content"]
    with pytest.raises(ValueError, match="no signature matches"):
        verify("another-secret-0123456789", header=second[0][SIGNATURE_HEADER], body=second[1])
    with pytest.raises(ValueError, match="no signature matches"):
        verify(SECRET, header=second[0][SIGNATURE_HEADER], body=second[1] + b" ")


async def test_another_tenant_gets_404_and_unknown_ids_too(gateway: str) -> None:
    async with httpx.AsyncClient(headers={"x-levergate-tenant": "acme"}) as http:
        made = await http.post(f"{gateway}/async/embeddings",
                               json={"model": MODEL, "input": "hello"})  # fmt: skip
        assert made.status_code == 202, made.text
        request_id = made.json()["id"]
        assert (await until_done(gateway, request_id))["status"] == "completed"
        other = await http.get(f"{gateway}/async/{request_id}",
                               headers={"x-levergate-tenant": "globex"})  # fmt: skip
        assert other.status_code == 404
        assert (await http.get(f"{gateway}/async/areq_nope")).status_code == 404


async def test_a_deferred_single_request_answers_at_once_and_goes_to_the_batch_api(
    sim: SimHandle, gateway: str
) -> None:
    async with httpx.AsyncClient(headers={"x-levergate-tenant": "acme"}) as http:
        made = await http.post(f"{gateway}/chat/completions",
                               json={"model": MODEL, "messages": QUESTION, "max_tokens": 2},
                               headers={"x-levergate-defer": "24h"})  # fmt: skip
    assert made.status_code == 202, made.text
    assert made.json()["deferred"] is True
    done = await until_done(gateway, made.json()["id"])
    assert done["status"] == "completed"
    assert done["response"]["body"]["usage"]["completion_tokens"] == 2
    seen = await stats(sim)
    assert seen["batch_api"]["batches_created"] == 1
    assert "/v1/chat/completions" not in seen["requests_by_endpoint"]


@pytest.mark.parametrize(
    ("path", "headers", "body", "code"),
    [
        ("/chat/completions", {"x-levergate-async": "true", "x-levergate-webhook": "nope"},
         None, "unknown_webhook_target"),
        ("/chat/completions", {"x-levergate-async": "true",
                               "x-levergate-webhook": "http://169.254.169.254/latest"},
         None, "webhook_url_not_allowed"),
        ("/async/chat/completions", {"x-levergate-webhook-url": "http://127.0.0.1:1/"},
         None, "webhook_url_not_allowed"),
        ("/async/responses", {}, None, "invalid_endpoint"),
        ("/async/embeddings", {"x-levergate-defer": "24h"},
         {"model": "claude-haiku", "input": "x"}, "not_deferrable"),
        ("/chat/completions", {"x-levergate-defer": "1h"}, None, None),
        ("/chat/completions", {"x-levergate-deadline": "soon"}, None, None),
        ("/async/chat/completions", {}, {"model": MODEL, "messages": QUESTION, "stream": True},
         None),
    ],
)  # fmt: skip
async def test_bad_async_input_is_a_clear_400(
    gateway: str, path: str, headers: dict[str, str], body: Any, code: str | None
) -> None:
    sent = body if body is not None else {"model": MODEL, "messages": QUESTION}
    async with httpx.AsyncClient(headers={"x-levergate-tenant": "acme"}) as http:
        refused = await http.post(f"{gateway}{path}", json=sent, headers=headers)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["message"]
    if code is not None:
        assert error["code"] == code
    assert SECRET not in refused.text

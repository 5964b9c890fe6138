"""The edge against a real gateway on loopback: `GET /v1/models/{id}` through the official SDK,
auth on the model list and `/metrics`, and `x-request-id` on every error, sanitised."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.asgi import App
from levergate.server.edge import Edge
from levergate.server.exchange import Request, Response, file_response
from levergate.server.route import Route
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimHandle
from tests.e2e.conftest import USER, GatewayFactory

CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
FRESH_ID = re.compile(r"[0-9a-f]{32}")
AUTH = {"enabled": True, "keys": [{"key": "lg-good", "tenant": "team-a"}]}


async def test_models_retrieve_answers_the_model_object_or_a_404(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    async with (
        gateway_for(
            upstreams=[{"name": "sim", "base_url": sim.base_url}],
            models=[
                {"name": "known", "upstream": "sim", "upstream_model": "sim-small"},
                {"name": "org/model-7b", "upstream": "sim", "upstream_model": "sim-small"},
            ],
        ) as proxy,
        openai.AsyncOpenAI(base_url=proxy, api_key="x", max_retries=0) as sdk,
    ):
        model = await sdk.models.retrieve("known")
        assert (model.id, model.object) == ("known", "model")
        assert (await sdk.models.retrieve("org/model-7b")).id == "org/model-7b"
        with pytest.raises(openai.NotFoundError) as caught:
            await sdk.models.retrieve("ghost")
        assert caught.value.code == "model_not_found"
        assert caught.value.response.headers["x-request-id"]


async def test_with_auth_on_the_model_list_needs_a_client_key(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url, auth=AUTH) as proxy:
        async with httpx.AsyncClient(base_url=proxy) as http:
            for path in ["/models", "/models/m"]:
                refused = await http.get(path)
                assert refused.status_code == 401
                assert refused.json()["error"]["code"] == "missing_api_key"
                wrong = await http.get(path, headers={"authorization": "Bearer lg-bad"})
                assert wrong.status_code == 401
                assert wrong.json()["error"]["code"] == "invalid_api_key"
        async with openai.AsyncOpenAI(base_url=proxy, api_key="lg-good", max_retries=0) as sdk:
            assert [m.id async for m in sdk.models.list()]
        async with openai.AsyncOpenAI(base_url=proxy, api_key="lg-bad", max_retries=0) as sdk:
            with pytest.raises(openai.AuthenticationError):
                await sdk.models.list()


async def test_a_key_made_by_the_admin_api_may_list_models_until_revoked(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    admin = {"authorization": "Bearer admin-token-0123456789"}
    async with (
        gateway_at(
            sim.base_url,
            auth={"enabled": True, "store": {"backend": "memory"}},
            admin={"enabled": True, "token": "admin-token-0123456789"},
        ) as proxy,
        httpx.AsyncClient(base_url=proxy.removesuffix("/v1")) as http,
    ):
        made = (await http.post("/admin/keys", json={"tenant": "acme"}, headers=admin)).json()
        key = {"authorization": f"Bearer {made['key']}"}
        assert (await http.get("/v1/models", headers=key)).status_code == 200
        await http.post(f"/admin/keys/{made['id']}/revoke", headers=admin)
        revoked = await http.get("/v1/models", headers=key)
        assert revoked.status_code == 401
        assert revoked.json()["error"]["code"] == "invalid_api_key"


async def test_a_key_limited_to_some_models_lists_and_retrieves_only_those(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    keys = [
        {"key": "lg-narrow", "tenant": "t", "models": ["small"]},
        {"key": "lg-wide", "tenant": "t"},
    ]
    async with gateway_for(
        upstreams=[{"name": "sim", "base_url": sim.base_url}],
        models=[{"name": "small", "upstream": "sim"}, {"name": "large", "upstream": "sim"}],
        auth={"enabled": True, "keys": keys},
    ) as proxy:
        async with openai.AsyncOpenAI(base_url=proxy, api_key="lg-narrow", max_retries=0) as sdk:
            assert [m.id async for m in sdk.models.list()] == ["small"]
            assert (await sdk.models.retrieve("small")).id == "small"
            with pytest.raises(openai.NotFoundError):
                await sdk.models.retrieve("large")
        async with openai.AsyncOpenAI(base_url=proxy, api_key="lg-wide", max_retries=0) as sdk:
            assert sorted([m.id async for m in sdk.models.list()]) == ["large", "small"]


async def test_with_auth_on_metrics_needs_the_metrics_token_and_health_stays_open(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url, auth=AUTH, metrics={"token": "mt-scrape"}) as proxy:
        root = proxy.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root) as http:
            assert (await http.get("/metrics")).status_code == 401
            client_key = await http.get("/metrics", headers={"authorization": "Bearer lg-good"})
            assert client_key.status_code == 401
            scrape = await http.get("/metrics", headers={"authorization": "Bearer mt-scrape"})
            assert scrape.status_code == 200
            assert "levergate" in scrape.text
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/readyz")).status_code == 200


async def test_with_auth_on_and_no_metrics_token_metrics_is_closed_to_everyone(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with (
        gateway_at(sim.base_url, auth=AUTH) as proxy,
        httpx.AsyncClient(base_url=proxy.removesuffix("/v1")) as http,
    ):
        for headers in [{}, {"authorization": "Bearer lg-good"}]:
            closed = await http.get("/metrics", headers=headers)
            assert closed.status_code == 401
            assert closed.json()["error"]["code"] == "metrics_token_not_configured"


async def test_with_auth_off_metrics_and_models_stay_open(proxy: str) -> None:
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{proxy}/models")).status_code == 200
        assert (await http.get(proxy.removesuffix("/v1") + "/metrics")).status_code == 200


@pytest.mark.parametrize(
    "case",
    [
        ("POST", "/nope", CHAT, 404),
        ("GET", "/chat/completions", b"", 405),
        ("POST", "/chat/completions", b"{not json", 400),
        ("POST", "/chat/completions", b'{"model": "m"}', 400),
        ("POST", "/chat/completions", b'{"model": "m", "messages": "' + b"x" * 4096 + b'"}', 413),
    ],
)
async def test_every_error_of_the_edge_carries_the_request_id(
    sim: SimHandle, gateway_at: GatewayFactory, case: tuple[str, str, bytes, int]
) -> None:
    method, path, content, status = case
    async with (
        gateway_at(sim.base_url, server={"max_body_bytes": 2048}) as proxy,
        httpx.AsyncClient(base_url=proxy) as http,
    ):
        fresh = await http.request(method, path, content=content)
        assert fresh.status_code == status
        assert FRESH_ID.fullmatch(fresh.headers["x-request-id"])
        assert fresh.json()["error"]["message"]
        mine = await http.request(
            method, path, content=content, headers={"x-request-id": "client-7"}
        )
        assert mine.status_code == status
        assert mine.headers["x-request-id"] == "client-7"


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("req_01HZX-9:a.b", True),
        ("a" * 128, True),
        ("a" * 129, False),
        ("a" * 8192, False),
        ("two words", False),
        ("<script>", False),
        ("caf\xe9", False),
        ("", False),
    ],
)
async def test_a_client_request_id_is_echoed_only_when_short_and_plain(
    proxy: str, sent: str, kept: bool
) -> None:
    async with httpx.AsyncClient(base_url=proxy) as http:
        response = await http.post(
            "/chat/completions", content=CHAT, headers={b"x-request-id": sent.encode("latin-1")}
        )
    assert response.status_code == 200
    echoed = response.headers["x-request-id"]
    if kept:
        assert echoed == sent
    else:
        assert FRESH_ID.fullmatch(echoed)


async def test_the_request_id_is_sanitised_in_process_too(sim: SimHandle) -> None:
    async with Gateway(Settings.for_upstream(sim.base_url)) as gateway:
        transport = GatewayTransport(gateway)
        async with httpx.AsyncClient(transport=transport, base_url="http://lg/v1") as http:
            response = await http.post(
                "/chat/completions", content=CHAT, headers={"x-request-id": "x" * 500}
            )
            assert FRESH_ID.fullmatch(response.headers["x-request-id"])
            sdk = openai.AsyncOpenAI(
                base_url="http://lg/v1", api_key="-",
                # The SDK takes httpx clients too; its type hint names only httpx2's.
                http_client=http,  # type: ignore[arg-type]
            )  # fmt: skip
            assert (await sdk.models.retrieve("sim-small")).id == "sim-small"
            assert (await sdk.chat.completions.create(model="m", messages=USER)).choices


async def test_uploads_and_file_downloads_over_a_real_socket(tmp_path: Path) -> None:
    """A streamed upload and a file response through uvicorn, with a route table of the test's
    own (the shipped table has no file routes yet)."""
    seen: list[int] = []

    async def upload(_edge: Edge, request: Request) -> Response:
        assert request.chunks is not None
        with (tmp_path / "in.bin").open("wb") as out:
            async for chunk in request.chunks:
                seen.append(len(chunk))
                out.write(chunk)
        return Response(201)

    async def download(_edge: Edge, _request: Request) -> Response:
        return file_response(tmp_path / "in.bin", content_type="application/octet-stream",
                             chunk_bytes=64 * 1024)  # fmt: skip

    table = (
        Route("PUT", "/files/in", upload, stream=True, max_body_bytes=1024 * 1024),
        Route("GET", "/files/in", download),
    )
    data = os.urandom(700 * 1024)
    async with (
        Gateway(Settings.for_upstream("http://127.0.0.1:9/v1")) as gateway,
        _uvicorn(App(gateway, routes=table)) as root,
        httpx.AsyncClient(base_url=root) as http,
    ):
        chunks = [data[i : i + 50_000] for i in range(0, len(data), 50_000)]

        async def body() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        assert (await http.put("/files/in", content=body())).status_code == 201
        assert sum(seen) == len(data)
        assert max(seen) < len(data)
        got = await http.get("/files/in")
        assert got.headers["content-length"] == str(len(data))
        assert "transfer-encoding" not in got.headers
        assert got.content == data
        head = await http.head("/files/in")
        assert head.headers["content-length"] == str(len(data))
        assert head.content == b""
        too_big = await http.put("/files/in", content=b"x" * (1024 * 1024 + 1))
        assert too_big.status_code == 413
        assert too_big.headers["x-request-id"]

        async def endless() -> AsyncIterator[bytes]:
            for _ in range(64):
                yield b"x" * 65536

        # Chunked, no length declared: cut once 1 MiB has arrived, and the server goes on.
        seen.clear()
        cut = await http.put("/files/in", content=endless())
        assert cut.status_code == 413
        assert sum(seen) <= 1024 * 1024
        assert (await http.get("/files/in")).status_code == 200


@asynccontextmanager
async def _uvicorn(app: App) -> AsyncIterator[str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, loop="none", lifespan="off",
                            log_level=logging.WARNING)  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn stopped before it started"
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task

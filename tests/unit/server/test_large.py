"""Fair admission of large bodies at the edge (server/large.py): a request declaring a large body
waits for a slot of its tenant's before its body is read; small ones never wait; another tenant's
large request is not held behind the first tenant's queue; a waiter that gives up leaves no slot
taken; a tenant over its bound of waiters gets a 429; a key that is none gets its 401 before
the body is read. Driven through the in-process transport with routes of the test's own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import SecretStr

from levergate.config import LargeRequestSettings, Settings
from levergate.gateway import Gateway
from levergate.server.asgi import App
from levergate.server.edge import Edge
from levergate.server.exchange import Request, Response
from levergate.server.guards import admin_token
from levergate.server.large import LargeRequests
from levergate.server.route import Route
from levergate.server.transport import GatewayTransport

LARGE = b"x" * 2048
SMALL = b"x" * 100


class Held:
    """A handler that records who reached it and waits until released."""

    def __init__(self) -> None:
        self.reached: list[str] = []
        self.release = asyncio.Event()

    async def __call__(self, _edge: Edge, request: Request) -> Response:
        self.reached.append(f"{request.headers['x-levergate-tenant']}:{len(request.body)}")
        await self.release.wait()
        return Response(200, [("content-type", "text/plain")], b"ok")


def settings(*, waiting: int = 64) -> Settings:
    base = Settings.for_upstream("http://127.0.0.1:9/v1")
    limits = LargeRequestSettings(min_bytes=1024, per_tenant=1, in_flight=2,
                                  waiting_per_tenant=waiting)  # fmt: skip
    server = base.server.model_copy(update={"large_requests": limits})
    return base.model_copy(update={"server": server})


@pytest.fixture
def held() -> Held:
    return Held()


@pytest.fixture
async def http(held: Held) -> AsyncIterator[httpx.AsyncClient]:
    async with Gateway(settings(waiting=2)) as gateway:
        transport = GatewayTransport(gateway, routes=(Route("POST", "/v1/held", held),))
        async with httpx.AsyncClient(transport=transport, base_url="http://lg") as client:
            yield client


def post(http: httpx.AsyncClient, tenant: str, body: bytes) -> asyncio.Task[httpx.Response]:
    headers = {"x-levergate-tenant": tenant}
    return asyncio.create_task(http.post("/v1/held", content=body, headers=headers))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_tenants_large_requests_wait_their_turn_and_others_do_not(
    http: httpx.AsyncClient, held: Held
) -> None:
    first, second = post(http, "a", LARGE), post(http, "a", LARGE)
    await settle()
    assert held.reached == ["a:2048"]  # a's second large body is not even read yet
    small, other = post(http, "a", SMALL), post(http, "b", LARGE)
    await settle()
    assert held.reached == ["a:2048", "a:100", "b:2048"]
    held.release.set()
    answers = await asyncio.gather(first, second, small, other)
    assert [a.status_code for a in answers] == [200] * 4
    assert held.reached[-1] == "a:2048"


async def test_too_many_waiting_is_a_429_and_a_waiter_that_leaves_frees_its_place(
    http: httpx.AsyncClient, held: Held
) -> None:
    running = post(http, "a", LARGE)
    waiting = [post(http, "a", LARGE) for _ in range(2)]
    await settle()
    refused = await http.post("/v1/held", content=LARGE, headers={"x-levergate-tenant": "a"})
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_large_requests"
    assert refused.headers["retry-after"] == "1"
    waiting[0].cancel()
    await settle()
    again = post(http, "a", LARGE)  # the place the cancelled waiter left
    held.release.set()
    answers = await asyncio.gather(running, waiting[1], again)
    assert [a.status_code for a in answers] == [200] * 3
    assert held.reached == ["a:2048"] * 3


async def test_slots_are_given_back_when_waiters_are_cancelled() -> None:
    large = LargeRequests(LargeRequestSettings(min_bytes=1, per_tenant=1, in_flight=1))
    entered = asyncio.Event()

    async def hold(tenant: str, until: asyncio.Event) -> None:
        async with large.slot(tenant):
            entered.set()
            await until.wait()

    done = asyncio.Event()
    holder = asyncio.create_task(hold("a", done))
    await entered.wait()
    waiters = [asyncio.create_task(hold(t, done)) for t in "abab"]
    await settle()
    waiters[1].cancel()
    done.set()
    waiters[2].cancel()  # possibly granted already: its slot must come back all the same
    await asyncio.gather(holder, *waiters, return_exceptions=True)
    assert large.held() == 0
    async with large.slot("c"):
        assert large.held() == 1


def test_what_is_large() -> None:
    large = LargeRequests(LargeRequestSettings(min_bytes=1000))
    assert large.is_large({"content-length": "1000"})
    assert not large.is_large({"content-length": "999"})
    assert not large.is_large({})  # no body
    assert large.is_large({"transfer-encoding": "chunked"})  # may be anything


async def test_a_key_that_is_none_is_refused_before_its_body_is_read(held: Held) -> None:
    base = settings()
    auth = base.auth.model_copy(update={"enabled": True, "keys": []})
    async with Gateway(base.model_copy(update={"auth": auth})) as gateway:
        transport = GatewayTransport(gateway, routes=(Route("POST", "/v1/held", held),))
        async with httpx.AsyncClient(transport=transport, base_url="http://lg") as client:
            answer = await client.post("/v1/held", content=LARGE,
                                       headers={"authorization": "Bearer nope"})  # fmt: skip
    assert answer.status_code == 401
    assert held.reached == []


async def test_routes_with_credentials_of_their_own_take_no_slot(held: Held) -> None:
    """The admin API's caller is no tenant: its large body is not asked for a client key."""
    base = settings()
    auth = base.auth.model_copy(update={"enabled": True, "keys": []})
    admin = base.admin.model_copy(update={"enabled": True, "token": SecretStr("admin-t")})
    routes = (Route("POST", "/admin/held", held, guard=admin_token),)
    async with Gateway(base.model_copy(update={"auth": auth, "admin": admin})) as gateway:
        transport = GatewayTransport(gateway, routes=routes)
        async with httpx.AsyncClient(transport=transport, base_url="http://lg") as client:
            held.release.set()
            answer = await client.post("/admin/held", content=LARGE,
                                       headers={"authorization": "Bearer admin-t",
                                                "x-levergate-tenant": "-"})  # fmt: skip
    assert answer.status_code == 200
    assert held.reached == ["-:2048"]


async def test_a_reload_keeps_the_slots_requests_hold() -> None:
    """The app's edge is rebuilt by a reload; a request holding a slot on the old edge still
    counts, so the tenant's next large request waits instead of taking a second slot."""
    held = Held()
    routes = (Route("POST", "/v1/held", held),)
    async with Gateway(settings()) as before, Gateway(settings()) as after:
        app = App(before, routes=routes)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://lg") as http:
            first = post(http, "a", LARGE)
            await settle()
            app.swap(after)
            second = post(http, "a", LARGE)
            await settle()
            assert held.reached == ["a:2048"]  # the second waits for the first's slot
            held.release.set()
            assert [r.status_code for r in await asyncio.gather(first, second)] == [200, 200]
            assert held.reached == ["a:2048", "a:2048"]

"""`HttpProbe` over a fake HTTP client: the URL and the endpoint key's headers it sends, and how
statuses, transport failures and silence become verdicts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from pydantic import SecretStr

from levergate.config import UpstreamSettings
from levergate.upstreams.probe import HttpProbe
from levergate.upstreams.wire import HttpClient, HttpResponse, TransportFailed

UPSTREAM = UpstreamSettings(
    name="p",
    base_url="http://provider.test/v1/",
    headers={"x-org": "acme"},
    api_key=SecretStr("sk-main"),
)


@dataclass
class FakeResponse:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    read_count: int = 0

    async def read(self) -> bytes:
        self.read_count += 1
        return b"{}"

    async def chunks(self) -> AsyncIterator[bytes]:
        self.read_count += 1  # the probe drains the body (bounded) instead of reading it whole
        yield b"{}"

    async def aclose(self) -> None:
        pass


@dataclass
class EndlessResponse(FakeResponse):
    """A health endpoint that answers with a body that never ends."""

    chunks_read: int = 0

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            self.chunks_read += 1
            yield b"x" * 65536


@dataclass
class FakeClient:
    """Answers `status`, or raises `failure`, or never answers when `hang` is set."""

    status: int = 200
    failure: Exception | None = None
    hang: bool = False
    endless: bool = False
    sent: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    responses: list[FakeResponse] = field(default_factory=list)
    closed: bool = False
    settings: UpstreamSettings | None = None

    async def request(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse:
        self.sent.append((method, url, dict(headers)))
        if self.failure is not None:
            raise self.failure
        if self.hang:
            await asyncio.Event().wait()
        self.responses.append((EndlessResponse if self.endless else FakeResponse)(self.status))
        return self.responses[-1]

    async def aclose(self) -> None:
        self.closed = True


def probe_with(client: FakeClient, key: SecretStr | None = None) -> HttpProbe:
    def factory(upstream: UpstreamSettings) -> HttpClient:
        client.settings = upstream
        return client

    return HttpProbe.of(UPSTREAM, key, path="/models", timeout=0.05, http_client=factory)


async def test_it_gets_the_path_under_the_base_url_with_the_key_it_checks() -> None:
    client = FakeClient()
    probe = probe_with(client, SecretStr("sk-second"))
    assert await probe() is None
    method, url, headers = client.sent[0]
    assert (method, url) == ("GET", "http://provider.test/v1/models")
    assert headers == {"x-org": "acme", "authorization": "Bearer sk-second"}
    assert client.responses[0].read_count == 1  # the connection goes back to the pool
    assert client.settings is not None
    assert client.settings.pool.max_connections == 1


async def test_a_keyless_endpoint_is_probed_without_authorization() -> None:
    client = FakeClient()
    assert await probe_with(client)() is None
    assert "authorization" not in client.sent[0][2]


async def test_statuses_failures_and_silence_become_reasons() -> None:
    assert await probe_with(FakeClient(status=204))() is None
    assert await probe_with(FakeClient(status=401))() == "answered HTTP 401"
    assert await probe_with(FakeClient(status=503))() == "answered HTTP 503"
    refused = FakeClient(failure=TransportFailed("connection refused"))
    assert await probe_with(refused)() == "unreachable: connection refused"
    assert await probe_with(FakeClient(hang=True))() == "no answer within 0.05s"


async def test_closing_the_probe_closes_its_client() -> None:
    client = FakeClient()
    await probe_with(client).aclose()
    assert client.closed


async def test_a_probe_reads_no_more_of_an_answer_than_an_error_bodys_cap() -> None:
    client = FakeClient(endless=True)
    assert await probe_with(client)() is None
    response = client.responses[0]
    assert isinstance(response, EndlessResponse)
    cap = UPSTREAM.response_limits.error_body_bytes
    assert response.chunks_read == cap // 65536 + 1

"""The HTTP clients under the OpenAI-compatible upstream, and the rule that picks one.

Measured on this machine (benchmarks/results/server_choice.md): per small proxied request,
aiohttp spends ~190 µs of CPU and httpx several times that; levergate's own `H1Client` (h1.py)
spends a fraction of aiohttp's, so it carries cleartext upstreams (self-hosted vLLM, llama.cpp
server, Ollama, the simulator). httpx carries TLS upstreams, where it offers HTTP/2 through
ALPN and hosted providers accept it; aiohttp carries TLS upstreams with HTTP/2 turned off.

Timeouts are enforced by the caller (`upstreams.http`) per phase, so the clients here set only
the connect timeout and leave reads unbounded.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping

import aiohttp
import httpx

from levergate.config import UpstreamSettings
from levergate.upstreams.h1 import H1Client
from levergate.upstreams.wire import HttpClient, HttpResponse, TransportFailed


class _AiohttpResponse:
    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except aiohttp.ClientError as exc:
            raise TransportFailed(_describe(exc)) from exc
        finally:
            self._response.release()

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except aiohttp.ClientError as exc:
            raise TransportFailed(_describe(exc)) from exc

    async def aclose(self) -> None:
        # An unfinished body cannot go back to the pool: close drops the connection.
        if not self._response.content.is_eof():
            self._response.close()
        else:
            self._response.release()


class AiohttpClient:
    def __init__(self, settings: UpstreamSettings) -> None:
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Created lazily: a session must be made inside the event loop that will use it.
        if self._session is None:
            connector = aiohttp.TCPConnector(
                ssl=tls_context(self._settings),
                limit=self._settings.pool.max_connections,
                limit_per_host=0,
                keepalive_timeout=self._settings.pool.keepalive_seconds,
                ttl_dns_cache=300,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self._settings.timeouts.connect
                ),
                auto_decompress=True,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def request(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse:
        try:
            response = await self._open().request(method, url, data=body, headers=headers)
        except aiohttp.ClientError as exc:
            raise TransportFailed(_describe(exc)) from exc
        return _AiohttpResponse(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _HttpxResponse:
    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.TransportError as exc:
            raise TransportFailed(_describe(exc)) from exc
        finally:
            await self._response.aclose()

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except httpx.TransportError as exc:
            raise TransportFailed(_describe(exc)) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxClient:
    def __init__(self, settings: UpstreamSettings, *, http2: bool, http1: bool = True) -> None:
        self._client = httpx.AsyncClient(
            verify=tls_context(settings),
            http1=http1,
            http2=http2,
            timeout=httpx.Timeout(None, connect=settings.timeouts.connect),
            limits=httpx.Limits(
                max_connections=settings.pool.max_connections,
                max_keepalive_connections=settings.pool.max_connections,
                keepalive_expiry=settings.pool.keepalive_seconds,
            ),
        )

    async def request(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse:
        request = self._client.build_request(method, url, content=body, headers=dict(headers))
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            raise TransportFailed(_describe(exc)) from exc
        return _HttpxResponse(response)

    async def aclose(self) -> None:
        await self._client.aclose()


def client_for(settings: UpstreamSettings) -> HttpClient:
    """levergate's own `H1Client` for cleartext HTTP/1.1, httpx where HTTP/2 is wanted (TLS with
    ALPN, or forced), aiohttp for TLS with HTTP/2 turned off."""
    tls = settings.base_url.startswith("https://")
    if settings.http2 == "on" and not tls:
        # Cleartext HTTP/2 only works with prior knowledge (h2c): no HTTP/1.1 to fall back to.
        return HttpxClient(settings, http2=True, http1=False)
    if settings.http2 == "on" or (settings.http2 == "auto" and tls):
        return HttpxClient(settings, http2=True)
    if tls:
        return AiohttpClient(settings)
    return H1Client(settings)


def tls_context(settings: UpstreamSettings) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=settings.ca_bundle)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 300 else text[:300] + "..."

"""`HttpProbe`: one active health check of one endpoint key — `GET {base_url}{path}`.

Used by `layers.traffic.health_checks`. It goes through an HTTP client of its own (built by the same
`http_client` factory as the endpoint's, so TLS, CA bundle and HTTP/2 choices match), not
through the endpoint's pool or the gateway's limits: a probe must reach the provider even when
the pool is saturated or the key's rate limit is spent, and must not take a client's slot.

The endpoint's own API key and headers are sent, so a revoked key (401/403) fails its probe
like a dead server. Any 2xx passes; anything else, a refused or cut connection or no answer
within the timeout fails, with a short reason for the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from pydantic import SecretStr

from levergate.config import AnthropicUpstreamSettings, PoolSettings, UpstreamSettings
from levergate.upstreams.wire import HttpClient, HttpResponse, TransportFailed

# Probes are sequential per endpoint key: one connection, kept alive between them, is enough.
_PROBE_POOL = PoolSettings(max_connections=1)


class Probe(Protocol):
    async def __call__(self) -> str | None:
        """None when the endpoint is healthy, else why it is not."""
        ...

    async def aclose(self) -> None: ...


class HttpProbe:
    def __init__(
        self,
        *,
        client: HttpClient,
        url: str,
        headers: dict[str, str],
        timeout: float,
        max_body_bytes: int,
    ) -> None:
        self._client = client
        self.url = url
        self._headers = headers
        self._timeout = timeout
        self._max_body = max_body_bytes

    @classmethod
    def of(
        cls,
        upstream: UpstreamSettings,
        key: SecretStr | None,
        *,
        path: str,
        timeout: float,
        http_client: Callable[[UpstreamSettings], HttpClient],
    ) -> HttpProbe:
        headers = dict(upstream.headers)
        if key is not None:
            headers["authorization"] = f"Bearer {key.get_secret_value()}"
        url = upstream.base_url.rstrip("/") + path
        if isinstance(upstream, AnthropicUpstreamSettings):  # its own auth headers and version path
            from levergate.upstreams.anthropic import api_root, auth_headers

            headers = auth_headers(upstream, key, keyed=True)
            url = api_root(upstream) + "/v1" + path
        client = http_client(upstream.model_copy(update={"pool": _PROBE_POOL}))
        # A probe's answer is only looked at for its status: read no more of it than of an
        # error body.
        limit = upstream.response_limits.error_body_bytes
        return cls(client=client, url=url, headers=headers, timeout=timeout, max_body_bytes=limit)

    async def __call__(self) -> str | None:
        try:
            async with asyncio.timeout(self._timeout):
                response = await self._client.request(
                    "GET", self.url, body=None, headers=self._headers
                )
                await self._drain(response)
        except TimeoutError:
            return f"no answer within {self._timeout:g}s"
        except TransportFailed as exc:
            return f"unreachable: {exc}"
        if 200 <= response.status < 300:
            return None
        return f"answered HTTP {response.status}"

    async def _drain(self, response: HttpResponse) -> None:
        """Read the body to its end (so the connection is kept alive), but at most
        `max_body_bytes` of it: beyond, the connection is dropped instead."""
        chunks = response.chunks()
        read = 0
        try:
            async for chunk in chunks:
                read += len(chunk)
                if read > self._max_body:
                    break
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
            await response.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

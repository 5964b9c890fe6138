"""Upstreams: the services at the bottom of the stack that actually answer a call.

Every kind of upstream is an `Endpoint`: a `Service` with a name, a model list and a close.
`make_endpoint` is the one place that turns an upstream's settings into its endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from levergate.config import AnthropicUpstreamSettings, LocalUpstreamSettings, UpstreamSettings
from levergate.core.call import Call
from levergate.core.reply import Reply
from levergate.upstreams.client import client_for
from levergate.upstreams.wire import HttpClient


class Endpoint(Protocol):
    name: str

    async def __call__(self, call: Call, /) -> Reply: ...

    async def models(self) -> list[dict[str, Any]]: ...

    async def aclose(self) -> None: ...


def make_endpoint(
    settings: UpstreamSettings | LocalUpstreamSettings,
    *,
    http_client: Callable[[UpstreamSettings], HttpClient] = client_for,
) -> Endpoint:
    if isinstance(settings, LocalUpstreamSettings):
        # Imported here: the local engine needs the optional `local` extra (llama-cpp-python).
        from levergate.upstreams.local import LocalEndpoint

        return LocalEndpoint(settings)
    if isinstance(settings, AnthropicUpstreamSettings):
        from levergate.upstreams.anthropic import AnthropicUpstream

        return AnthropicUpstream(settings, client=http_client(settings))
    from levergate.upstreams.http import OpenAIUpstream

    return OpenAIUpstream(settings, client=http_client(settings))

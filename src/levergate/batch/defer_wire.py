"""The providers' batch APIs as levergate's deferral (batch/defer.py) calls them: OpenAI's
(`/v1/files` purpose batch, `/v1/batches`) and Anthropic's Message Batches
(`/v1/messages/batches`, `results_url`). One small client per API over the gateway's httpx;
only the calls deferral needs, every answer bounded (`defer.max_result_bytes` for result files,
1 MiB for the JSON objects), every failure one of two errors:

- `ProviderRefused`: the provider said no (4xx): deferral gives up on this part at once and its
  lines run the ordinary way;
- `ProviderDown`: the provider could not answer (5xx, 429, a network error, a timeout): retried
  on the backoff schedule, `defer.max_failures` times in a row.

Request bodies stream from the provider input file deferral wrote on disk (OpenAI's multipart
upload and Anthropic's `{"requests": [...]}` alike), so a 50,000-line batch is never held whole
in memory; result files stream back line by line.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urljoin

import httpx
import orjson

from levergate.config import AnthropicUpstreamSettings, UpstreamSettings
from levergate.core.json_bound import parse_json
from levergate.upstreams.anthropic import api_root, auth_headers

JSON_CAP = 1024 * 1024
CHUNK = 256 * 1024


class ProviderRefused(Exception):
    """A 4xx from the provider's batch API: not worth retrying."""


class ProviderDown(Exception):
    """The provider's batch API did not answer usably; retry later."""


@dataclass(frozen=True, slots=True)
class Polled:
    ended: bool
    outputs: tuple[str, ...] = ()  # OpenAI: output and error file ids; Anthropic: results url
    status: str = ""


class ProviderBatches(Protocol):
    api: str

    async def upload(self, path: Path) -> str:
        """The provider's id for the input file ('' where the API takes requests inline)."""

    async def find(self, tag: str) -> str | None:
        """A batch this part submitted before a crash (by metadata), or None."""

    async def create(self, *, path: Path, file_id: str, endpoint: str, tag: str) -> str: ...

    async def poll(self, batch_id: str) -> Polled: ...

    def results(self, outputs: tuple[str, ...]) -> AsyncIterator[dict[str, Any]]:
        """Every result line of an ended batch, parsed."""

    async def cancel(self, batch_id: str) -> None: ...


class _Client:
    def __init__(self, http: httpx.AsyncClient, *, root: str, headers: dict[str, str],
                 max_result_bytes: int, timeout: float) -> None:  # fmt: skip
        self._http = http
        self._root = root.rstrip("/")
        self._headers = headers
        self._cap = max_result_bytes
        self._timeout = timeout

    async def _json(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        sent = {**self._headers, **headers} if headers else self._headers
        try:
            async with self._http.stream(method, self._root + path, headers=sent,
                                         timeout=self._timeout, **kwargs) as response:  # fmt: skip
                raw = b""
                async for chunk in response.aiter_bytes():
                    raw += chunk
                    if len(raw) > JSON_CAP:
                        raise ProviderDown(f"{method} {path}: answer over {JSON_CAP} bytes")
        except httpx.HTTPError as exc:
            raise ProviderDown(f"{method} {path}: {type(exc).__name__}") from None
        _check(response.status_code, f"{method} {path}", raw)
        try:
            data = parse_json(raw)
        except orjson.JSONDecodeError:
            raise ProviderDown(f"{method} {path}: not JSON") from None
        if not isinstance(data, dict):
            raise ProviderDown(f"{method} {path}: not a JSON object")
        return data

    async def _lines(self, url: str) -> AsyncIterator[dict[str, Any]]:
        seen = 0
        try:
            async with self._http.stream("GET", url, headers=self._headers,
                                         timeout=self._timeout) as response:  # fmt: skip
                if response.status_code >= 300:
                    _check(response.status_code, f"GET {url}", await response.aread())
                async for line in response.aiter_lines():
                    seen += len(line) + 1
                    if seen > self._cap:
                        raise ProviderDown(f"results over defer.max_result_bytes ({self._cap})")
                    if line.strip():
                        parsed = parse_json(line)
                        if isinstance(parsed, dict):
                            yield parsed
        except (httpx.HTTPError, orjson.JSONDecodeError) as exc:
            raise ProviderDown(f"GET results: {type(exc).__name__}") from None


def _check(status: int, what: str, raw: bytes) -> None:
    if status < 300:
        return
    detail = raw[:200].decode("utf-8", "replace")
    if status in (408, 409, 429) or status >= 500:
        raise ProviderDown(f"{what}: {status}")
    raise ProviderRefused(f"{what}: {status} {detail}")


class OpenAIBatches(_Client):
    api = "openai"

    async def upload(self, path: Path) -> str:
        boundary = secrets.token_hex(16)
        head = (
            f'--{boundary}\r\ncontent-disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\ncontent-disposition: form-data; name="file"; '
            f'filename="{path.name}"\r\ncontent-type: application/jsonl\r\n\r\n'
        ).encode()

        async def body() -> AsyncIterator[bytes]:
            yield head
            with path.open("rb") as source:
                while chunk := source.read(CHUNK):
                    yield chunk
            yield f"\r\n--{boundary}--\r\n".encode()

        headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
        data = await self._json("POST", "/files", content=body(), headers=headers)
        return str(data["id"])

    async def find(self, tag: str) -> str | None:
        data = await self._json("GET", "/batches", params={"limit": 100})
        for batch in data.get("data") or ():
            if isinstance(batch, dict) and (batch.get("metadata") or {}).get("levergate") == tag:
                return str(batch["id"])
        return None

    async def create(self, *, path: Path, file_id: str, endpoint: str, tag: str) -> str:
        del path
        body = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h",
                "metadata": {"levergate": tag}}  # fmt: skip
        return str((await self._json("POST", "/batches", json=body))["id"])

    async def poll(self, batch_id: str) -> Polled:
        data = await self._json("GET", f"/batches/{batch_id}")
        status = str(data.get("status"))
        if status not in ("completed", "failed", "expired", "cancelled"):
            return Polled(ended=False, status=status)
        outputs = tuple(str(data[k]) for k in ("output_file_id", "error_file_id") if data.get(k))
        return Polled(ended=True, outputs=outputs, status=status)

    async def results(self, outputs: tuple[str, ...]) -> AsyncIterator[dict[str, Any]]:
        for file_id in outputs:
            async for line in self._lines(f"{self._root}/files/{file_id}/content"):
                yield line

    async def cancel(self, batch_id: str) -> None:
        await self._json("POST", f"/batches/{batch_id}/cancel")


class AnthropicBatches(_Client):
    api = "anthropic"

    async def upload(self, path: Path) -> str:
        del path
        return ""

    async def find(self, tag: str) -> str | None:
        del tag  # Message Batches carry no metadata to find a lost submission by
        return None

    async def create(self, *, path: Path, file_id: str, endpoint: str, tag: str) -> str:
        del file_id, endpoint, tag

        async def body() -> AsyncIterator[bytes]:
            yield b'{"requests":['
            with path.open("rb") as source:
                for n, line in enumerate(source):
                    yield (b"," if n else b"") + line.rstrip(b"\n")
            yield b"]}"

        data = await self._json("POST", "/v1/messages/batches", content=body())
        return str(data["id"])

    async def poll(self, batch_id: str) -> Polled:
        data = await self._json("GET", f"/v1/messages/batches/{batch_id}")
        status = str(data.get("processing_status"))
        if status != "ended":
            return Polled(ended=False, status=status)
        url = data.get("results_url")
        outputs = (urljoin(self._root + "/", str(url)),) if url else ()
        return Polled(ended=True, outputs=outputs, status=status)

    async def results(self, outputs: tuple[str, ...]) -> AsyncIterator[dict[str, Any]]:
        for url in outputs:
            async for line in self._lines(url):
                yield line

    async def cancel(self, batch_id: str) -> None:
        await self._json("POST", f"/v1/messages/batches/{batch_id}/cancel")


def provider_for(upstream: UpstreamSettings, *, http: httpx.AsyncClient, max_result_bytes: int,
                 timeout: float) -> ProviderBatches:  # fmt: skip
    """The batch API of a configured upstream (its base URL and its first key)."""
    if isinstance(upstream, AnthropicUpstreamSettings):
        headers = {"content-type": "application/json", **auth_headers(upstream)}
        return AnthropicBatches(http, root=api_root(upstream), headers=headers,
                                max_result_bytes=max_result_bytes, timeout=timeout)  # fmt: skip
    key = upstream.all_keys()[0]
    headers = {"authorization": f"Bearer {key.get_secret_value()}"} if key else {}
    return OpenAIBatches(http, root=upstream.base_url, headers={**upstream.headers, **headers},
                         max_result_bytes=max_result_bytes, timeout=timeout)  # fmt: skip

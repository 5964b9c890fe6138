"""The OpenAI Responses API (`POST /v1/responses`): its bounds and where levergate keeps the
conversations it translates.

A Responses request goes one of two ways (server/handlers/responses.py, layers/responses.py):

- `native`: passed through unchanged to an upstream that serves `/v1/responses` itself (set
  `responses: native` on the upstream: OpenAI does); the upstream keeps the conversation.
- `translate` (every upstream's default): turned into a chat-completions call, so self-hosted
  servers and the simulator's chat route serve it too, and the answer turned back. Then
  levergate keeps each stored response (its input and output items) for `previous_response_id`
  and `GET /v1/responses/{id}`, for `ttl_seconds` (OpenAI keeps them 30 days), in the store
  `store` names (its `stores` connection, or `backend`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from levergate.config.base import _Strict
from levergate.config.local import cache_home
from levergate.config.stores import ConnectionName

DAY = 24 * 3600.0


class ResponseStoreSettings(_Strict):
    """Where translated responses live. `auto`: what the section's `stores` connection offers
    (redis, then sqlite); with no connection, Redis when the cache store or the traffic store
    is Redis (replicas then share conversations, as they share everything else), SQLite when
    the cache store is SQLite (the embedded `levergate serve` default: conversations survive a
    restart), else in memory — so gateways built in one process (tests, library users) never
    see each other's conversations and nothing writes a file unasked, as with the cache.

    Every backend is bounded by the gateway itself, per tenant and in total (stores/tenant_kv.py:
    a tenant over its bound loses its own least recently used responses; a store over its total
    loses those of the tenant holding the most), so one tenant can neither fill the store nor
    push another's conversations out, and responses never fill a Redis they share with the rate
    limits and caches: size that Redis's `maxmemory` above `max_bytes` plus the caches' needs,
    or give responses a Redis of their own (a `stores` connection named by `connection`)."""

    backend: Literal["auto", "memory", "sqlite", "redis"] = "auto"
    # The `stores` connection (None: `stores.default`, when there is one).
    connection: ConnectionName | None = None
    # The in-memory store's total (entries, keys and bookkeeping).
    memory_bytes: int = Field(128 * 1024 * 1024, ge=0)
    # The SQLite and Redis stores' total.
    max_bytes: int = Field(1024 * 1024 * 1024, ge=0)
    # What one tenant may keep, on every backend. A single-tenant gateway may raise it to the
    # total; shared by many tenants, it bounds the share the heaviest one takes.
    tenant_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    # Under the user's cache folder, never the working directory (nor a checkout).
    sqlite_path: str = Field(default_factory=lambda: str(Path(cache_home()) / "responses.sqlite3"))
    # None: the cache store's URL (or the traffic store's when only that one is Redis).
    # Deprecated: set `stores.<connection>.redis_url` (kept for one release).
    redis_url: str | None = None
    # The `{...}` hash tag keeps every key of the store in one Redis Cluster slot (its writes
    # are one script over several keys).
    redis_prefix: str = "levergate:{responses}:"
    # A store slower than this fails the request that needed it (503), never hangs it.
    timeout_seconds: float = Field(2.0, gt=0)


class ResponsesSettings(_Strict):
    # OpenAI keeps stored responses 30 days. Here a response is kept this long after it was
    # last read or continued (a conversation's earlier turns are read with each new turn, so
    # they stay as long as it goes on).
    ttl_seconds: float = Field(30 * DAY, gt=0)
    # Input items of one request (OpenAI documents no bound; this one is far above any agent's
    # turn, and bounds the translation's work).
    max_input_items: int = Field(2048, ge=1)
    # Items (and turns) of a whole conversation (all earlier turns through previous_response_id
    # plus this one): past it the request is a 400, as a context window would refuse it.
    max_conversation_items: int = Field(4096, ge=1)
    # One stored turn (its input and response, JSON): a larger one is not kept (a later turn
    # naming it is a 404).
    max_stored_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    # Characters of a response id a client may send (OpenAI's are ~50).
    max_id_chars: int = Field(128, ge=8)
    store: ResponseStoreSettings = Field(default_factory=ResponseStoreSettings)

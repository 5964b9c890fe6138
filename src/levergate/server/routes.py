"""The edge's route table: (method, path pattern) -> handler, one line per endpoint.

Adding an endpoint is one line in `ROUTES` plus its handler (a module under `server/handlers/`);
a feature adds its own through its `routes()` (`server.route.Routed`: the Batch API's are in
batch/http.py), which `Edge` appends to these. A line (`server.route.Route`)
says, besides method, path and handler:

- `guard`: who may call it (`server.guards`), checked before the
  body is read. Routes that run a `Call` leave it to the pipeline's `Authenticate` layer, which
  also counts refused requests; the others need one.
- `enabled`: whether the gateway serves the route at all, decided from the settings at start
  (the admin API is off by default: then its paths are 404s like any unknown one).
- `stream`: the handler gets the body as an async iterator of chunks (`Request.chunks`: uploads
  written to disk as they arrive) instead of whole (`Request.body`).
- `max_body_bytes`: the route's own body limit; by default `server.max_body_bytes` for whole
  bodies and `server.max_upload_bytes` for streamed ones, plus the multipart framing around
  the file (`MULTIPART_OVERHEAD_BYTES`, config/server.py), so the limit is the file's.
- `errors`: how the route's errors are written, when not in OpenAI's envelope (the Anthropic
  routes answer in Anthropic's, 413s and guard refusals included).
- `id_header`: the protocol's own request-id header, sent beside `x-request-id` on every
  answer of the route, errors included (the anthropic SDK reads `request-id`).

Matching (`Router.match`) looks static paths up in a dict first — the hot path, POST
/v1/chat/completions, costs two dict lookups — and tries the precompiled patterns only for the
paths with parameters (`/v1/models/{id}`, `/v1/batches/{id}/cancel`). A path no route knows is a
404; a known path with a method it does not take is a 405 with an `allow` header. HEAD is
allowed wherever GET is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from levergate.config.server import MULTIPART_OVERHEAD_BYTES
from levergate.errors import MethodNotAllowed, NotFound
from levergate.server import admin, guards
from levergate.server.exchange import NO_PARAMS
from levergate.server.handlers import anthropic, openai, ops, prompt_cache, responses
from levergate.server.route import Guard, Handler, Route

if TYPE_CHECKING:
    from levergate.config import ServerSettings


def _admin(method: str, path: str, handler: Handler) -> Route:
    """An admin API route: on its own credential, and absent unless `admin.enabled`."""
    return Route(method, path, handler, guard=guards.admin_token, enabled=admin.enabled)


def _anthropic(method: str, path: str, handler: Handler, *, guard: Guard | None = None) -> Route:
    """An Anthropic API route: its errors in Anthropic's envelope, so the SDK's classes apply,
    and its request id where the SDK reads it (`message._request_id`, `error.request_id`)."""
    return Route(method, path, handler, guard=guard, errors=anthropic.error_response,
                 id_header=anthropic.REQUEST_ID)  # fmt: skip


ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/chat/completions", openai.chat_completions),
    Route("POST", "/v1/completions", openai.completions),
    Route("POST", "/v1/embeddings", openai.embeddings),
    Route("POST", "/v1/responses", responses.create),
    Route("GET", "/v1/responses/{id}", responses.retrieve, guard=guards.client_key),
    Route("DELETE", "/v1/responses/{id}", responses.delete, guard=guards.client_key),
    Route("GET", "/v1/responses/{id}/input_items", responses.input_items, guard=guards.client_key),
    Route("GET", "/v1/models", openai.list_models, guard=guards.client_key),
    Route("GET", "/v1/models/{model:path}", openai.retrieve_model, guard=guards.client_key),
    # Anthropic's Messages API, translated to chat calls (server/handlers/anthropic.py).
    _anthropic("POST", "/v1/messages", anthropic.messages),
    _anthropic(
        "POST", "/v1/messages/count_tokens", anthropic.count_tokens, guard=guards.client_key
    ),
    Route("GET", "/healthz", ops.healthz),
    Route("GET", "/readyz", ops.readyz),
    Route("GET", "/metrics", ops.metrics, guard=guards.metrics_token),
    # The admin API (server/admin.py), on its own credential; absent unless admin.enabled.
    _admin("POST", "/admin/keys", admin.create_key),
    _admin("GET", "/admin/keys", admin.list_keys),
    _admin("GET", "/admin/tenants/{tenant}/keys", admin.list_keys),
    _admin("GET", "/admin/keys/{id}", admin.show_key),
    _admin("POST", "/admin/keys/{id}", admin.update_key),
    _admin("DELETE", "/admin/keys/{id}", admin.revoke_key),
    _admin("POST", "/admin/keys/{id}/rotate", admin.rotate_key),
    _admin("POST", "/admin/keys/{id}/revoke", admin.revoke_key),
    _admin("GET", "/admin/keys/{id}/spend", admin.key_spend),
    _admin("POST", "/admin/reload", admin.reload_config),
    # The prompt-cache optimizer's prefix breakers (server/handlers/prompt_cache.py).
    _admin("GET", "/admin/prompt-cache/findings", prompt_cache.findings),
)


@dataclass(frozen=True, slots=True)
class Bound:
    """A route with its body limit resolved against the settings."""

    route: Route
    limit: int


Methods = dict[str, Bound]
# `{name}` is one non-empty path segment; `{name:path}` is the rest of the path, slashes
# included (model ids such as `org/model`: the SDKs percent-encode the slash, servers decode it).
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(:path)?\}")


class Router:
    def __init__(self, routes: tuple[Route, ...], *, settings: ServerSettings) -> None:
        self._static: dict[str, Methods] = {}
        self._patterns: list[tuple[re.Pattern[str], Methods]] = []
        by_pattern: dict[str, Methods] = {}
        for route in routes:
            default = (settings.max_upload_bytes + MULTIPART_OVERHEAD_BYTES if route.stream
                       else settings.max_body_bytes)  # fmt: skip
            limit = default if route.max_body_bytes is None else route.max_body_bytes
            bound = Bound(route, limit)
            if _PARAM.search(route.path) is None:
                methods = self._static.setdefault(route.path, {})
            else:
                methods = by_pattern.setdefault(route.path, {})
            if route.method in methods:
                raise ValueError(f"two routes for {route.method} {route.path}")
            methods[route.method] = bound
            if route.method == "GET" and "HEAD" not in methods:
                methods["HEAD"] = bound
        self._patterns = [(_compile(path), methods) for path, methods in by_pattern.items()]

    def match(self, method: str, path: str) -> tuple[Bound, Mapping[str, str]]:
        """The route for (method, path) and its path parameters; NotFound or MethodNotAllowed."""
        methods = self._static.get(path)
        params = NO_PARAMS
        if methods is None:
            for pattern, candidates in self._patterns:
                found = pattern.fullmatch(path)
                if found is not None:
                    methods, params = candidates, found.groupdict()
                    break
            else:
                raise NotFound(f"Unknown path: {path}", code="unknown_url")
        bound = methods.get(method)
        if bound is None:
            allow = ", ".join(sorted(methods))
            raise MethodNotAllowed(f"{path} does not take {method}; use {allow}.", allow=allow)
        return bound, params


def _compile(path: str) -> re.Pattern[str]:
    """`/v1/batches/{id}/cancel` -> a pattern whose named groups are the parameters."""
    regex, at = [], 0
    for param in _PARAM.finditer(path):
        regex.append(re.escape(path[at : param.start()]))
        regex.append(f"(?P<{param[1]}>{'.+' if param[2] else '[^/]+'})")
        at = param.end()
    regex.append(re.escape(path[at:]))
    return re.compile("".join(regex))

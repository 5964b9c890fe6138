"""`GET /admin/prompt-cache/findings`: the prefix breakers the prompt-cache optimizer found.

An admin route (server/routes.py `_admin`: `admin.enabled`, `Authorization: Bearer
<admin.token>`). It returns the newest findings of `PromptCacheState.findings` (kept by the
optimizer's linter, `layers/prompt_cache/lint.py`; the coming traffic analyzer reads the same
list), newest first, in their shape only: a finding holds the kind, the byte position and
length of the varying span, how much would be cacheable after it, and its shape (digits as 9,
letters as a), never the prompt's text.

    GET /admin/prompt-cache/findings?limit=20&model=support
    -> {"object": "list", "data": [{"object": "prompt_cache.finding", "model": "support",
        "kind": "timestamp", "position": 212, "length": 20, "shared_after": 6144,
        "shape": "9999-99-99a99:99:99a", "age_seconds": 3.5, "description": "..."}],
        "has_more": false}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from levergate.errors import BadRequest
from levergate.layers.prompt_cache import Finding
from levergate.server.exchange import Request, Response
from levergate.server.params import limit_of, query

if TYPE_CHECKING:
    from levergate.server.edge import Edge

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_MODEL = 256


async def findings(edge: Edge, request: Request) -> Response:
    params = query(request)
    limit = limit_of(params, default=DEFAULT_LIMIT, most=MAX_LIMIT)
    model = params.get("model")
    if model is not None and not 1 <= len(model) <= MAX_MODEL:
        raise BadRequest(f"'model' must be 1 to {MAX_MODEL} characters.", param="model")
    pipeline = edge.gateway.pipeline
    newest = pipeline.shared.prompt_cache.findings.newest()
    if model is not None:
        newest = [f for f in newest if f.model == model]
    now = edge.gateway.clock.now()
    data = [wire(f, now=now) for f in newest[:limit]]
    body = {"object": "list", "data": data, "has_more": len(newest) > limit}
    headers = [("content-type", "application/json"), ("cache-control", "no-store")]
    return Response(200, headers, orjson.dumps(body))


def wire(finding: Finding, *, now: float) -> dict[str, Any]:
    """One finding as the API shows it: its shape and position, never the prompt's text."""
    return {
        "object": "prompt_cache.finding",
        "model": finding.model,
        "kind": finding.kind,
        "position": finding.position,
        "length": finding.length,
        "shared_after": finding.shared_after,
        "shape": finding.shape,
        "age_seconds": round(max(0.0, now - finding.at), 3),
        "description": finding.describe(),
    }

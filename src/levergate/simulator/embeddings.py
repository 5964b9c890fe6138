"""`/v1/embeddings`: deterministic unit vectors, one per input.

Each vector is derived from a hash of (seed, input text) (see `tokens.embedding`), so equal
texts get identical vectors and different texts near-orthogonal ones, which is what cache,
batching and routing tests need. `dimensions` shortens them as OpenAI's v3 models allow, and
`encoding_format: "base64"` packs them as little-endian float32, as the OpenAI SDK asks by
default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from levergate.simulator import responses, tokens
from levergate.simulator.faults import Fault, malformed_body
from levergate.simulator.generate import check_int
from levergate.simulator.responses import Reply, SimError
from levergate.simulator.settings import SimSettings

_MAX_INPUTS = 2048
_MAX_DIMENSIONS = 16_384
_MAX_FLOATS = 2048 * 4096  # per request, so one request cannot tie the process up for long


def embeddings_reply(*, body: Mapping[str, Any], settings: SimSettings) -> tuple[Reply, int]:
    """Deterministic unit vectors, one per input; returns the reply and its prompt tokens."""
    try:
        inputs = tokens.embedding_inputs(body["input"])
    except (TypeError, ValueError) as exc:
        raise SimError(400, f"Invalid 'input': {exc}.", param="input") from None
    if len(inputs) > _MAX_INPUTS:
        raise SimError(400, f"'input' may hold at most {_MAX_INPUTS} items.", param="input")
    dim = body.get("dimensions")
    if dim is None:
        dim = settings.embedding_dim
    else:
        check_int("dimensions", dim, high=_MAX_DIMENSIONS)
    if len(inputs) * dim > _MAX_FLOATS:
        raise SimError(
            400, f"At most {_MAX_FLOATS} numbers per request (inputs x dimensions).", param="input"
        )
    encoding = body.get("encoding_format") or "float"
    if encoding not in {"float", "base64"}:
        raise SimError(
            400, "'encoding_format' must be 'float' or 'base64'.", param="encoding_format"
        )
    vectors: list[list[float] | str] = []
    for text, _ in inputs:
        vector = tokens.embedding(seed=settings.seed, text=text, dim=dim)
        vectors.append(tokens.encode_base64(vector) if encoding == "base64" else vector)
    prompt_tokens = sum(count for _, count in inputs)
    payload = responses.embeddings_body(
        model=str(body["model"]), vectors=vectors, prompt_tokens=prompt_tokens
    )
    return Reply(status=200, body=payload), prompt_tokens


def with_fault(reply: Reply, fault: Fault) -> Reply:
    """A malformed or cut non-streamed body (embeddings); other faults leave it as it is."""
    if fault is Fault.MALFORMED:
        return Reply(status=200, body=malformed_body(stream=False))
    if fault is Fault.DISCONNECT:
        reply.cut_after = len(reply.body) // 2
    return reply

"""levergate's exception tree as Anthropic's error envelope, for the `/v1/messages` routes.

Anthropic's shape (https://docs.anthropic.com/en/api/errors):

    {"type": "error", "error": {"type": "invalid_request_error", "message": "..."}}

with the statuses the official SDK turns into its own classes: 400 invalid_request_error
(`BadRequestError`), 401 authentication_error, 403 permission_error, 404 not_found_error,
413 request_too_large, 429 rate_limit_error (`RateLimitError`), 500 api_error, 504
timeout_error, 529 overloaded_error (`OverloadedError`). A mid-stream failure is the same
object as an `event: error` frame.

The mapping keeps levergate's status except where Anthropic has a word of its own: the
gateway shedding load (503) and an upstream that answered 503 or 529 are Anthropic's 529
`overloaded_error`; other upstream failures stay 502 / 504. The headers are the OpenAI
route's (`retry-after`, `retry-after-ms`, `x-should-retry`): the anthropic SDK reads all three.
"""

from __future__ import annotations

from typing import Any

from levergate.errors import LevergateError, UpstreamError, UpstreamUnavailable

OVERLOADED = 529
_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    OVERLOADED: "overloaded_error",
}


def anthropic_error(exc: LevergateError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(HTTP status, Anthropic error JSON, headers) for an error on an Anthropic route."""
    status = exc.http_status
    upstream = exc.upstream_status if isinstance(exc, UpstreamError) else None
    if status == 503 or (isinstance(exc, UpstreamUnavailable) and upstream in (503, 529)):
        status = OVERLOADED
    kind = _BY_STATUS.get(status)
    if kind is None:
        kind = "api_error" if status >= 500 else "invalid_request_error"
    return status, error_object(kind, _message(exc)), exc.headers()


def error_object(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _message(exc: LevergateError) -> str:
    """The provider's own words when it sent them (scrubbed, and replaced by levergate's for
    the gateway's own refused upstream key), else levergate's."""
    if isinstance(exc, UpstreamError) and exc.provider_error is not None:
        message = exc.provider_error.get("message")
        if isinstance(message, str) and message:
            return message
    return exc.message

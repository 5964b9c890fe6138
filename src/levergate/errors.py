"""One exception tree for the whole gateway, and the one function that maps it to the wire.

    LevergateError                    500 server_error        (never raised bare)
    ├── ConfigError                   -   not an HTTP error: raised at start-up, printed by the CLI
    ├── ClientError                   4xx: the caller sent something we refuse
    │   ├── BadRequest                400 invalid_request_error
    │   ├── AuthenticationFailed      401 authentication_error
    │   ├── PermissionDenied          403 permission_error
    │   ├── NotFound                  404 not_found_error      (unknown route)
    │   │   └── ModelNotFound         404 model_not_found
    │   ├── MethodNotAllowed          405                      (carries the allow header)
    │   ├── RequestTimeout            408 (the head or body arrived too slowly)
    │   ├── PayloadTooLarge           413
    │   ├── HeadersTooLarge           431
    │   └── RateLimited               429 rate_limit_error     (carries retry_after)
    │       ├── BudgetExceeded        429 insufficient_quota   (a key's money budget is spent)
    │       └── QuotaExceeded         429 insufficient_quota   (a tenant's storage quota is full)
    ├── Overloaded                    503 overloaded_error     (shed; carries retry_after)
    ├── ShuttingDown                  503 server_error         (outlasted the graceful shutdown)
    └── UpstreamError                 the provider failed us; carries the provider's error object
        ├── UpstreamRejected          the provider answered 4xx: its status is kept (400, 404,
        │                             409, 413, 422, 429), except 401/403 (the gateway's own
        │                             upstream key) which become 502 with a message of our own
        ├── UpstreamUnavailable       502 (connect refused, 5xx, malformed body or event, cut
        │                             stream, answer or event over `response_limits`)
        └── UpstreamTimeout           504 (connect, time-to-first-byte, idle or total timeout)

Layers raise these; only the edges (`server/`, the library) turn them into JSON. Messages never
contain secrets: upstream keys are `SecretStr` and are never formatted into a message, and what
an upstream says is scrubbed of every configured secret before it reaches one (levergate/redact.py).
An upstream's own error object reaches the client as the provider sent it, with levergate's
context in a separate `error.levergate` field (`UpstreamError`).

Headers tell the client's SDK what to do next: `retry-after` (whole seconds, rounded up, so a
client never comes back early) with `retry-after-ms` (the precise wait, which the OpenAI SDKs
prefer), and `x-should-retry: false` when a retry by the client would only multiply upstream
calls: levergate has already retried (`retried`, set by the Retry and Fallback layers) or the
error is one a retry cannot fix (a 4xx other than 408/409/429, the gateway's own upstream key
refused). The OpenAI SDKs honour that header over their own status rules.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

# Statuses a client may usefully retry (as the OpenAI SDKs do, with 5xx).
RETRYABLE_CLIENT_STATUSES = frozenset({408, 409, 429})


class LevergateError(Exception):
    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.retry_after = retry_after
        # Levergate has already retried this failure (or sent it to a fallback).
        self.retried = False
        # The provider's allow-listed response headers (upstreams/passed_headers.py).
        self.passed_headers: dict[str, str] = {}

    @property
    def http_status(self) -> int:
        return self.status

    @property
    def client_may_retry(self) -> bool:
        """Whether a retry by the client could help (and would not repeat ours)."""
        if self.retried:
            return False
        status = self.http_status
        return status >= 500 or status in RETRYABLE_CLIENT_STATUSES

    def to_json(self) -> dict[str, Any]:
        """The OpenAI error envelope: what every OpenAI SDK knows how to read."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def headers(self) -> dict[str, str]:
        headers = dict(self.passed_headers)
        if self.retry_after is not None:
            wait = max(0.0, self.retry_after)
            # Rounded first, so float noise (1.384 * 1000 = 1384.0000000000002) adds no ms.
            headers["retry-after"] = str(math.ceil(round(wait, 6)))
            headers["retry-after-ms"] = str(math.ceil(round(wait * 1000, 3)))
        if not self.client_may_retry:
            headers["x-should-retry"] = "false"
        return headers


class ConfigError(LevergateError):
    type = "config_error"


class ClientError(LevergateError):
    status = 400
    type = "invalid_request_error"


class BadRequest(ClientError):
    pass


class AuthenticationFailed(ClientError):
    status = 401
    type = "authentication_error"


class PermissionDenied(ClientError):
    status = 403
    type = "permission_error"


class NotFound(ClientError):
    status = 404
    type = "not_found_error"


class ModelNotFound(NotFound):
    type = "invalid_request_error"

    def __init__(self, model: str, *, detail: str = "") -> None:
        message = f"The model '{model}' does not exist"
        super().__init__(
            f"{message}: {detail}" if detail else message, code="model_not_found", param="model"
        )


class MethodNotAllowed(ClientError):
    """A known path asked with a method it does not take; `allow` lists the ones it does."""

    status = 405

    def __init__(self, message: str, *, allow: str) -> None:
        super().__init__(message, code="method_not_allowed")
        self.allow = allow

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "allow": self.allow}


class PayloadTooLarge(ClientError):
    status = 413

    @classmethod
    def over(cls, limit: int) -> PayloadTooLarge:
        return cls(f"Request body is larger than the limit of {limit} bytes.")


class RequestTimeout(ClientError):
    """The request's head or body did not arrive in time (server/http_protocol.py)."""

    status = 408


class HeadersTooLarge(ClientError):
    """The request head is over `server.max_header_bytes` or `server.max_headers`."""

    status = 431


class RateLimited(ClientError):
    status = 429
    type = "rate_limit_error"


class BudgetExceeded(RateLimited):
    """A gateway key spent its daily or monthly budget. Like OpenAI's quota error (type
    `insufficient_quota`), and marked `x-should-retry: false`: the OpenAI SDKs retry every
    429 otherwise, and waiting seconds does not refill a budget that resets at midnight."""

    type = "insufficient_quota"

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "x-should-retry": "false"}


class QuotaExceeded(RateLimited):
    """A tenant holds as many files, queued batches or pending async requests (or as many
    bytes) as its storage quota allows (`batch.quotas`): the code names the quota. Marked
    `x-should-retry: false` like a spent budget: room comes back when the tenant deletes files
    or its work finishes, not within an SDK's retry backoff."""

    type = "insufficient_quota"

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "x-should-retry": "false"}


class Overloaded(LevergateError):
    status = 503
    type = "overloaded_error"


class ShuttingDown(LevergateError):
    """The gateway is stopping and the request outlasted `server.graceful_shutdown_seconds`:
    a stream ends with this as its error event, a request not yet answered gets a 503."""

    status = 503

    def __init__(self) -> None:
        super().__init__("The request was ended: server shutting down", code="shutting_down")


class UpstreamError(LevergateError):
    """The upstream failed; `upstream` names which one (never its key).

    `message` is levergate's account ("upstream 'x' answered 400: ..."), for logs. When the
    provider sent an OpenAI error object, `provider_error` holds it and the client receives it
    as it was (message, type, param, code: an SDK reads the provider's own fields), with
    levergate's context beside it in `error.levergate` ({"upstream", "status"})."""

    status = 502
    type = "upstream_error"

    def __init__(
        self,
        message: str,
        *,
        upstream: str = "",
        upstream_status: int | None = None,
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
        provider_error: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code, param=param, retry_after=retry_after)
        self.upstream = upstream
        self.upstream_status = upstream_status
        self.provider_error = provider_error

    def to_json(self) -> dict[str, Any]:
        body = super().to_json()
        if self.provider_error is not None:
            body["error"] = {**body["error"], **self.provider_error}
        body["error"]["levergate"] = {"upstream": self.upstream, "status": self.upstream_status}
        return body


class UpstreamUnavailable(UpstreamError):
    pass


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "timeout_error"


# The provider's 4xx statuses that describe the caller's request, and so pass through unchanged.
_PASSED_THROUGH = frozenset({400, 404, 409, 413, 422, 429})


class UpstreamRejected(UpstreamError):
    """The upstream answered with a 4xx. Client faults keep their status; key faults become 502."""

    @property
    def http_status(self) -> int:
        if self.upstream_status in _PASSED_THROUGH:
            return self.upstream_status
        return 502

    @property
    def retryable(self) -> bool:
        return self.upstream_status in RETRYABLE_CLIENT_STATUSES

    @property
    def client_may_retry(self) -> bool:
        # A 401/403 (our own upstream key) answers 502, but no retry fixes it.
        return self.retryable and not self.retried

    def to_json(self) -> dict[str, Any]:
        body = super().to_json()
        if self.provider_error is not None and isinstance(self.provider_error.get("type"), str):
            return body  # the provider's own type stands
        if self.upstream_status == 429:
            body["error"]["type"] = "rate_limit_error"
        elif self.upstream_status in _PASSED_THROUGH:
            body["error"]["type"] = "invalid_request_error"
        return body


def error_payload(exc: LevergateError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The one mapping from the exception tree to (HTTP status, OpenAI error JSON, headers)."""
    return exc.http_status, exc.to_json(), exc.headers()

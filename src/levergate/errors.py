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
    │   ├── PayloadTooLarge           413
    │   └── RateLimited               429 rate_limit_error     (carries retry_after)
    ├── Overloaded                    503 overloaded_error     (shed; carries retry_after)
    └── UpstreamError                 the provider failed us; carries the provider's own message
        ├── UpstreamRejected          the provider answered 4xx: its status is kept (400, 404,
        │                             413, 422, 429), except 401/403 (the gateway's own upstream
        │                             key) which become 502
        ├── UpstreamUnavailable       502 (connect refused, 5xx, malformed body, cut stream)
        └── UpstreamTimeout           504 (connect, time-to-first-byte, idle or total timeout)

Layers raise these; only the edges (`server/`, the library) turn them into JSON. Messages never
contain secrets: upstream keys are `SecretStr` and are never formatted into a message.
"""

from __future__ import annotations

from typing import Any, ClassVar


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

    @property
    def http_status(self) -> int:
        return self.status

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
        if self.retry_after is None:
            return {}
        return {"retry-after": str(max(1, round(self.retry_after)))}


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

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model '{model}' does not exist", code="model_not_found", param="model"
        )


class MethodNotAllowed(ClientError):
    """A known path asked with a method it does not take; `allow` lists the ones it does."""

    status = 405

    def __init__(self, message: str, *, allow: str) -> None:
        super().__init__(message, code="method_not_allowed")
        self.allow = allow

    def headers(self) -> dict[str, str]:
        return {"allow": self.allow}


class PayloadTooLarge(ClientError):
    status = 413

    @classmethod
    def over(cls, limit: int) -> PayloadTooLarge:
        return cls(f"Request body is larger than the limit of {limit} bytes.")


class RateLimited(ClientError):
    status = 429
    type = "rate_limit_error"


class Overloaded(LevergateError):
    status = 503
    type = "overloaded_error"


class UpstreamError(LevergateError):
    """The upstream failed; `upstream` names which one (never its key)."""

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
    ) -> None:
        super().__init__(message, code=code, param=param, retry_after=retry_after)
        self.upstream = upstream
        self.upstream_status = upstream_status


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
        return self.upstream_status in {408, 409, 429}

    def to_json(self) -> dict[str, Any]:
        body = super().to_json()
        if self.upstream_status == 429:
            body["error"]["type"] = "rate_limit_error"
        elif self.upstream_status in _PASSED_THROUGH:
            body["error"]["type"] = "invalid_request_error"
        return body


def error_payload(exc: LevergateError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The one mapping from the exception tree to (HTTP status, OpenAI error JSON, headers)."""
    return exc.http_status, exc.to_json(), exc.headers()

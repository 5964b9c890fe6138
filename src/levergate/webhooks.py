"""Signed webhooks: how levergate signs the notice it posts when an async request is done, and
the helper a receiver verifies it with. Stripe's scheme, byte for byte, so receivers that
already verify Stripe-style signatures need no new code:

    x-levergate-signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>

The timestamp is inside the signed payload, so a captured delivery cannot be replayed later
with a fresh `t`: a receiver refuses any whose `t` is more than the tolerance (default 300 s,
`webhooks.tolerance_seconds`) away from its own clock, and dedupes on the event `id` (a
delivery may arrive more than once: retries are at-least-once). Compare with
`hmac.compare_digest` (done here), never `==`. Several `v1=` entries may appear while a secret
is being rotated; any one matching is enough.

    from levergate.webhooks import verify, WebhookSignatureError
    try:
        verify(secret, header=request.headers["x-levergate-signature"], body=raw_body)
    except WebhookSignatureError:
        return 400

`backoff` is the delivery schedule (batch/async_requests.py sends): attempt n (from 0) waits
`min(max, base * factor**(n-1))` after the previous failure, none before the first.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "x-levergate-signature"
EVENT_ID_HEADER = "x-levergate-webhook-id"
DEFAULT_TOLERANCE = 300
SCHEME = "v1"

__all__ = [
    "DEFAULT_TOLERANCE",
    "EVENT_ID_HEADER",
    "SIGNATURE_HEADER",
    "WebhookSignatureError",
    "backoff",
    "sign",
    "signature",
    "verify",
]


class WebhookSignatureError(ValueError):
    """The signature header is missing, malformed, wrong, or outside the replay window."""


def signature(secret: str | bytes, *, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `"<timestamp>.<body>"` under `secret`."""
    key = secret.encode() if isinstance(secret, str) else secret
    payload = str(int(timestamp)).encode() + b"." + body
    return hmac.new(key, payload, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, *, timestamp: int, body: bytes) -> str:
    """The header value: `t=<timestamp>,v1=<signature>`."""
    return f"t={int(timestamp)},{SCHEME}={signature(secret, timestamp=timestamp, body=body)}"


def verify(
    secret: str | bytes,
    *,
    header: str | None,
    body: bytes,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> int:
    """Check a delivery; its timestamp when good, `WebhookSignatureError` otherwise. `body` is
    the raw bytes received (parse the JSON after verifying, never before)."""
    if not header or len(header) > 4096:
        raise WebhookSignatureError("missing or oversized signature header")
    stamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit() and len(value) <= 12:
            stamp = int(value)
        elif name == SCHEME and value:
            candidates.append(value)
    if stamp is None or not candidates:
        raise WebhookSignatureError("signature header lacks t= or v1=")
    clock = time.time() if now is None else now
    if abs(clock - stamp) > tolerance:
        raise WebhookSignatureError("timestamp outside the replay window")
    expected = signature(secret, timestamp=stamp, body=body)
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        raise WebhookSignatureError("no signature matches")
    return stamp


def backoff(attempt: int, *, base: float, factor: float, cap: float) -> float:
    """Seconds to wait before attempt `attempt` (0 = the first: no wait)."""
    if attempt <= 0:
        return 0.0
    try:
        return min(cap, base * factor ** min(attempt - 1, 4096))
    except OverflowError:  # factor ** n past a float: long past the cap
        return cap

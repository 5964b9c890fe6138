"""Webhook signatures (Stripe's scheme): worked vectors (computed with `openssl dgst -sha256
-hmac`), the replay window, rotation, tampering, and the delivery backoff schedule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.webhooks import WebhookSignatureError, backoff, sign, signature, verify

# printf '1700000000.{"id":"evt_1"}' | openssl dgst -sha256 -hmac whsec_test_secret
VECTOR = "248a374f50f943a28b0f6ab50faf9a7e7e29b710fa26df9fb1618b9bf8ea9c9a"
# printf '0.' | openssl dgst -sha256 -hmac key
EMPTY = "85841b4efc3cd7776c3c8f9b7cca9e281c550e5d19889d78e9e669c6337f000d"
BODY = b'{"id":"evt_1"}'


def test_worked_vectors() -> None:
    assert signature("whsec_test_secret", timestamp=1_700_000_000, body=BODY) == VECTOR
    assert signature(b"key", timestamp=0, body=b"") == EMPTY
    assert sign("whsec_test_secret", timestamp=1_700_000_000, body=BODY) == (
        f"t=1700000000,v1={VECTOR}"
    )


def test_verify_accepts_inside_the_window_and_refuses_outside() -> None:
    header = f"t=1700000000,v1={VECTOR}"
    assert verify("whsec_test_secret", header=header, body=BODY, now=1_700_000_300) == 1_700_000_000
    assert verify("whsec_test_secret", header=header, body=BODY, now=1_699_999_700)
    with pytest.raises(WebhookSignatureError, match="replay window"):
        verify("whsec_test_secret", header=header, body=BODY, now=1_700_000_301)
    with pytest.raises(WebhookSignatureError, match="replay window"):
        verify("whsec_test_secret", header=header, body=BODY, now=1_700_000_031, tolerance=30)


def test_a_new_timestamp_on_an_old_signature_fails() -> None:
    replayed = f"t=1700009999,v1={VECTOR}"
    with pytest.raises(WebhookSignatureError, match="no signature matches"):
        verify("whsec_test_secret", header=replayed, body=BODY, now=1_700_009_999)


@pytest.mark.parametrize(
    "header",
    [None, "", "v1=" + VECTOR, "t=1700000000", "t=abc,v1=" + VECTOR, "t=1700000000,v0=" + VECTOR,
     "x" * 5000],
)  # fmt: skip
def test_malformed_headers_are_refused(header: str | None) -> None:
    with pytest.raises(WebhookSignatureError):
        verify("whsec_test_secret", header=header, body=BODY, now=1_700_000_000)


def test_any_v1_matching_is_enough_while_a_secret_rotates() -> None:
    header = f"t=1700000000,v1={'0' * 64},v1={VECTOR}"
    assert verify("whsec_test_secret", header=header, body=BODY, now=1_700_000_000)


@given(secret=st.text(min_size=1, max_size=40), body=st.binary(max_size=200),
       stamp=st.integers(0, 10**11), flip=st.integers(0, 199))  # fmt: skip
def test_sign_then_verify_round_trips_and_any_changed_byte_fails(
    secret: str, body: bytes, stamp: int, flip: int
) -> None:
    header = sign(secret, timestamp=stamp, body=body)
    assert verify(secret, header=header, body=body, now=stamp) == stamp
    if body:
        i = flip % len(body)
        changed = body[:i] + bytes([body[i] ^ 1]) + body[i + 1 :]
        with pytest.raises(WebhookSignatureError):
            verify(secret, header=header, body=changed, now=stamp)


def test_backoff_is_exponential_and_capped() -> None:
    waits = [backoff(n, base=2.0, factor=2.0, cap=60.0) for n in range(9)]
    assert waits == [0.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


@given(n=st.integers(0, 200), base=st.floats(0.01, 100), factor=st.floats(1, 10),
       cap=st.floats(0.01, 1000))  # fmt: skip
def test_backoff_never_exceeds_its_cap_and_never_shrinks(
    n: int, base: float, factor: float, cap: float
) -> None:
    now, later = backoff(n, base=base, factor=factor, cap=cap), backoff(
        n + 1, base=base, factor=factor, cap=cap)  # fmt: skip
    assert 0.0 <= now <= later <= max(cap, 0.0)

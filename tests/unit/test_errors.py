from __future__ import annotations

from levergate.errors import (
    AuthenticationFailed,
    BadRequest,
    LevergateError,
    ModelNotFound,
    Overloaded,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
    error_payload,
)


def test_client_errors_map_to_openai_shapes() -> None:
    status, body, headers = error_payload(BadRequest("nope", param="x", code="bad"))
    assert status == 400
    assert body == {"error": {"message": "nope", "type": "invalid_request_error",
                              "param": "x", "code": "bad"}}  # fmt: skip
    assert headers == {"x-should-retry": "false"}  # no retry fixes a malformed request
    assert error_payload(AuthenticationFailed("who"))[0] == 401
    status, body, _ = error_payload(ModelNotFound("gpt-x"))
    assert (status, body["error"]["code"]) == (404, "model_not_found")


def test_upstream_client_faults_keep_their_status_but_key_faults_become_502() -> None:
    for status in (400, 404, 413, 422, 429):
        assert UpstreamRejected("x", upstream_status=status).http_status == status
    for status in (401, 403):
        assert UpstreamRejected("x", upstream_status=status).http_status == 502


def test_upstream_failures_are_502_and_504_with_their_message() -> None:
    status, body, _ = error_payload(UpstreamUnavailable("upstream 'a' answered 503: busy"))
    assert status == 502
    assert "busy" in body["error"]["message"]
    assert error_payload(UpstreamTimeout("slow"))[0] == 504


def test_the_providers_error_object_passes_through_with_levergates_context_beside_it() -> None:
    provider = {"message": "bad", "type": "invalid_request_error", "param": "n", "code": None}
    exc = UpstreamRejected(
        "upstream 'a' answered 400: bad", upstream="a", upstream_status=400, provider_error=provider
    )
    status, body, _ = error_payload(exc)
    assert status == 400
    assert body == {"error": {**provider, "levergate": {"upstream": "a", "status": 400}}}
    assert exc.message == "upstream 'a' answered 400: bad"  # levergate's account, for the log


def test_retry_after_is_rounded_up_and_the_precise_wait_goes_in_retry_after_ms() -> None:
    assert error_payload(Overloaded("full", retry_after=0.2))[2] == {
        "retry-after": "1",
        "retry-after-ms": "200",
    }
    assert error_payload(UpstreamRejected("x", upstream_status=429, retry_after=1.384))[2] == {
        "retry-after": "2",
        "retry-after-ms": "1384",
    }
    assert error_payload(Overloaded("full", retry_after=7.0))[2]["retry-after"] == "7"
    assert error_payload(Overloaded("full", retry_after=0.5787))[2]["retry-after-ms"] == "579"


def test_x_should_retry_false_when_a_client_retry_cannot_help_or_repeats_ours() -> None:
    def should_retry(exc: LevergateError) -> str | None:
        return error_payload(exc)[2].get("x-should-retry")

    assert should_retry(UpstreamUnavailable("down", upstream_status=500)) is None
    assert should_retry(UpstreamRejected("slow down", upstream_status=429)) is None
    assert should_retry(Overloaded("full", retry_after=1.0)) is None
    assert should_retry(UpstreamRejected("bad", upstream_status=400)) == "false"
    assert should_retry(UpstreamRejected("our key", upstream_status=401)) == "false"
    assert should_retry(ModelNotFound("gpt-x")) == "false"
    retried = UpstreamUnavailable("down", upstream_status=500)
    retried.retried = True
    assert should_retry(retried) == "false"

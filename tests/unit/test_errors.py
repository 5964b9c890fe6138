from __future__ import annotations

from levergate.errors import (
    AuthenticationFailed,
    BadRequest,
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
    assert headers == {}
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


def test_retry_after_becomes_a_header_in_whole_seconds_at_least_one() -> None:
    assert error_payload(Overloaded("full", retry_after=0.2))[2] == {"retry-after": "1"}
    assert error_payload(UpstreamRejected("x", upstream_status=429, retry_after=7.4))[2] == {
        "retry-after": "7"
    }

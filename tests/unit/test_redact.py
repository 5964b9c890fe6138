"""`Redactor` finds every configured secret, in every form an echo may take; the log filter
scrubs and escapes every levergate record."""

from __future__ import annotations

import base64
import logging

import pytest

from levergate.config import Settings
from levergate.errors import UpstreamRejected
from levergate.redact import Redactor, escape_controls, install, mask_url


def settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("LG_UNIT_KEY", "sk-from-the-environment")
    monkeypatch.setenv("LG_UNIT_EXTRA", "sk-extra-from-the-environment")
    return Settings.load(
        upstreams=[
            {
                "name": "a",
                "base_url": "https://user:p%40ssword-in-url@example.com/v1",
                "api_key": "sk-config-key-1",
                "api_keys": ["sk-config-key-2"],
                "api_keys_env": ["LG_UNIT_EXTRA"],
                "headers": {"api-key": "azure-secret-header", "x-trace": "plain-header-value"},
            },
            {"name": "b", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "LG_UNIT_KEY"},
        ],
        models=[{"name": "*", "upstream": "a"}],
        auth={"enabled": True, "keys": [{"key": "lg-client-key-1", "tenant": "t"}]},
        cache={"store": {"redis_url": "redis://:redis-password-1@127.0.0.1:6379/0"}},
        stores={
            "default": {
                "redis_url": "redis://:redis-password-2@127.0.0.1:6379/0",
                "postgres_dsn": "postgresql://lg:pg-password-3@127.0.0.1/lg",
            }
        },
    )


def test_every_configured_secret_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    redact = Redactor.of(settings(monkeypatch))
    basic = base64.b64encode(b"user:p%40ssword-in-url").decode()
    for secret in (
        "sk-config-key-1",
        "sk-config-key-2",
        "sk-from-the-environment",
        "sk-extra-from-the-environment",
        "p%40ssword-in-url",
        "p@ssword-in-url",
        basic,
        "azure-secret-header",
        "lg-client-key-1",
        "redis-password-1",
        "redis-password-2",
        "pg-password-3",
    ):
        assert redact(f"echo: {secret}!") == "echo: [redacted]!", secret
    assert redact("x-trace: plain-header-value") == "x-trace: plain-header-value"


def test_short_placeholders_are_not_secrets() -> None:
    redact = Redactor(["-", "none", "sk-long-enough"])
    assert redact("a-b none sk-long-enough") == "a-b none [redacted]"
    assert not Redactor(["x"])


def test_objects_are_scrubbed_through_and_errors_in_place() -> None:
    redact = Redactor(["sk-secret-value"])
    assert redact.scrub({"m": ["sk-secret-value", 3], "sk-secret-value": None}) == {
        "m": ["[redacted]", 3],
        "[redacted]": None,
    }
    exc = UpstreamRejected(
        "upstream 'a' answered 400: sk-secret-value",
        upstream="a",
        upstream_status=400,
        provider_error={"message": "bad key sk-secret-value", "param": "x"},
    )
    redact.scrub_error(exc)
    assert exc.message == "upstream 'a' answered 400: [redacted]"
    assert exc.to_json()["error"]["message"] == "bad key [redacted]"
    assert exc.to_json()["error"]["param"] == "x"


def test_control_characters_are_escaped_and_url_credentials_masked() -> None:
    assert escape_controls("a\nb\r\x1b[31m\u2028c") == "a\\nb\\r\\x1b[31m\\u2028c"
    assert escape_controls("plain é") == "plain é"
    assert mask_url("http://u:p@host:8/v1") == "http://***@host:8/v1"
    assert mask_url("http://host/v1") == "http://host/v1"


def test_every_levergate_logger_is_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("levergate.test_redact_unit")
    redactor = Redactor(["sk-logged-secret"])
    install(redactor)
    with caplog.at_level(logging.INFO):
        logger.warning("upstream said %s\nforged", "key sk-logged-secret")
        logger.error("failed", exc_info=ValueError("sk-logged-secret"))
    assert "sk-logged-secret" not in caplog.text
    assert caplog.records[0].getMessage() == "upstream said key [redacted]\\nforged"
    assert "ValueError: [redacted]" in caplog.text


def test_a_handler_with_the_filter_scrubs_other_libraries_records() -> None:
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    handler = Collect()
    redactor = Redactor(["sk-third-party-secret"])
    install(redactor, handler=handler)
    other = logging.getLogger("somelib.test_redact_unit")
    other.addHandler(handler)
    try:
        other.warning("connect to %s failed\r\nforged", "http://sk-third-party-secret@h")
    finally:
        other.removeHandler(handler)
    assert seen == ["connect to http://[redacted]@h failed\\r\\nforged"]


def test_logs_lose_the_query_strings_of_configured_urls_answers_do_not() -> None:
    settings = Settings.load(
        upstreams=[{"name": "a", "base_url": "https://x.example/v1?api-version=2024-10-21"}],
        models=[{"name": "*", "upstream": "a"}],
        webhooks={"targets": {"ops": {"url": "https://hooks.example/in?token=tok-0123456789",
                                      "secret": "whsec-0123456789abcdef"}}},
    )  # fmt: skip
    logs = Redactor.for_logs(settings)
    line = 'HTTP Request: POST https://hooks.example/in?token=tok-0123456789 "HTTP/1.1 200 OK"'
    assert "tok-0123456789" not in logs(line)
    assert "2024-10-21" not in logs("GET https://x.example/v1?api-version=2024-10-21")
    assert Redactor.of(settings)("api-version=2024-10-21") == "api-version=2024-10-21"


def test_a_secret_urls_password_is_redacted_but_not_its_user_alone() -> None:
    settings = Settings.load(stores={"default": {
        "postgres_dsn": "postgresql://postgres@127.0.0.1:5432/levergate",
        "redis_url": "redis://levergate-user:redis-password-4@127.0.0.1/0",
    }})  # fmt: skip
    redact = Redactor.of(settings)
    assert redact("set stores.default.postgres_dsn") == "set stores.default.postgres_dsn"
    assert (
        redact("auth redis-password-4 for levergate-user") == "auth [redacted] for levergate-user"
    )

"""Deferral, async-request and webhook settings: clear errors at start-up, secrets redacted."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.config import Settings
from levergate.errors import ConfigError
from levergate.redact import Redactor

UPSTREAMS = [{"name": "sim", "base_url": "http://127.0.0.1:1/v1"}]
MODELS = [{"name": "m", "upstream": "sim"}]
SECRET = "whsec-config-0123456789abcdef"  # noqa: S105 - a test value


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"async_requests": {"enabled": True}}, "need batch.enabled"),
        ({"defer": {"enabled": True}}, "need batch.enabled"),
        ({"batch": {"enabled": True}, "defer": {"routes": {"nope": {}}}}, "unknown model"),
        ({"webhooks": {"targets": {"t": {"url": "ftp://x"}}}}, "http:// or https://"),
        ({"webhooks": {"targets": {"t": {"url": "https://x"}}}}, "needs a `secret`"),
        ({"webhooks": {"targets": {"t": {"url": "https://x", "secret": "short"}}}}, "16\\+"),
        ({"defer": {"poll_factor": 0.5}}, "poll_factor"),
    ],
)
def test_bad_settings_fail_at_start_with_a_clear_message(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.load(upstreams=UPSTREAMS, models=MODELS, **values)


def test_the_webhook_secret_comes_from_the_environment_and_is_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    settings = Settings.load(
        upstreams=UPSTREAMS, models=MODELS,
        webhooks={"targets": {"ops": {"url": "https://hooks.example/x",
                                      "secret_env": "HOOK_SECRET"}}},
    )  # fmt: skip
    secret = settings.webhooks.targets["ops"].secret
    assert secret is not None
    assert secret.get_secret_value() == SECRET
    assert SECRET not in repr(settings)
    assert SECRET not in Redactor.of(settings).scrub(f"failed with {SECRET} inside")

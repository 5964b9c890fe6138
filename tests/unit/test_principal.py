"""The one tenant rule (principal.py): the same `identify` decides the caller for the pipeline's
Authenticate, the route guards and so every handler."""

from __future__ import annotations

import pytest

from levergate.config import AuthSettings
from levergate.core.clock import SystemClock
from levergate.core.controls import ANONYMOUS, Principal
from levergate.errors import AuthenticationFailed, BadRequest
from levergate.layers.keys.keyring import Keyring
from levergate.principal import MAX_TENANT_CHARS, TENANT_HEADER, identify

KEY = "sk-" + "k" * 30
AUTH = AuthSettings.model_validate({"enabled": True, "keys": [{"key": KEY, "tenant": "acme"}]})


def keyring() -> Keyring:
    return Keyring(config_keys=AUTH.keys, store=None, clock=SystemClock(), cache_seconds=0.0,
                   timeout=1.0)  # fmt: skip


async def test_with_auth_off_the_client_names_its_tenant_within_one_bound() -> None:
    async def tenant(headers: dict[str, str], given: Principal = ANONYMOUS) -> str:
        found = await identify(headers, keyring=None, auth_on=False, given=given)
        assert found.key is None
        assert found.principal.key_id is None
        return found.principal.tenant

    assert await tenant({}) == "default"
    assert await tenant({}, Principal(tenant="batch-owner")) == "batch-owner"
    assert await tenant({TENANT_HEADER: "blue"}, Principal(tenant="x")) == "blue"
    assert await tenant({TENANT_HEADER: "t" * MAX_TENANT_CHARS}) == "t" * MAX_TENANT_CHARS
    for bad in ("", "t" * (MAX_TENANT_CHARS + 1), "a b", "é", "a\x00"):
        with pytest.raises(BadRequest) as caught:
            await tenant({TENANT_HEADER: bad})
        assert caught.value.param == TENANT_HEADER


async def test_with_auth_on_the_key_names_the_tenant_and_a_claimed_one_is_ignored() -> None:
    ring = keyring()
    for headers in ({"authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}):
        found = await identify({**headers, TENANT_HEADER: "evil"}, keyring=ring, auth_on=True)
        assert found.principal.tenant == "acme"
        assert found.key is not None
        assert found.principal.key_id == found.key.id
    for headers, code in (({}, "missing_api_key"), ({"authorization": "Bearer nope"},
                          "invalid_api_key"), ({"authorization": f"Basic {KEY}"},
                          "missing_api_key")):  # fmt: skip
        with pytest.raises(AuthenticationFailed) as caught:
            await identify(headers, keyring=ring, auth_on=True)
        assert caught.value.code == code
    with pytest.raises(AuthenticationFailed):  # auth on with no keyring: nobody gets in
        await identify({"authorization": f"Bearer {KEY}"}, keyring=None, auth_on=True)

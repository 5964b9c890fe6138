"""Gateway keys end to end over HTTP: the admin API makes a key, the official OpenAI SDK uses
it, rotation and revocation turn it into 401s, a key's model list gives 403s and its spent
budget a 429 `budget_exceeded` the SDK does not retry. Two gateways share keys and one budget
through Redis (needs Redis at 127.0.0.1:6379: skipped with a reason outside CI, failed in CI)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import yaml
from redis.asyncio import Redis

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimHandle
from levergate.testing.ports import free_port
from tests.e2e.conftest import USER
from tests.e2e.test_cli import LEVERGATE, wait_for
from tests.redis_required import require_redis

ADMIN = "admin-token-0123456789"
AS_ADMIN = {"authorization": f"Bearer {ADMIN}"}
REDIS_URL = "redis://127.0.0.1:6379/15"
# $100 per million tokens: a simulated answer (~10 prompt + 16 output tokens) costs ~$0.003.
PRICE = {"input": 100.0, "output": 100.0}


@contextlib.asynccontextmanager
async def gateway(sim: SimHandle, **values: Any) -> AsyncIterator[str]:
    settings = Settings.load(
        server={"port": 0},
        upstreams=[{"name": "sim", "base_url": sim.base_url}],
        models=[
            {"name": "m", "upstream": "sim", "price": PRICE},
            {"name": "other", "upstream": "sim"},
        ],
        cache={"enabled": False},
        **values,
    )
    async with Gateway(settings) as gw, serving(gw) as url:
        yield url.removesuffix("/v1")


def sdk(base: str, key: str, **options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=key, **{"max_retries": 0, **options})


async def admin(base: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base) as http:
        kwargs.setdefault("headers", AS_ADMIN)
        return await http.request(method, path, **kwargs)


ON = {
    "auth": {"enabled": True, "store": {"backend": "memory"}},
    "admin": {"enabled": True, "token": ADMIN},
}


async def test_a_key_made_by_the_admin_api_works_until_rotated_and_revoked(sim: SimHandle) -> None:
    async with gateway(sim, **ON) as base:
        made = await admin(base, "POST", "/admin/keys", json={"tenant": "acme", "models": ["m"]})
        assert made.status_code == 201
        assert made.headers["cache-control"] == "no-store"
        record = made.json()
        key, key_id = record["key"], record["id"]
        assert key.startswith("lg-")
        assert "hash" not in record
        async with sdk(base, key) as client:
            reply = await client.chat.completions.create(model="m", messages=USER)
            assert reply.choices[0].message.content
            with pytest.raises(openai.PermissionDeniedError) as denied:
                await client.chat.completions.create(model="other", messages=USER)
            assert denied.value.code == "model_not_allowed"

        other = await admin(base, "POST", "/admin/keys", json={"tenant": "other"})
        listed = await admin(base, "GET", "/admin/tenants/acme/keys")
        assert [r["id"] for r in listed.json()["data"]] == [key_id]
        everyone = (await admin(base, "GET", "/admin/keys")).json()["data"]
        assert [r["id"] for r in everyone] == [key_id, other.json()["id"]]
        assert key not in listed.text
        assert "hash" not in listed.json()["data"][0]
        spend = (await admin(base, "GET", f"/admin/keys/{key_id}/spend")).json()
        assert spend["day"]["spent_usd"] > 0
        assert spend["month"]["spent_usd"] == spend["day"]["spent_usd"]

        rotated = (await admin(base, "POST", f"/admin/keys/{key_id}/rotate")).json()
        assert (rotated["id"], rotated["tenant"]) == (key_id, "acme")
        async with sdk(base, key) as client:
            with pytest.raises(openai.AuthenticationError):
                await client.chat.completions.create(model="m", messages=USER)
        async with sdk(base, rotated["key"]) as client:
            await client.chat.completions.create(model="m", messages=USER)
            revoked = await admin(base, "POST", f"/admin/keys/{key_id}/revoke")
            assert revoked.json()["revoked"] is not None
            with pytest.raises(openai.AuthenticationError) as refused:
                await client.chat.completions.create(model="m", messages=USER)
            assert refused.value.code == "invalid_api_key"
    assert sim.stats()["requests_total"] == 2


async def test_a_spent_budget_is_429_budget_exceeded_and_the_sdk_does_not_retry_it(
    sim: SimHandle,
) -> None:
    sent: list[httpx.Request] = []

    async def count(request: httpx.Request) -> None:
        sent.append(request)

    async with gateway(sim, **ON) as base:
        made = await admin(
            base, "POST", "/admin/keys", json={"tenant": "acme", "daily_budget_usd": 0.001}
        )
        http = httpx.AsyncClient(event_hooks={"request": [count]})
        async with sdk(base, made.json()["key"], max_retries=2, http_client=http) as client:
            await client.chat.completions.create(model="m", messages=USER)
            with pytest.raises(openai.RateLimitError) as caught:
                await client.chat.completions.create(model="m", messages=USER)
        error = caught.value
        assert error.code == "budget_exceeded"
        assert error.type == "insufficient_quota"
        assert "daily budget" in error.message
        assert error.response.headers["x-should-retry"] == "false"
        assert len(sent) == 2  # the refusal was not retried

        key_id = made.json()["id"]
        raised = await admin(base, "POST", f"/admin/keys/{key_id}", json={"daily_budget_usd": 1})
        assert raised.json()["daily_budget_usd"] == 1
        assert raised.json()["name"] == ""  # what was not given stays
        async with sdk(base, made.json()["key"]) as client:
            await client.chat.completions.create(model="m", messages=USER)
        narrowed = await admin(base, "POST", f"/admin/keys/{key_id}", json={"models": ["other"]})
        assert narrowed.json()["models"] == ["other"]
        async with sdk(base, made.json()["key"]) as client:
            with pytest.raises(openai.PermissionDeniedError):
                await client.chat.completions.create(model="m", messages=USER)
    assert sim.stats()["requests_total"] == 2


async def test_the_admin_api_is_off_by_default_and_guards_its_token(sim: SimHandle) -> None:
    async with gateway(sim) as base:
        off = await admin(base, "POST", "/admin/keys", json={})
        assert off.status_code == 404
        assert off.json()["error"]["code"] == "unknown_url"
    async with gateway(sim, **ON) as base:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": ADMIN}):
            refused = await admin(base, "GET", "/admin/keys", headers=headers)
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "invalid_admin_token"
        big = orjson.dumps({"tenant": "a", "models": ["m" * 8192] * 1000})
        for method, path, body, status in [
            # Issue 20, item 10: no key for tenant "default" from nothing; bounded model lists.
            ("POST", "/admin/keys", b"", 400),
            ("POST", "/admin/keys", b"{}", 400),
            ("POST", "/admin/keys", big, 400),
            ("POST", "/admin/keys", orjson.dumps({"tenant": "a", "models": ["m" * 257]}), 400),
            ("POST", "/admin/keys", orjson.dumps({"tenant": "a", "models": ["m"] * 257}), 400),
            ("POST", "/admin/keys", orjson.dumps({"tenant": "a", "models": [""]}), 400),
            ("POST", "/admin/keys", b'{"tenant": "a", "x": ' + b"[" * 200 + b"]" * 200 + b"}", 400),
            ("POST", "/admin/keys", b"{not json", 400),
            ("POST", "/admin/keys", b'{"tenant": "a b"}', 400),
            ("POST", "/admin/keys", b'{"rpm": -1}', 400),
            ("POST", "/admin/keys", b'{"surprise": 1}', 400),
            ("POST", "/admin/keys", b'{"models": "m"}', 400),
            ("POST", "/admin/keys", b'{"daily_budget_usd": "lots"}', 400),
            ("POST", "/admin/keys", b'{"daily_budget_usd": Infinity}', 400),
            ("POST", "/admin/keys", b'{"monthly_budget_usd": 1e400}', 400),
            ("POST", "/admin/keys", b'{"rpm": 100000000000000000000}', 400),
            ("POST", "/admin/keys/key_nope", b"{}", 404),
            ("GET", "/admin/keys/key_nope/spend", b"", 404),
            ("POST", "/admin/keys/key_nope/rotate", b"", 404),
            ("GET", "/admin/keys/key_nope/rotate", b"", 405),
            ("PUT", "/admin/keys", b"", 405),
            ("GET", "/admin/elsewhere", b"", 404),
        ]:
            answer = await admin(base, method, path, content=body)
            assert answer.status_code == status, (method, path, body)
            assert answer.json()["error"]["message"]


async def test_a_budget_or_rate_of_another_type_is_a_400_not_a_number_made_of_it(
    sim: SimHandle,
) -> None:
    """`true` once made a $1 daily budget and an rpm of 1, `"5"` an rpm of 5: the admin API
    took what JSON calls a boolean or a string as a number, silently."""
    async with gateway(sim, **ON) as base:
        made = await admin(base, "POST", "/admin/keys", json={"tenant": "acme", "rpm": 5,
                                                              "daily_budget_usd": 2})  # fmt: skip
        assert (made.status_code, made.json()["daily_budget_usd"]) == (201, 2.0)
        key_id = made.json()["id"]
        for field in ("rpm", "tpm", "daily_budget_usd", "monthly_budget_usd"):
            for value in (True, False, "5", "1e3", [5]):
                for path in ("/admin/keys", f"/admin/keys/{key_id}"):
                    body = {"tenant": "acme", field: value} if path == "/admin/keys" else {
                        field: value}  # fmt: skip
                    refused = await admin(base, "POST", path, json=body)
                    assert refused.status_code == 400, (path, field, value, refused.text)
                    assert refused.json()["error"]["code"] == "invalid_key_request"
        kept = (await admin(base, "GET", f"/admin/keys/{key_id}")).json()
        assert (kept["rpm"], kept["daily_budget_usd"]) == (5, 2.0)
        assert len((await admin(base, "GET", "/admin/keys")).json()["data"]) == 1


async def test_an_unknown_key_id_is_a_bounded_404_whatever_its_length(sim: SimHandle) -> None:
    """A 60,000-character id once came back whole in the 404's message."""
    long_id = "key_" + "x" * 20_000
    async with gateway(sim, **ON) as base:
        for method, path in [("GET", f"/admin/keys/{long_id}"),
                             ("GET", f"/admin/keys/{long_id}/spend"),
                             ("POST", f"/admin/keys/{long_id}"),
                             ("POST", f"/admin/keys/{long_id}/rotate"),
                             ("POST", f"/admin/keys/{long_id}/revoke"),
                             ("DELETE", f"/admin/keys/{long_id}")]:  # fmt: skip
            missing = await admin(base, method, path, content=b"{}")
            assert missing.status_code == 404, (method, path)
            assert missing.json()["error"]["code"] == "key_not_found"
            assert len(missing.content) < 1024, (method, path)


async def test_a_key_name_may_be_any_text_but_not_control_characters(sim: SimHandle) -> None:
    """A NUL, a newline or a terminal escape was once kept in a key's name, and shown back by
    every list (the keys page, a terminal reading the JSON)."""
    async with gateway(sim, **ON) as base:
        made = await admin(base, "POST", "/admin/keys", json={"tenant": "acme", "name": "Zoë 名前"})
        assert (made.status_code, made.json()["name"]) == (201, "Zoë 名前")
        key_id = made.json()["id"]
        for name in ("a\x00b", "two\nlines", "\x1b[31mred", "tab\there", "c1\x85", "del\x7f"):
            for path, body in (("/admin/keys", {"tenant": "acme", "name": name}),
                               (f"/admin/keys/{key_id}", {"name": name})):  # fmt: skip
                refused = await admin(base, "POST", path, json=body)
                assert refused.status_code == 400, (path, name)
                assert refused.json()["error"]["code"] == "invalid_key_request"
        listed = (await admin(base, "GET", "/admin/keys")).json()["data"]
        assert [r["name"] for r in listed] == ["Zoë 名前"]


async def spent_on(base: str, key_id: str, *, above: float) -> float:
    """The key's spend today as `base` reports it, once it is above `above`: a charge made on
    another replica arrives with that replica's next flush (bounded wait, not a timing check)."""
    for _ in range(200):
        spent = (await admin(base, "GET", f"/admin/keys/{key_id}/spend")).json()["day"]
        if spent["spent_usd"] > above:
            return float(spent["spent_usd"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"the spend never rose above {above}")


async def test_two_gateways_share_keys_and_one_budget_through_redis(sim: SimHandle) -> None:
    await require_redis(REDIS_URL)
    space = uuid.uuid4().hex
    shared = {
        "auth": {
            "enabled": True,
            # cache_seconds 0: a revocation through one replica holds at once on the other.
            "store": {"redis_prefix": f"t:{{{space}}}:keys:", "cache_seconds": 0},
            # Charges reach Redis at each flush: the other replica sees them after one.
            "spend": {"redis_prefix": f"t:{space}:", "flush_seconds": 0.05},
        },
        "admin": {"enabled": True, "token": ADMIN},
        # Keys and spend both take it.
        "stores": {"default": {"redis_url": REDIS_URL}},
    }  # fmt: skip
    async with gateway(sim, **shared) as one, gateway(sim, **shared) as two:
        made = await admin(
            one, "POST", "/admin/keys", json={"tenant": "acme", "daily_budget_usd": 0.004}
        )
        key, key_id = made.json()["key"], made.json()["id"]
        async with sdk(two, key) as client:
            await client.chat.completions.create(model="m", messages=USER)
        first = await spent_on(one, key_id, above=0.0)
        assert 0 < first < 0.004 < 2 * first  # the budget holds one request, not two
        async with sdk(one, key) as client:
            await client.chat.completions.create(model="m", messages=USER)
        total = await spent_on(two, key_id, above=first)
        assert total == pytest.approx(2 * first)
        # Spent through both, refused by both.
        for base in (one, two):
            async with sdk(base, key) as client:
                with pytest.raises(openai.RateLimitError) as caught:
                    await client.chat.completions.create(model="m", messages=USER)
                assert caught.value.code == "budget_exceeded"
        await admin(two, "DELETE", f"/admin/keys/{key_id}")
        async with sdk(one, key) as client:
            with pytest.raises(openai.AuthenticationError):
                await client.chat.completions.create(model="m", messages=USER)
    assert sim.stats()["requests_total"] == 2
    raw = Redis.from_url(REDIS_URL)
    names = [n async for n in raw.scan_iter(match=f"t:[{{]{space}}}:*")]
    await raw.delete(*names)  # key records never expire
    await raw.aclose()


def serve(
    upstream: str, config: Path, env: dict[str, str], processes: list[subprocess.Popen[bytes]]
) -> str:
    """`levergate serve` as a real process; its URL once it listens."""
    port = free_port()
    args = ["serve", "--upstream", upstream, "--config", str(config), "--port", str(port)]
    proc = subprocess.Popen(
        [*LEVERGATE, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    processes.append(proc)
    wait_for(port, proc)
    return f"http://127.0.0.1:{port}"


async def test_keys_and_spend_made_through_levergate_serve_survive_its_restart(
    sim: SimHandle, processes: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    store = tmp_path / "keys.sqlite3"
    config = tmp_path / "levergate.yaml"
    settings = {
        "auth": {"enabled": True, "store": {"sqlite_path": str(store)}},
        "admin": {"enabled": True},  # its token comes from the environment
        "models": [{"name": "m", "upstream": "default", "price": PRICE}],
    }
    config.write_text(yaml.safe_dump(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
    env |= {"LEVERGATE_ADMIN__TOKEN": ADMIN, "XDG_CACHE_HOME": str(tmp_path)}

    base = serve(sim.base_url, config, env, processes)
    made = (await admin(base, "POST", "/admin/keys", json={"tenant": "acme"})).json()
    async with sdk(base, made["key"]) as client:
        await client.chat.completions.create(model="m", messages=USER)
    first = processes.pop()
    first.terminate()
    first.wait(timeout=15)

    base = serve(sim.base_url, config, env, processes)
    async with sdk(base, made["key"]) as client:
        await client.chat.completions.create(model="m", messages=USER)
    spend = (await admin(base, "GET", f"/admin/keys/{made['id']}/spend")).json()
    assert spend["month"]["spent_usd"] == pytest.approx(2 * 0.0024)  # both runs' requests
    await admin(base, "POST", f"/admin/keys/{made['id']}/revoke")
    async with sdk(base, made["key"]) as client:
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model="m", messages=USER)
    on_disk = b"".join(p.read_bytes() for p in tmp_path.glob("keys.sqlite3*"))
    assert made["id"].encode() in on_disk
    assert made["key"].encode() not in on_disk
    assert sim.stats()["requests_total"] == 2

"""The dashboard's JSON over a real loopback server in front of the simulator (issue 23 §2): who
may read it (the admin token, a key with the `dashboard` role, nobody else with auth on), prompt
text for the admin only and only where bodies are logged, a clear 400 for every bad range,
filter, page size and cursor, and empty charts without the request log."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from levergate.app import build_gateway
from levergate.config import Settings
from levergate.requestlog.row import row_of
from levergate.requestlog.store import SqliteLog
from levergate.server.run import serving
from levergate.simulator import SimHandle
from tests.unit.requestlog.records import record

ADMIN = "admin-token-0123456789-dashboard"
MODEL = "gpt-4o-mini"
SECRET_PROMPT = "the launch code is tangerine"  # noqa: S105 - a prompt, not a secret


def settings(sim: SimHandle, tmp_path: Path, **values: Any) -> Settings:
    return Settings.load(**{
        "server": {"port": 0},
        "upstreams": [{"name": "sim", "base_url": sim.base_url}],
        "models": [{"name": MODEL, "upstream": "sim"}],
        "auth": {"enabled": True, "store": {"backend": "memory"}},
        "admin": {"enabled": True, "token": ADMIN},
        "request_log": {"enabled": True, "flush_seconds": 0.05,
                        "bodies": {"models": [MODEL]},
                        "store": {"sqlite_path": str(tmp_path / "requests.sqlite3")}},
        **values,
    })  # fmt: skip


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
async def logged(
    sim: SimHandle, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    """A gateway with auth on, a key with the dashboard role, one without, and one request
    whose prompt was logged: (an HTTP client, {role: key, ..., "request_id": id})."""
    async with build_gateway(settings(sim, tmp_path)) as gw, serving(gw) as url:
        root = url.removesuffix("/v1")
        async with httpx.AsyncClient(base_url=root) as http:
            made = {}
            for name, roles in (("reader", ["dashboard"]), ("client", [])):
                asked = {"tenant": "acme", "name": name, "roles": roles}
                answer = await http.post("/admin/keys", headers=bearer(ADMIN), json=asked)
                assert answer.status_code == 201, answer.text
                assert answer.json()["roles"] == roles
                made[name] = answer.json()["key"]
            async with openai.AsyncOpenAI(base_url=url, api_key=made["client"], max_retries=0) as c:
                raw = await c.chat.completions.with_raw_response.create(
                    model=MODEL, messages=[{"role": "user", "content": SECRET_PROMPT}])  # fmt: skip
            made["request_id"] = raw.headers["x-request-id"]
            for _ in range(400):
                found = await http.get("/admin/log/summary", headers=bearer(ADMIN))
                if found.json()["requests"]:
                    break
                await asyncio.sleep(0.05)
            yield http, made


async def test_the_admin_sees_a_logged_prompt_and_a_dashboard_key_never_does(
    logged: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    http, made = logged
    path = f"/dashboard/api/requests/{made['request_id']}"
    admin = (await http.get(path, headers=bearer(ADMIN))).json()["data"][0]
    assert SECRET_PROMPT in admin["request_body"]
    assert admin["bodies"] == "shown"
    reader = await http.get(path, headers=bearer(made["reader"]))
    assert reader.status_code == 200
    record = reader.json()["data"][0]
    assert (record["request_body"], record["answer_body"], record["bodies"]) == (
        None,
        None,
        "hidden",
    )
    assert SECRET_PROMPT not in reader.text
    table = await http.get("/dashboard/api/requests", headers=bearer(ADMIN))
    assert SECRET_PROMPT not in table.text  # the table carries no bodies, even for the admin
    assert [r["request_id"] for r in table.json()["data"]] == [made["request_id"]]
    session = (await http.get("/dashboard/api/session", headers=bearer(made["reader"]))).json()
    assert (session["viewer"], session["admin_api"]) == ("reader", False)
    for roles in (["root"], ["dashboard"] * 5, "dashboard"):
        refused = await http.post("/admin/keys", headers=bearer(ADMIN),
                                  json={"tenant": "acme", "roles": roles})  # fmt: skip
        assert refused.status_code == 400, roles


BAD = [("range=1m", "range"), ("range=8d", "range"), ("range=soon", "range"),
       ("range=" + "9" * 40, "range"), ("since=1h", "since"), ("until=0", "until"),
       ("tenant=" + "t" * 300, "tenant"), ("min_latency_ms=-1", "min_latency_ms"),
       ("min_cost_usd=nan", "min_cost_usd"), ("colour=red", "colour"), ("limit=0", "limit"),
       ("limit=201", "limit"), ("limit=ten", "limit"), ("cursor=%21%21", "cursor"),
       ("cursor=" + "A" * 200, "cursor")]  # fmt: skip


async def test_with_auth_on_nobody_else_reads_it_and_bad_parameters_are_400s(
    logged: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    http, made = logged
    for path in ("session", "overview", "requests", "spend", f"requests/{made['request_id']}"):
        for headers in (
            {},
            bearer(made["client"]),
            bearer("lg-not-a-key"),
            {"authorization": ADMIN},
        ):
            refused = await http.get(f"/dashboard/api/{path}", headers=headers)
            assert refused.status_code == 401, (path, headers)
            assert refused.json()["error"]["code"] == "invalid_dashboard_credentials"
    page = await http.get("/dashboard")  # the page itself holds no data
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for query, param in BAD:
        refused = await http.get(f"/dashboard/api/requests?{query}", headers=bearer(ADMIN))
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == param
        if param not in ("limit", "cursor"):
            overview = await http.get(f"/dashboard/api/overview?{query}", headers=bearer(ADMIN))
            assert overview.status_code == 400
            assert overview.json()["error"]["param"] == param


async def test_lookups_of_unknown_or_oversized_request_ids(
    logged: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    http, _ = logged
    missing = await http.get("/dashboard/api/requests/no-such-request", headers=bearer(ADMIN))
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "request_not_found")
    huge = await http.get(f"/dashboard/api/requests/{'x' * 300}", headers=bearer(ADMIN))
    assert huge.status_code == 400
    unknown = await http.get("/dashboard/static/index.py", headers=bearer(ADMIN))
    assert unknown.status_code == 404


async def test_without_the_request_log_the_charts_are_empty_and_the_metrics_still_show(
    sim: SimHandle, tmp_path: Path
) -> None:
    config = settings(sim, tmp_path, auth={"enabled": False}, request_log={"enabled": False})
    async with build_gateway(config) as gw, serving(gw) as url:
        async with openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0) as client:
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
        async with httpx.AsyncClient(
            base_url=url.removesuffix("/v1"), headers=bearer(ADMIN)
        ) as http:
            overview = (await http.get("/dashboard/api/overview?range=7d")).json()
            assert overview["log"]["enabled"] is False
            assert overview["totals"]["requests"] == 0
            assert len(overview["series"]["ts"]) == len(overview["latency"]["series"]["ts"]) > 1
            [endpoint] = overview["endpoints"]
            assert (endpoint["endpoint"], endpoint["up"], endpoint["attempts"]) == (
                "sim",
                1.0,
                {"ok": 1.0},
            )
            table = (await http.get("/dashboard/api/requests")).json()
            assert table["data"] == []
            missing = await http.get("/dashboard/api/requests/anything")
            assert missing.json()["error"]["code"] == "request_log_off"


async def test_the_dashboard_off_is_a_404(sim: SimHandle, tmp_path: Path) -> None:
    config = settings(sim, tmp_path, dashboard={"enabled": False})
    async with (
        build_gateway(config) as gw,
        serving(gw) as url,
        httpx.AsyncClient(base_url=url.removesuffix("/v1")) as http,
    ):
        for path in ("/dashboard", "/dashboard/keys", "/dashboard/api/overview",
                     "/dashboard/static/uPlot.iife.min.js"):  # fmt: skip
            assert (await http.get(path, headers=bearer(ADMIN))).status_code == 404


async def test_spend_lists_every_key_past_the_hundredth_and_says_when_it_was_cut(
    sim: SimHandle, tmp_path: Path
) -> None:
    """A key with fewer requests than a hundred others once fell off the spend list (the log's
    groups stop at 100, most requests first), and the keys page showed it spending $0.00."""
    path = tmp_path / "requests.sqlite3"
    now = time.time()
    busy = [row_of(now - 60, record(n, key_id=f"key_busy{n}", tenant=f"t{n}", cost_usd=0.001))
            for n in range(120) for _ in range(2)]  # fmt: skip
    costly = row_of(now - 60, record(999, key_id="key_costly", tenant="rich", cost_usd=5.0))
    log = SqliteLog(str(path), timeout_seconds=5)
    log.write([*busy, costly])
    log.close()
    config = settings(sim, tmp_path, request_log={
        "enabled": True, "store": {"sqlite_path": str(path)}})  # fmt: skip
    async with (
        build_gateway(config) as gw,
        serving(gw) as url,
        httpx.AsyncClient(base_url=url.removesuffix("/v1"), headers=bearer(ADMIN)) as http,
    ):
        spend = (await http.get("/dashboard/api/spend?range=1h")).json()
        keys = {k["key_id"]: k["cost_usd"] for k in spend["keys"]}
        tenants = {t["tenant"]: t["cost_usd"] for t in spend["tenants"]}
        assert (len(keys), keys["key_costly"], tenants["rich"]) == (121, 5.0, 5.0)
        assert (spend["keys_truncated"], spend["tenants_truncated"]) == (False, False)

"""The admin API: gateway keys made, listed, rotated, revoked and their spend read over HTTP.

    POST   /admin/keys                  create: {tenant, name?, models?, rpm?, tpm?,
                                          daily_budget_usd?, monthly_budget_usd?} -> 201, the
                                          key in plaintext (shown this once, never again)
    GET    /admin/keys                  list (no hashes, no keys)
    GET    /admin/tenants/{tenant}/keys one tenant's keys
    GET    /admin/keys/{id}             one record
    POST   /admin/keys/{id}             change its name, models, rates or budgets (the fields
                                          given; the others stay)
    POST   /admin/keys/{id}/rotate      a new key for the record; the old one stops working
    POST   /admin/keys/{id}/revoke      (or DELETE /admin/keys/{id}) -> the key gets 401s
    GET    /admin/keys/{id}/spend       today's and this month's spend against the budgets

Off unless `admin.enabled`: then every path here is a 404 like any unknown one. Every handler
first checks `Authorization: Bearer <admin.token>` (constant-time), its own credential, apart
from the client keys. Handlers are `(gateway, AdminRequest(params, headers, body)) -> Response`
(`params`: the path's parameters), so the edge's route table can hold them as they are;
`ROUTES` lists them.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from pydantic import Field, ValidationError

from levergate.config import KeyPolicy
from levergate.errors import AuthenticationFailed, BadRequest, MethodNotAllowed, NotFound
from levergate.gateway import Gateway
from levergate.layers.keys.build import KeyKit
from levergate.server.edge import JSON, Response


@dataclass(frozen=True, slots=True)
class AdminRequest:
    params: Mapping[str, str]  # the path's parameters, e.g. {"id": ...}
    headers: Mapping[str, str]
    body: bytes


Handler = Callable[[Gateway, AdminRequest], Awaitable[Response]]
_ID = r"^[A-Za-z0-9_.:-]{1,128}$"
M = TypeVar("M", bound=KeyPolicy)


class NewKey(KeyPolicy):
    """The body of `POST /admin/keys`."""

    tenant: str = Field("default", pattern=_ID)
    name: str = Field("", max_length=200)
    models: tuple[str, ...] = Field((), max_length=1000)


def _kit(gateway: Gateway, headers: Mapping[str, str]) -> KeyKit:
    admin = gateway.settings.admin
    kit = gateway.pipeline.keys
    if not admin.enabled or admin.token is None or kit is None:
        raise NotFound("Unknown path.", code="unknown_url")
    scheme, _, token = headers.get("authorization", "").partition(" ")
    expected = admin.token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
        raise AuthenticationFailed("Incorrect admin token.", code="invalid_admin_token")
    return kit


def _json(status: int, data: Any) -> Response:
    # no-store: a response may carry a key in plaintext; no cache on the way may keep it.
    return Response(
        status, [("content-type", JSON), ("cache-control", "no-store")], orjson.dumps(data)
    )


def _record(data: dict[str, Any]) -> dict[str, Any]:
    return {"object": "api_key", **data}


class KeyChange(KeyPolicy):
    """The body of `POST /admin/keys/{id}`: only the fields given change."""

    name: str | None = Field(None, max_length=200)
    models: tuple[str, ...] = Field((), max_length=1000)


def _parsed(model: type[M], body: bytes) -> M:
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise BadRequest(f"Invalid key request: {problems}", code="invalid_key_request") from None


async def create_key(gateway: Gateway, request: AdminRequest) -> Response:
    kit = _kit(gateway, request.headers)
    asked = _parsed(NewKey, request.body)
    record, key = await kit.keyring.create(tenant=asked.tenant, name=asked.name, policy=asked)
    return _json(201, _record({**record.public(), "key": key}))


async def list_keys(gateway: Gateway, request: AdminRequest) -> Response:
    kit = _kit(gateway, request.headers)
    records = await kit.keyring.list(request.params.get("tenant"))
    return _json(200, {"object": "list", "data": [_record(r.public()) for r in records]})


async def show_key(gateway: Gateway, request: AdminRequest) -> Response:
    kit = _kit(gateway, request.headers)
    return _json(200, _record((await kit.keyring.find(request.params["id"])).public()))


async def update_key(gateway: Gateway, request: AdminRequest) -> Response:
    kit = _kit(gateway, request.headers)
    change = _parsed(KeyChange, request.body)
    record = await kit.keyring.update(request.params["id"], name=change.name, policy=change)
    return _json(200, _record(record.public()))


async def rotate_key(gateway: Gateway, request: AdminRequest) -> Response:
    kit = _kit(gateway, request.headers)
    record, key = await kit.keyring.rotate(request.params["id"])
    return _json(200, _record({**record.public(), "key": key}))


async def revoke_key(gateway: Gateway, request: AdminRequest) -> Response:
    kit = _kit(gateway, request.headers)
    return _json(200, _record((await kit.keyring.revoke(request.params["id"])).public()))


async def key_spend(gateway: Gateway, request: AdminRequest) -> Response:
    kit = _kit(gateway, request.headers)
    record = await kit.keyring.find(request.params["id"])
    budgets = kit.budgets
    if budgets is None:
        raise NotFound("This gateway counts no spend.", code="no_spend_store")
    spent = await budgets.spent(record.id)
    periods = budgets.periods()
    return _json(
        200,
        {
            "object": "api_key.spend",
            "id": record.id,
            # spent_usd is null while the spend store cannot answer.
            "day": {
                "period": periods.day,
                "spent_usd": None if spent is None else spent.day,
                "budget_usd": record.daily_budget_usd,
            },
            "month": {
                "period": periods.month,
                "spent_usd": None if spent is None else spent.month,
                "budget_usd": record.monthly_budget_usd,
            },
        },
    )


ROUTES: list[tuple[str, str, Handler]] = [
    ("POST", "/admin/keys", create_key),
    ("GET", "/admin/keys", list_keys),
    ("GET", "/admin/tenants/{tenant}/keys", list_keys),
    ("GET", "/admin/keys/{id}", show_key),
    ("POST", "/admin/keys/{id}", update_key),
    ("DELETE", "/admin/keys/{id}", revoke_key),
    ("POST", "/admin/keys/{id}/rotate", rotate_key),
    ("POST", "/admin/keys/{id}/revoke", revoke_key),
    ("GET", "/admin/keys/{id}/spend", key_spend),
]


async def dispatch(
    gateway: Gateway, method: str, path: str, headers: Mapping[str, str], body: bytes
) -> Response:
    """Until the edge's route table holds `ROUTES`: match `path` here (404, 405 like the edge)."""
    allowed = []
    for route_method, pattern, handler in ROUTES:
        params = _match(pattern, path)
        if params is None:
            continue
        if route_method == method:
            return await handler(gateway, AdminRequest(params, headers, body))
        allowed.append(route_method)
    _kit(gateway, headers)  # a disabled admin API is a 404 whatever the method
    if allowed:
        raise MethodNotAllowed(f"Use {' or '.join(allowed)} for {path}.")
    raise NotFound(f"Unknown path: {path}", code="unknown_url")


def _match(pattern: str, path: str) -> dict[str, str] | None:
    want, got = pattern.split("/"), path.split("/")
    if len(want) != len(got):
        return None
    params = {}
    for part, value in zip(want, got, strict=True):
        if part.startswith("{"):
            if not value:
                return None
            params[part[1:-1]] = value
        elif part != value:
            return None
    return params

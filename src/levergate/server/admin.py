"""The admin API: gateway keys made, listed, rotated, revoked and their spend read over HTTP.

    POST   /admin/keys                  create: {tenant, name?, models?, rpm?, tpm?,
                                          daily_budget_usd?, monthly_budget_usd?, roles?
                                          (["dashboard"]: may read /dashboard)} -> 201, the
                                          key in plaintext (shown this once, never again)
    GET    /admin/keys                  list (no hashes, no keys)
    GET    /admin/tenants/{tenant}/keys one tenant's keys
    GET    /admin/keys/{id}             one record
    POST   /admin/keys/{id}             change its name, models, rates or budgets (the fields
                                          given; the others stay)
    POST   /admin/keys/{id}/rotate      a new key for the record; the old one stops working
    POST   /admin/keys/{id}/revoke      (or DELETE /admin/keys/{id}) -> the key gets 401s
    GET    /admin/keys/{id}/spend       today's and this month's spend against the budgets
    POST   /admin/reload                read the configuration file again and swap the
                                          pipeline (server/reload.py): 200, or 400 naming the
                                          field when the file does not validate

Off unless `admin.enabled`: then every path here is a 404 like any unknown one (the route
table leaves them out: `enabled`). Every route is guarded by `server.guards.admin_token`,
which checks `Authorization: Bearer <admin.token>` (constant-time), its own credential, apart
from the client keys, before the body is read. The routes are lines of `server.routes.ROUTES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from pydantic import Field, ValidationError

from levergate.config import KeyPolicySettings, Settings
from levergate.core.json_bound import TooDeep, parse_json
from levergate.errors import BadRequest, ConfigError, NotFound
from levergate.gateway import Gateway
from levergate.layers.keys.build import KeyKit
from levergate.server.exchange import Request, Response

if TYPE_CHECKING:
    from levergate.server.edge import Edge

JSON = "application/json"
_ID = r"^[A-Za-z0-9_.:-]{1,128}$"
# A key's name is any text but control characters (C0, DEL, C1): a NUL, a newline or a
# terminal escape in a name was kept and shown back by every list of keys.
_NAME = r"^[^\x00-\x1f\x7f-\x9f]*$"
M = TypeVar("M", bound=KeyPolicySettings)


class NewKey(KeyPolicySettings):
    """The body of `POST /admin/keys`. `tenant` is required: an empty body once made a key
    for tenant "default", which nobody asked for."""

    tenant: str = Field(pattern=_ID)
    name: str = Field("", max_length=200, pattern=_NAME)


def enabled(settings: Settings) -> bool:
    """Whether the route table holds the admin routes at all (otherwise: 404s)."""
    return settings.admin.enabled


def _kit(gateway: Gateway) -> KeyKit:
    kit = gateway.keyring
    if kit is None:
        raise NotFound("Unknown path.", code="unknown_url")
    return kit


def _json(status: int, data: Any) -> Response:
    # no-store: a response may carry a key in plaintext; no cache on the way may keep it.
    return Response(
        status, [("content-type", JSON), ("cache-control", "no-store")], orjson.dumps(data)
    )


def _record(data: dict[str, Any]) -> dict[str, Any]:
    return {"object": "api_key", **data}


class KeyChange(KeyPolicySettings):
    """The body of `POST /admin/keys/{id}`: only the fields given change."""

    name: str | None = Field(None, max_length=200, pattern=_NAME)


def _parsed(model: type[M], body: bytes) -> M:
    try:
        # Parsed under the gateway's one depth bound, then validated (core/json_bound.py).
        return model.model_validate(parse_json(body or b"{}"))
    except TooDeep as exc:
        raise BadRequest(f"The body nests deeper than {exc.limit} levels.",
                         code="json_too_deep") from None  # fmt: skip
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"The body is not valid JSON: {exc.msg}.", code="invalid_json") from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise BadRequest(f"Invalid key request: {problems}", code="invalid_key_request") from None


async def create_key(edge: Edge, request: Request) -> Response:
    kit = _kit(edge.gateway)
    asked = _parsed(NewKey, request.body)
    record, key = await kit.keyring.create(tenant=asked.tenant, name=asked.name, policy=asked)
    return _json(201, _record({**record.public(), "key": key}))


async def list_keys(edge: Edge, request: Request) -> Response:
    kit = _kit(edge.gateway)
    records = await kit.keyring.list(request.params.get("tenant"))
    return _json(200, {"object": "list", "data": [_record(r.public()) for r in records]})


async def show_key(edge: Edge, request: Request) -> Response:
    kit = _kit(edge.gateway)
    return _json(200, _record((await kit.keyring.find(request.params["id"])).public()))


async def update_key(edge: Edge, request: Request) -> Response:
    kit = _kit(edge.gateway)
    change = _parsed(KeyChange, request.body)
    record = await kit.keyring.update(request.params["id"], name=change.name, policy=change)
    return _json(200, _record(record.public()))


async def rotate_key(edge: Edge, request: Request) -> Response:
    kit = _kit(edge.gateway)
    record, key = await kit.keyring.rotate(request.params["id"])
    return _json(200, _record({**record.public(), "key": key}))


async def revoke_key(edge: Edge, request: Request) -> Response:
    kit = _kit(edge.gateway)
    return _json(200, _record((await kit.keyring.revoke(request.params["id"])).public()))


async def key_spend(edge: Edge, request: Request) -> Response:
    kit = _kit(edge.gateway)
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


async def reload_config(edge: Edge, _request: Request) -> Response:
    """`POST /admin/reload`: the file is validated and swapped in, or refused (400, with the
    error naming the field) while the old configuration keeps serving."""
    reloader = edge.reloader
    if reloader is None:
        raise NotFound("This process cannot reload its configuration (it was not started "
                       "from a file by `levergate serve`).", code="reload_unavailable")  # fmt: skip
    try:
        settings = await reloader.reload()
    except ConfigError as exc:
        raise BadRequest(f"Reload refused, the old configuration keeps serving: {exc.message}",
                         code="invalid_config") from None  # fmt: skip
    return _json(200, {"object": "reload", "reloads": reloader.reloads,
                       "models": sorted(m.name for m in settings.models)})  # fmt: skip

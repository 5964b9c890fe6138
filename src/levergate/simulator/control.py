"""The non-generation endpoints: `/v1/models`, `/health`, and the live controls tests use.

    GET  /sim/stats    counters (requests by endpoint and key, 429s, faults, in flight, ...)
    GET  /sim/config   the live settings
    POST /sim/config   deep-merge a JSON patch into them, e.g. {"faults": {"error_rate": 0.5}}
    PUT  /sim/config   replace them (fields not given take their defaults); the same as
                       POST /sim/config?replace=true
    POST /sim/reset    forget counters, limit windows and cached prefixes; reseed

The listening address (`host`, `port`) cannot change on a running simulator: a patch that
changes it is refused with a 400 rather than silently ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from levergate.simulator import responses
from levergate.simulator.responses import Reply, SimError
from levergate.simulator.settings import SimSettings, describe

if TYPE_CHECKING:
    from levergate.simulator.simulator import Simulator

# Models carry a fixed creation time so /v1/models is byte-for-byte stable between runs.
_MODELS_CREATED = 1_700_000_000


def control_reply(sim: Simulator, *, method: str, path: str, query: str, body: bytes) -> Reply:
    if path == "/v1/models":
        return _ok(responses.models_body(sim.settings.models, created=_MODELS_CREATED))
    if path.startswith("/v1/models/"):
        name = path.removeprefix("/v1/models/")
        if sim.settings.strict_models and name not in sim.settings.models:
            raise SimError(
                404, f"The model '{name}' does not exist", code="model_not_found", param="model"
            )
        return _ok(orjson.dumps(responses.model_object(name, created=_MODELS_CREATED)))
    if path == "/health":
        return _ok(orjson.dumps({"status": "ok", "simulated": True}))
    if path == "/sim/stats":
        return _ok(orjson.dumps(sim.snapshot()))
    if path == "/sim/reset":
        sim.reset()
        return _ok(orjson.dumps({"reset": True}))
    if method == "GET":
        return _settings_reply(sim.settings)
    replace = method == "PUT" or "replace=true" in query.lower()
    return _change_settings(sim, replace=replace, body=body)


def _change_settings(sim: Simulator, *, replace: bool, body: bytes) -> Reply:
    try:
        patch: Any = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError as exc:
        raise SimError(400, f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(patch, dict):
        raise SimError(400, "The settings patch must be a JSON object.")
    current = sim.settings
    try:
        if replace:
            patch = {"host": current.host, "port": current.port, **patch}
            new = SimSettings.model_validate(patch)
        else:
            new = current.patched(patch)
    except ValidationError as exc:
        raise SimError(
            400, f"Invalid simulator settings:\n{describe(exc)}", code="invalid_settings"
        ) from None
    if (new.host, new.port) != (current.host, current.port):
        raise SimError(400, "host and port cannot change while the simulator runs.", param="port")
    sim.replace(new)
    return _settings_reply(new)


def _settings_reply(settings: SimSettings) -> Reply:
    return _ok(orjson.dumps(settings.model_dump(mode="json")))


def _ok(body: bytes) -> Reply:
    return Reply(status=200, body=body)

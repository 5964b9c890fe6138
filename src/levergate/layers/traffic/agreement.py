"""Replicas that share rate limits must agree on them: a check at start, logged loudly.

Replicas on one Redis share each limit's state under its key (`endpoint:NAME`,
`key:UPSTREAM`, `tenant:NAME`), but each enforces the limit values of its own file. A replica
started with `rpm: 120` where the others say `rpm: 60` admits twice what they do on the same
key, and nothing else would notice. So at start each replica records what it enforces in the
shared store (`<traffic.redis_prefix>shared-config`: the digest of its shared limits, each
limit's values, which process wrote them and when), compares it with what the last replica to
start recorded, and logs an ERROR line per limit that differs before recording its own. During a
rolling change of limits the replicas started on the old file say so once each; the line names
the fields, so an intended change and a stray file are told apart by reading it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

import orjson

from levergate.config import RateLimitsSettings, Settings
from levergate.core.jobs import BackgroundJob
from levergate.core.json_bound import parse_json

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from levergate.stores.registry import StoreRegistry
    from levergate.stores.select import Choice

log = logging.getLogger("levergate.traffic")

RECORD = "shared-config"
# The fields of a limit that decide what it admits (per-process fields like max_concurrency
# are left out: replicas may differ there by design).
_SHARED_FIELDS = ("rpm", "tpm", "window_seconds", "burst", "token_burst", "margin", "tpm_charge")


def shared_limits(settings: Settings) -> dict[str, dict[str, Any]]:
    """Every limit whose state replicas share, by scope, with the values that decide it."""
    found: dict[str, dict[str, Any]] = {}

    def add(scope: str, limits: RateLimitsSettings | None) -> None:
        if limits is not None and (limits.rpm is not None or limits.tpm is not None):
            found[scope] = {name: getattr(limits, name) for name in _SHARED_FIELDS}

    for upstream in settings.upstreams:
        add(f"endpoint:{upstream.name}", getattr(upstream, "limits", None))
        add(f"key:{upstream.name}", getattr(upstream, "key_limits", None))
    for tenant, limits in settings.traffic.tenants.items():
        add(f"tenant:{tenant}", limits)
    add("tenant:*", settings.traffic.tenant_default)
    return found


def digest(limits: dict[str, dict[str, Any]]) -> str:
    return hashlib.sha256(orjson.dumps(limits, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def differences(ours: dict[str, dict[str, Any]], theirs: dict[str, dict[str, Any]]) -> list[str]:
    """One line per shared limit the two configurations disagree on, naming the fields."""
    lines = []
    for scope in sorted(ours.keys() | theirs.keys()):
        mine, other = ours.get(scope), theirs.get(scope)
        if mine == other:
            continue
        if mine is None or other is None:
            lines.append(f"{scope}: {'absent' if mine is None else 'set'} here, "
                         f"{'absent' if other is None else 'set'} there")  # fmt: skip
            continue
        fields = ", ".join(
            f"{name}={mine.get(name)!r} here, {other.get(name)!r} there"
            for name in _SHARED_FIELDS
            if mine.get(name) != other.get(name)
        )
        lines.append(f"{scope}: {fields}")
    return lines


async def compare_and_record(client: Redis, key: str, ours: dict[str, dict[str, Any]]) -> list[str]:
    """Compare with the record in the shared store, then replace it with ours; the differences."""
    raw = await client.get(key)
    found: list[str] = []
    if raw is not None:
        try:
            record = parse_json(raw)
            theirs, by = record["limits"], record.get("by", "?")
        except (ValueError, KeyError, TypeError):
            theirs, by = None, "?"
        if isinstance(theirs, dict) and record.get("digest") != digest(ours):
            found = [f"{line} (recorded by {by})" for line in differences(ours, theirs)]
    mine = {"digest": digest(ours), "limits": ours, "at": time.time(),
            "by": f"{socket.gethostname()}:{os.getpid()}"}  # fmt: skip
    await client.set(key, orjson.dumps(mine))
    return found


def agreement_job(
    settings: Settings, *, choice: Choice, stores: StoreRegistry
) -> BackgroundJob | None:
    """A one-shot background job (retried while Redis is down) when the limits are shared."""
    if choice.backend != "redis":
        return None
    client = stores.redis(choice, what="traffic.store")
    key = f"{settings.traffic.redis_prefix}{RECORD}"
    ours = shared_limits(settings)

    async def run() -> None:
        for line in await compare_and_record(client, key, ours):
            log.error(
                "SHARED LIMIT MISMATCH: this replica and another on the same Redis "
                "(traffic.redis_prefix %r) enforce different limits on one shared key: %s. "
                "Every replica must load the same limits (expected once per replica during a "
                "rolling change of them).",
                settings.traffic.redis_prefix, line,
            )  # fmt: skip

    return BackgroundJob("shared-limits-agreement", run)

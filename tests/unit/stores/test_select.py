"""The one backend-selection rule (stores/select.py) and the registry's pools: an explicit
backend or address always wins, `auto` takes the first kind the connection offers in the
section's order, a configuration with no `stores` keeps the release before's choices, and one
Redis URL is one pool whichever sections ask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st
from pydantic import SecretStr

from levergate.config import ConnectionSettings, Settings
from levergate.errors import ConfigError
from levergate.stores import select
from levergate.stores.registry import StoreRegistry
from levergate.stores.select import BACKENDS, Backend, Choice, Section, choose

KINDS: dict[str, Any] = {
    "redis": {"redis_url": "redis://r:6379/0"},
    "postgres": {"postgres_dsn": "postgresql://pg/db"},
    "memcached": {"memcached_address": "mc:11211"},
    "sqlite": {"sqlite_dir": "/var/lib/lg"},
}
kinds = st.lists(st.sampled_from(list(KINDS)), unique=True)
section_kinds = st.lists(st.sampled_from(["redis", "postgres", "memcached", "sqlite"]),
                         unique=True, min_size=1)  # fmt: skip
backends = st.sampled_from(["auto", *BACKENDS])


def connection(offered: list[str]) -> ConnectionSettings:
    values: dict[str, Any] = {}
    for kind in offered:
        values |= KINDS[kind]
    return ConnectionSettings.model_validate(values)


def section(wanted: list[Backend], backend: str, name: str | None = None) -> Section:
    return Section("s", tuple(wanted), "s.sqlite3", backend, name, "memory",
                   defaults={"redis": "redis://legacy/0", "sqlite": "/legacy.sqlite3"})  # fmt: skip


@examples(deadline=None)  # a busy shared machine, not the rule, sets the pace
@given(offered=kinds, wanted=section_kinds, backend=backends)
def test_an_explicit_backend_wins_and_auto_takes_the_first_offered_kind(
    offered: list[str], wanted: list[Backend], backend: str
) -> None:
    stores = {"default": connection(offered)}
    chosen = choose(section(wanted, backend), stores)
    if backend != "auto":
        assert chosen.backend == backend
        return
    first = next((kind for kind in wanted if kind in offered), None)
    assert chosen.backend == (first or "memory")
    assert chosen.connection == ("default" if first else None)
    if first == "sqlite":
        assert chosen.address == "/var/lib/lg/s.sqlite3"


@examples(deadline=None)  # a busy shared machine, not the rule, sets the pace
@given(wanted=section_kinds, backend=backends)
def test_without_stores_the_section_decides_alone(wanted: list[Backend], backend: str) -> None:
    chosen = choose(section(wanted, backend), {})
    assert chosen.connection is None
    assert chosen.backend == ("memory" if backend == "auto" else backend)
    if chosen.backend == "redis":
        assert chosen.address == "redis://legacy/0"


@examples(deadline=None)  # a busy shared machine, not the rule, sets the pace
@given(offered=kinds, backend=st.sampled_from(["auto", "redis"]))
def test_an_address_the_section_sets_itself_wins(offered: list[str], backend: str) -> None:
    own = Section("s", ("redis",), "", backend, None, "redis", own={"redis": "redis://own/1"})
    assert choose(own, {"default": connection(offered)}).address == "redis://own/1"


def test_a_named_connection_must_exist_and_offer_a_kind() -> None:
    stores = {"pg": connection(["postgres"])}
    with pytest.raises(ConfigError, match="offers none"):
        choose(section(["redis", "sqlite"], "auto", "pg"), stores)
    with pytest.raises(ConfigError, match="lacks"):
        choose(section(["redis"], "auto", "nope"), stores)
    with pytest.raises(ConfigError, match=r"cache\.store\.connection names 'nope'"):
        Settings.load(cache={"store": {"connection": "nope"}})


def test_a_config_without_stores_keeps_the_release_befores_choices() -> None:
    plain = Settings.load()
    assert [c.backend for c in every_piece(plain)] == [
        "memory", "memory", "sqlite", "memory", "sqlite"
    ]  # fmt: skip
    old = Settings.load(cache={"store": {"backend": "redis", "redis_url": "redis://c/0"}},
                        traffic={"store": "redis"})  # fmt: skip
    cache, limits, keys, responses, batch = every_piece(old)
    assert (cache.address, limits.address) == ("redis://c/0", "redis://127.0.0.1:6379/0")
    assert (responses.backend, responses.address) == ("redis", "redis://c/0")
    assert (keys.backend, batch.backend) == ("sqlite", "sqlite")


def test_one_default_moves_every_piece_and_the_embedded_default_keeps_it() -> None:
    from levergate.cli.embedded import persistent_cache

    shared = {"redis_url": "redis://shared:6379/2", "postgres_dsn": "postgresql://pg/lg"}
    settings = Settings.load(stores={"default": shared})
    pieces = every_piece(settings)
    assert [c.backend for c in pieces] == ["redis"] * 4 + ["postgres"]
    assert {c.connection for c in pieces} == {"default"}
    assert {c.address for c in pieces[:4]} == {"redis://shared:6379/2"}
    cache = select.cache_store(settings)
    assert select.semantic_index(settings, cache).backend == "redis"
    keys = select.key_store(settings)
    assert select.spend(settings, keys=keys, keys_in_sqlite=False).backend == "redis"
    assert select.cache_store(persistent_cache(settings)).backend == "redis"
    assert select.cache_store(persistent_cache(Settings.load())).backend == "sqlite"


def test_workers_share_what_one_process_kept_in_memory_and_redis_still_wins() -> None:
    workers = Settings.load(server={"workers": 2})
    assert [c.backend for c in every_piece(workers)] == ["sqlite"] * 5
    keys = select.key_store(workers)
    assert select.spend(workers, keys=keys, keys_in_sqlite=False).backend == "sqlite"
    assert select.limits(workers).address == workers.traffic.sqlite_path
    # A section told `memory` stays per worker; a Redis in `stores` is shared as by replicas.
    told = Settings.load(server={"workers": 2}, traffic={"store": "memory"})
    assert select.limits(told).backend == "memory"
    shared = Settings.load(server={"workers": 2}, stores={"default": {"redis_url": "redis://r/0"}})
    assert [c.backend for c in every_piece(shared)][:4] == ["redis"] * 4


def every_piece(settings: Settings) -> list[Choice]:
    return [select.cache_store(settings), select.limits(settings), select.key_store(settings),
            select.responses(settings), select.batch_jobs(settings)]  # fmt: skip


def test_a_setting_of_the_release_before_is_named_with_what_replaces_it() -> None:
    assert select.deprecations(Settings.load()) == []
    lines = select.deprecations(Settings.load(
        traffic={"redis_url": "redis://a/0"}, cache={"semantic": {"index_redis_url": "redis://b"}},
        batch={"store": {"postgres_dsn": "postgresql://secret@pg/db"}},
    ))  # fmt: skip
    assert [line.split(" ")[0] for line in lines] == [
        "traffic.redis_url", "cache.semantic.index_redis_url", "batch.store.postgres_dsn"
    ]  # fmt: skip
    assert "stores.default.redis_url" in lines[1]
    assert "cache.store.connection" in lines[1]
    assert "secret" not in " ".join(lines)


@examples(deadline=None)  # a busy shared machine, not the rule, sets the pace
@given(urls=st.lists(st.sampled_from([f"redis://127.0.0.1:6379/{db}" for db in range(5)]),
                     min_size=1, max_size=12))  # fmt: skip
async def test_one_pool_per_url_whoever_asks(urls: list[str]) -> None:
    registry = StoreRegistry(Settings.load())
    clients = [registry.redis(Choice("redis", address=url), what="t") for url in urls]
    assert registry.pools == len(set(urls))
    by_url = {url: client.connection_pool for url, client in zip(urls, clients, strict=True)}
    for url, client in zip(urls, clients, strict=True):
        assert client.connection_pool is by_url[url]
    await registry.aclose()


def test_a_pool_takes_its_connections_timeout() -> None:
    settings = Settings.load(stores={"default": {"redis_url": "redis://h/0",
                                                 "timeout_seconds": 7}})  # fmt: skip
    registry = StoreRegistry(settings)
    client = registry.redis(select.limits(settings), what="t")
    assert registry.socket_timeout(client) == 7
    legacy = registry.redis(Choice("redis", address="redis://other/0"), what="t")
    assert registry.socket_timeout(legacy) == 5
    with pytest.raises(ConfigError, match="no Redis URL"):
        registry.redis(Choice("memory"), what="t")


def test_a_connection_is_secret_and_bounded() -> None:
    made = ConnectionSettings(redis_url=SecretStr("redis://:pw@h/0"))
    assert "pw" not in repr(made)
    assert "pw" not in repr(Choice("redis", "default", "redis://:pw@h/0"))
    with pytest.raises(ValueError, match="timeout_seconds"):
        ConnectionSettings(timeout_seconds=1)
    with pytest.raises(ConfigError, match="stores"):
        Settings.load(stores={"Bad Name": {}})


def test_the_request_log_goes_where_the_stores_say_and_is_on_for_the_embedded_default(
    tmp_path: Path,
) -> None:
    from levergate.cli.embedded import request_log_on

    assert select.request_log(Settings.load()).backend == "sqlite"
    shared = Settings.load(stores={"default": {"postgres_dsn": "postgresql://pg/lg"}})
    assert (select.request_log(shared).backend, select.request_log(shared).address) == (
        "postgres", "postgresql://pg/lg",
    )  # fmt: skip
    folder = Settings.load(stores={"default": {"sqlite_dir": str(tmp_path)}})
    assert select.request_log(folder).address == str(tmp_path / "requests.sqlite3")
    assert request_log_on(Settings.load()).request_log.enabled
    assert not request_log_on(Settings.load(request_log={"enabled": False})).request_log.enabled

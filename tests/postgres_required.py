"""The one rule for tests that need PostgreSQL (as tests/redis_required.py is for Redis):
outside CI a missing server skips them with a reason; under CI=true (where .ci/run starts
PostgreSQL) it fails them, so a skip never hides a lost test. Each test gets a database of its
own, created here and dropped afterwards."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg

from tests.required import missing

SERVER = os.environ.get("LEVERGATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")


@asynccontextmanager
async def postgres_database(name: str) -> AsyncIterator[str]:
    """A fresh, empty database named after `name` and this process on the test server (two
    test runs on one server never drop each other's), dropped afterwards; its DSN."""
    name = f"{name}_{os.getpid()}"
    try:
        admin = await psycopg.AsyncConnection.connect(
            f"{SERVER}/postgres", autocommit=True, connect_timeout=3
        )
    except psycopg.Error as exc:
        missing(f"PostgreSQL not reachable at {SERVER}: {exc}")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield f"{SERVER}/{name}"
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()

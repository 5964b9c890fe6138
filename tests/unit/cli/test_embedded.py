"""The embedded default's settings: its exact cache survives a restart unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from levergate.cli.embedded import persistent_cache
from levergate.config import Settings


def test_the_embedded_default_caches_in_sqlite_under_the_user_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    store = persistent_cache(Settings.load()).cache.store
    assert store.backend == "sqlite"
    assert store.sqlite_path == str(tmp_path / "levergate" / "cache.sqlite3")


def test_a_chosen_backend_or_file_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEVERGATE_CACHE__STORE__BACKEND", "memory")
    assert persistent_cache(Settings.load()).cache.store.backend == "memory"
    monkeypatch.delenv("LEVERGATE_CACHE__STORE__BACKEND")
    config = tmp_path / "levergate.yaml"
    config.write_text(f"cache:\n  store:\n    sqlite_path: {tmp_path / 'mine.sqlite3'}\n")
    store = persistent_cache(Settings.load(str(config))).cache.store
    assert (store.backend, store.sqlite_path) == ("sqlite", str(tmp_path / "mine.sqlite3"))

"""Where a learned route's files live beside its router file."""

from __future__ import annotations

from pathlib import Path

__all__ = ["challenger_path"]


def challenger_path(route_file: str) -> Path:
    """Where `levergate router challenge` puts a route's candidate while it is considered (the
    router watch, layers/route_watch.py, loads it beside the champion)."""
    path = Path(route_file)
    return path.with_name(path.name + ".challenger")

"""What a test needs from the machine. On a developer's machine a missing prerequisite skips
the test; under CI (`CI=true`) it fails it, since `.ci/run` installs or starts every one
(Redis, PostgreSQL, Memcached, HAProxy, promtool, the test extras): a skip there would hide a
test that never ran."""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest


def missing(what: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"required under CI: {what}")
    pytest.skip(what)


def program(name: str, *, install: str) -> str:
    """The path of program `name` (PATH, then /usr/sbin); `install` says how to get it."""
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name,) if p.exists()), None
    )
    if found is None:
        missing(f"{name} is not installed ({install})")
    return found


def module(name: str) -> ModuleType:
    """A test extra's module (`make test` installs them all)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"{name} cannot be imported ({exc}): pip install -e '.[test]'")

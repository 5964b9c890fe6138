"""The hashed lockfiles (requirements/*.lock, written by `make lock`) are current, and the
installs that use them verify every package: every dependency pyproject.toml declares for the
image and for `make test`'s environment is pinned at a version its specifier accepts, nothing
is pinned that no declared dependency brings, every pin carries hashes, a file compiled under
another's constraints (`-c`) agrees with it on every package they share, and `make test`
(CI's `.ci/run`) installs nothing that is not hashed. Offline: no registry is asked, so a stale
file fails here whatever the registry serves today."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.packaging.files import LOCKS, Pin, make_rule, parse, pyproject

SELF = "levergate (pyproject.toml)"


def make_lock_lines() -> dict[str, list[str]]:
    """The `make lock` recipe's compile commands as words, by the lockfile each writes."""
    _, recipe = make_rule("lock")
    commands = [shlex.split(line) for line in recipe if "$(COMPILE)" in line]
    return {words[words.index("-o") + 1].removeprefix("requirements/"): words for words in commands}


def extras_of(lock: str) -> list[str] | None:
    """The extras `make lock` compiles pyproject.toml with for this file (None: not from it)."""
    words = make_lock_lines().get(lock)
    assert words is not None, f"`make lock` does not write requirements/{lock}"
    if "pyproject.toml" not in words:
        return None
    return [words[i + 1] for i, w in enumerate(words) if w == "--extra"]


def declared(extras: list[str]) -> list[Requirement]:
    project = pyproject()["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def requirements_in(path: Path) -> list[Requirement]:
    """A `.in` file's requirements, following its `-r` includes."""
    found: list[Requirement] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found += requirements_in(path.parent / line.removeprefix("-r ").strip())
        elif line:
            found.append(Requirement(line))
    return found


def check_pinned(requirements: list[Requirement], pins: dict[str, Pin], where: str) -> None:
    for req in requirements:
        pin = pins.get(canonicalize_name(req.name))
        assert pin is not None, f"{where}: {req} is not pinned: run `make lock`"
        for version in pin.versions:
            assert req.specifier.contains(version, prereleases=True), (
                f"{where}: {pin.name}=={version} does not satisfy {req}: run `make lock`"
            )


LOCKFILES = sorted(p.name for p in LOCKS.glob("*.lock"))
FROM_PYPROJECT = [lock for lock in LOCKFILES if extras_of(lock) is not None]
FROM_IN_FILES = [lock for lock in LOCKFILES if extras_of(lock) is None]
CONSTRAINED = [(lock, words[i + 1].removeprefix("requirements/"))
               for lock, words in make_lock_lines().items()
               for i, word in enumerate(words) if word == "-c"]  # fmt: skip


@pytest.mark.parametrize("lock", LOCKFILES)
def test_each_lockfile_is_written_by_make_lock_with_hashes(lock: str) -> None:
    assert lock in make_lock_lines(), f"`make lock` does not write requirements/{lock}"
    header, pins = parse(LOCKS / lock)
    assert "#    make lock" in header
    assert pins
    unhashed = [p.name for p in pins.values() if p.hashes == 0]
    assert not unhashed, f"{lock}: pinned without a hash: {unhashed}"


def test_the_image_and_the_test_environment_are_locked_from_pyproject() -> None:
    assert FROM_PYPROJECT == ["engine.lock", "runtime.lock", "test.lock"]
    assert {"model.lock", "build.lock", "pip.lock", "test-build.lock"} <= set(FROM_IN_FILES)


@pytest.mark.parametrize("lock", FROM_PYPROJECT)
def test_the_pyproject_lockfiles_match_its_dependencies(lock: str) -> None:
    extras = extras_of(lock)
    assert extras is not None
    _, pins = parse(LOCKS / lock)
    requirements = declared(extras)
    check_pinned(requirements, pins, lock)
    direct = {canonicalize_name(r.name) for r in requirements}
    stale = [p.name for p in pins.values() if SELF in p.via and p.name not in direct]
    assert not stale, f"{lock}: pinned for levergate but no longer declared: {stale}"
    # Every other pin is brought by one that is itself in the file: nothing left over.
    for pin in pins.values():
        parents = {v.split(" ")[0] for v in pin.via if not v.startswith(("-c ", "-r "))}
        assert parents, f"{lock}: {pin.name} is pinned for no one"
        assert parents & ({*pins, SELF.split(" ", maxsplit=1)[0]}), (
            f"{lock}: {pin.name} via {parents}"
        )


@pytest.mark.parametrize("lock", FROM_IN_FILES)
def test_the_other_lockfiles_match_their_inputs(lock: str) -> None:
    _, pins = parse(LOCKS / lock)
    check_pinned(requirements_in(LOCKS / lock.replace(".lock", ".in")), pins, lock)


def test_the_extras_each_environment_needs_are_locked() -> None:
    """The default image serves replicas (the Redis and PostgreSQL clients), the engine image
    adds llama.cpp and the embedder, and `make test`'s environment holds what the suite and the
    type check import: the test extras, the embedded engine and the embedder."""
    assert {"redis", "postgres"} <= set(extras_of("runtime.lock") or [])
    assert {"redis", "postgres", "local", "embed"} <= set(extras_of("engine.lock") or [])
    assert {"test", "local", "embed"} <= set(extras_of("test.lock") or [])
    # What builds levergate (pyproject's build-system) is in both sets of build backends.
    backends = [Requirement(r) for r in pyproject()["build-system"]["requires"]]
    for lock in ("build.lock", "test-build.lock"):
        check_pinned(backends, parse(LOCKS / lock)[1], lock)
    # `make run` and `make test` install the image's model.lock: test_make_install.py.


@pytest.mark.parametrize(("lock", "constraint"), CONSTRAINED)
def test_a_lockfile_agrees_with_the_ones_it_is_compiled_under(lock: str, constraint: str) -> None:
    _, pins = parse(LOCKS / lock)
    _, under = parse(LOCKS / constraint)
    differ = [n for n in set(pins) & set(under) if pins[n].versions != under[n].versions]
    assert not differ, f"{lock} pins these differently from {constraint}: {differ}"


def test_the_test_environment_agrees_with_the_engine_image() -> None:
    assert ("test.lock", "engine.lock") in CONSTRAINED
    assert ("engine.lock", "runtime.lock") in CONSTRAINED
    _, runtime = parse(LOCKS / "runtime.lock")
    _, engine = parse(LOCKS / "engine.lock")
    assert set(runtime) <= set(engine)


def test_the_parser_sees_a_stale_lockfile(tmp_path: Path) -> None:
    """A pin below a raised floor, and a pin nothing needs, are what the checks above catch."""
    lock = tmp_path / "stale.lock"
    lock.write_text(
        "# header\norjson==3.9.0 \\\n    --hash=sha256:00\n    # via levergate (pyproject.toml)\n"
        "leftover==1.0 \\\n    --hash=sha256:11\n    # via\n    #   levergate (pyproject.toml)\n",
        encoding="utf-8",
    )
    _, pins = parse(lock)
    assert pins["leftover"].via == {SELF}
    with pytest.raises(AssertionError, match="does not satisfy"):
        check_pinned([Requirement("orjson>=3.10")], pins, "stale.lock")
    with pytest.raises(AssertionError, match="is not pinned"):
        check_pinned([Requirement("redis>=5")], pins, "stale.lock")

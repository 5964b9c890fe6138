"""`make test`'s install, which is CI's (`.ci/run` ends in `make test` on a clean clone), and
`make run`'s: every third-party package comes from a hashed lockfile and is installed with
`--require-hashes`, pip itself included; what compiles from source (llama-cpp-python, hnswlib,
levergate) builds without build isolation, against backends installed from their own hashed
lockfile first (an isolated build would fetch them unverified); the install runs again when a
lockfile changes; and nothing `make test` runs installs anything else. The Makefile is read as
written: this test cannot run the install, which compiles llama.cpp for minutes."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.packaging.files import ROOT, make_rule

INSTALL = "$(VENV)/.installed-test"
RUN_INSTALL = "$(VENV)/.installed"
VENV = "$(BIN)/python"
LOCKED = {"pip.lock", "test-build.lock", "test.lock", "model.lock"}
RUN_LOCKED = {"pip.lock", "test-build.lock", "engine.lock", "model.lock"}
ENVIRONMENTS = pytest.mark.parametrize(
    ("install", "locked", "environment"),
    [(INSTALL, LOCKED, "test.lock"), (RUN_INSTALL, RUN_LOCKED, "engine.lock")],
)


def variable(name: str) -> list[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    match = re.search(rf"^{name} [:?]?= (.*)$", text, flags=re.MULTILINE)
    assert match, f"the Makefile does not set {name}"
    return match[1].split()


def pip_installs(install: str = INSTALL) -> list[list[str]]:
    """The virtualenv's and an environment's `pip install` commands, in order, as words."""
    commands = make_rule(VENV)[1] + make_rule(install)[1]
    return [shlex.split(c) for c in commands if "$(PIP) install" in c]


def lockfiles(words: list[str]) -> list[str]:
    return [words[i + 1].removeprefix("requirements/") for i, w in enumerate(words) if w == "-r"]


@ENVIRONMENTS
def test_every_package_is_checked_against_a_hash(
    install: str, locked: set[str], environment: str
) -> None:
    installs = pip_installs(install)
    assert len(installs) == 5
    found: list[str] = []
    for words in installs:
        if "-e" in words:  # levergate itself, from this checkout, bringing nothing with it
            assert words[words.index("-e") + 1] == "."
            assert "--no-deps" in words
            continue
        assert "--require-hashes" in words, words
        operands = [w for i, w in enumerate(words[3:], 3)
                    if not w.startswith("-") and words[i - 1] != "-r"]  # fmt: skip
        assert operands == [], f"installed by name, not from a lockfile: {words}"
        found += lockfiles(words)
    assert set(found) == locked
    # pip's own upgrade comes first: every later install runs the locked pip.
    assert lockfiles(installs[0]) == ["pip.lock"]


@ENVIRONMENTS
def test_sources_build_against_the_locked_backends_with_the_engine_flags(
    install: str, locked: set[str], environment: str
) -> None:
    installs = pip_installs(install)
    backends = next(i for i, words in enumerate(installs) if "test-build.lock" in lockfiles(words))
    for words in installs[backends + 1 :]:
        if "--no-deps" not in words or "-e" in words:  # may build something from source
            assert "--no-build-isolation" in words, words
    packages = next(words for words in installs if environment in lockfiles(words))
    assert packages[0] == "CMAKE_ARGS=$(LOCAL_CMAKE_ARGS)"  # llama.cpp as `make run` builds it
    assert variable("LOCAL_CMAKE_ARGS") == ["-DLLAVA_BUILD=OFF", "-DGGML_NATIVE=OFF"]


@ENVIRONMENTS
def test_a_changed_lockfile_or_pyproject_reinstalls(
    install: str, locked: set[str], environment: str
) -> None:
    prerequisites, _ = make_rule(install)
    named = [
        path
        for word in prerequisites
        for path in (variable(word[2:-1]) if word.startswith("$(") and word != VENV else [word])
    ]
    assert "pyproject.toml" in named
    assert {f"requirements/{lock}" for lock in locked - {"pip.lock"}} <= set(named)
    assert VENV in prerequisites  # the virtualenv (and its locked pip) first


def test_make_run_installs_one_locked_environment() -> None:
    assert make_rule("run")[0] == [RUN_INSTALL]


def test_make_test_installs_nothing_else() -> None:
    assert make_rule("test")[0] == ["lint", "typecheck", "pytest"]
    for target in ("lint", "typecheck", "pytest"):
        prerequisites, recipe = make_rule(target)
        assert prerequisites == [INSTALL], target
        assert not [c for c in recipe if " install" in c], target
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == "exec make test"
    assert not [line for line in ci if "pip install" in line or "pip3 install" in line]

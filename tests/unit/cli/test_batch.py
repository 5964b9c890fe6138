"""`levergate batch`'s own parts: the `--url` check every subcommand shares (a malformed URL is
bad usage, exit 2, not an unreachable gateway) and the progress line drawn by
`output.Progress` (plain lines off a terminal, none with `--quiet`)."""

from __future__ import annotations

import argparse
import io
from typing import Literal

import pytest
from openai.types import Batch
from openai.types.batch_request_counts import BatchRequestCounts

from levergate.cli.batch import ProgressLine, gateway_url
from levergate.cli.main import main
from levergate.cli.output import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def batch(status: Literal["in_progress", "completed"], *, completed: int, failed: int = 0) -> Batch:
    counts = BatchRequestCounts(completed=completed, failed=failed, total=100)
    return Batch(id="batch_1", object="batch", endpoint="/v1/chat/completions",
                 input_file_id="file-1", completion_window="24h", created_at=0, status=status,
                 request_counts=counts)  # fmt: skip


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/v1", "https://gw.example", "http://[::1]:9/v1/"]
)
def test_an_http_url_is_taken_as_given(url: str) -> None:
    assert gateway_url(url) == url


@pytest.mark.parametrize(
    "url", ["notaurl", "127.0.0.1:8080", "ftp://h/v1", "http://", "http://:80/v1",
            "http://h:port/v1", "http://h:99999/v1", "http://h:0/v1"],
)  # fmt: skip
def test_a_url_that_is_not_http_host_port_is_refused(url: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"http\(s\)://host\[:port\]"):
        gateway_url(url)


@pytest.mark.parametrize(
    "argv",
    [
        ["batch", "status", "b", "--url", "notaurl"],
        ["batch", "cancel", "b", "--url", "notaurl"],
        ["batch", "run", "in.jsonl", "-o", "out.jsonl", "--url", "notaurl"],
    ],
)
def test_every_subcommand_exits_2_on_a_malformed_url(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "argument --url: must be an http(s)://host[:port] URL" in capsys.readouterr().err


def test_the_progress_line_counts_rate_and_eta_since_it_began_watching() -> None:
    clock = Clock()
    line = ProgressLine(Progress(out=io.StringIO()), clock=clock)
    assert line.text(batch("in_progress", completed=20)) == (
        "batch in_progress: 20/100 lines (20%), 0 failed"
    )
    clock.now += 10.0
    assert line.text(batch("in_progress", completed=38, failed=2)) == (
        "batch in_progress: 40/100 lines (40%), 2 failed, 2.0 lines/s, ETA 0m30s"
    )
    clock.now += 30.0
    assert line.text(batch("completed", completed=97, failed=3)) == (
        "batch completed: 100/100 lines (100%), 3 failed, 2.0 lines/s"
    )


def test_off_a_terminal_progress_is_a_plain_line_at_most_every_interval() -> None:
    clock, out = Clock(), io.StringIO()
    line = ProgressLine(Progress(out=out, every=10.0, clock=clock), clock=clock)
    for step in range(25):  # a look every second
        line.show(batch("in_progress", completed=step))
        clock.now += 1.0
    line.close()
    shown = out.getvalue().splitlines()
    assert [text.split(":")[1].split()[0] for text in shown] == ["0/100", "10/100", "20/100"]
    assert all("\x1b" not in text for text in shown)


def test_quiet_progress_writes_nothing() -> None:
    out = io.StringIO()
    line = ProgressLine(Progress(quiet=True, out=out))
    line.show(batch("in_progress", completed=5))
    line.close()
    assert out.getvalue() == ""

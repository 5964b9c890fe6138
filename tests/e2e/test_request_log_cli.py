"""The request log end to end through the real command line: `levergate serve` in front of
`levergate sim` with the log and the admin API on, the official OpenAI SDK as the client, then
`levergate log query | tail | export` (from the store and from the gateway's `GET /admin/log`)
and `levergate report` (from the log, from an export with broken lines, from an empty log),
each as a child process."""

from __future__ import annotations

import base64
import csv
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from levergate.testing.ports import free_port
from tests.e2e.test_readme import Server, clean_env
from tests.required import module

pytestmark = pytest.mark.timeout(180)
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
ADMIN = "log-admin-token-0123456789"


class Gateway:
    def __init__(self, url: str, db: Path, root: Path) -> None:
        self.url, self.db, self.root = url, db, root

    def cli(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*LEVERGATE, *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.root,
            env=clean_env(LEVERGATE_ADMIN__TOKEN=ADMIN),
            check=False,
        )
        assert done.returncode == expect, (args, done.returncode, done.stdout, done.stderr)
        return done

    def query(self, *args: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(self.cli("log", "query", *args, "--json").stdout)[
            "data"
        ]
        return found


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    root = tmp_path_factory.mktemp("request-log")
    sim_port, port = free_port(), free_port()
    db = root / "requests.sqlite3"
    config = {
        "server": {"port": port},
        "upstreams": [{"name": "sim", "base_url": f"http://127.0.0.1:{sim_port}/v1"}],
        "models": [{"name": "*", "upstream": "sim"}],
        "admin": {"enabled": True, "token": ADMIN},
        "request_log": {
            "enabled": True,
            "flush_seconds": 0.05,
            "store": {"sqlite_path": str(db)},
            "bodies": {"models": ["gpt-4o"]},
        },
    }
    (root / "gateway.yaml").write_text(yaml.safe_dump(config))
    env = clean_env(LEVERGATE_ADMIN__TOKEN=ADMIN)
    sim = Server(
        [*LEVERGATE, "sim", "--port", str(sim_port)],
        port=sim_port,
        log=root / "sim.log",
        cwd=root,
        env=env,
    )
    serve = Server(
        [*LEVERGATE, "serve", "--config", str(root / "gateway.yaml")],
        port=port,
        log=root / "serve.log",
        cwd=root,
        env=env,
    )
    try:
        send_traffic(f"http://127.0.0.1:{port}/v1")
        yield Gateway(f"http://127.0.0.1:{port}", db, root)
    finally:
        serve.stop()
        sim.stop()


def send_traffic(url: str) -> None:
    """Six requests: two tenants, two models, a stream."""
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    for i, (tenant, model) in enumerate(
        [
            ("acme", "gpt-4o-mini"),
            ("acme", "gpt-4o"),
            ("beta", "gpt-4o-mini"),
            ("beta", "gpt-4o"),
            ("acme", "gpt-4o-mini"),
        ]
    ):
        client.chat.completions.create(
            model=model,
            max_tokens=8,
            messages=[{"role": "user", "content": f"Question {i}?"}],
            extra_headers={"x-levergate-tenant": tenant},
        )
    for _ in client.chat.completions.create(
        model="gpt-4o-mini",
        max_tokens=8,
        stream=True,
        messages=[{"role": "user", "content": "Stream."}],
        extra_headers={"x-levergate-tenant": "beta"},
    ):
        pass
    client.close()
    with httpx.Client() as http:
        for _ in range(200):
            found = http.get(
                url.removesuffix("/v1") + "/admin/log/summary",
                headers={"authorization": f"Bearer {ADMIN}"},
            ).json()
            if found["requests"] == 6:
                return
            time.sleep(0.05)
    raise AssertionError("the log never held the six requests")


def test_query_reads_the_same_records_from_the_store_and_from_the_gateway(
    gateway: Gateway,
) -> None:
    stored = gateway.query("--db", str(gateway.db), "--limit", "100")
    served = gateway.query("--url", gateway.url, "--limit", "100")
    assert len(stored) == 6
    assert [r["request_id"] for r in stored] == [r["request_id"] for r in served]
    acme = gateway.query("--db", str(gateway.db), "--tenant", "acme")
    assert sorted(r["tenant"] for r in acme) == ["acme"] * 3
    streamed = [r for r in stored if r["ttft_ms"] is not None]
    assert len(streamed) == 1
    # Bodies only where enabled (gpt-4o), and the answer's text with them.
    bodied = [r for r in stored if r["request_body"] is not None]
    assert {r["model"] for r in bodied} == {"gpt-4o"}
    assert all("Question" in r["request_body"] and r["answer_body"] for r in bodied)
    summary = json.loads(
        gateway.cli("log", "query", "--db", str(gateway.db), "--summary", "--json").stdout
    )
    assert summary["requests"] == 6
    assert summary["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in stored))
    text = gateway.cli("log", "query", "--db", str(gateway.db)).stdout
    assert text.splitlines()[0].startswith("time (UTC)")
    assert len(text.splitlines()) == 7


def test_tail_shows_the_last_records_as_json_lines(gateway: Gateway) -> None:
    lines = gateway.cli(
        "log", "tail", "--once", "-n", "2", "--json", "--db", str(gateway.db)
    ).stdout.splitlines()
    newest = gateway.query("--db", str(gateway.db), "--limit", "2")
    assert [json.loads(line)["seq"] for line in lines] == [r["seq"] for r in reversed(newest)]


def test_export_writes_jsonl_csv_and_parquet(gateway: Gateway) -> None:
    db = str(gateway.db)
    jsonl, table = gateway.root / "all.jsonl", gateway.root / "all.csv"
    gateway.cli("log", "export", "--db", db, "-o", str(jsonl))
    gateway.cli("log", "export", "--db", db, "-o", str(table), "--tenant", "beta")
    assert len(jsonl.read_text().splitlines()) == 6
    with table.open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["tenant"] for r in rows] == ["beta"] * 3
    assert float(rows[0]["cost_usd"]) >= 0
    pyarrow = module("pyarrow.parquet")
    parquet = gateway.root / "all.parquet"
    gateway.cli("log", "export", "--db", db, "-o", str(parquet))
    assert pyarrow.read_table(parquet).num_rows == 6


def test_report_is_one_offline_html_file_and_a_markdown_summary(gateway: Gateway) -> None:
    page, summary = gateway.root / "report.html", gateway.root / "report.md"
    done = gateway.cli(
        "report",
        "--db",
        str(gateway.db),
        "-o",
        str(page),
        "--markdown",
        str(summary),
        "--title",
        "Six requests",
    )
    html = page.read_text()
    assert html.count("<svg") == 4
    assert "src=" not in html
    assert "href=" not in html  # nothing to fetch: it opens offline
    data = json.loads(html.split('id="report-data">')[1].split("</script>")[0])
    assert data["totals"]["requests"] == 6
    assert done.stdout == summary.read_text()
    assert "**6 requests**" in done.stdout


def test_broken_lines_are_reported_by_number_and_skipped(gateway: Gateway) -> None:
    export = gateway.root / "some.jsonl"
    gateway.cli("log", "export", "--db", str(gateway.db), "-o", str(export), "--tenant", "acme")
    good = export.read_text().splitlines()
    broken = gateway.root / "broken.jsonl"
    broken.write_text("\n".join([good[0], "{not json", '{"ts": 1}', good[1], "[1, 2]"]) + "\n")
    done = gateway.cli(
        "report", "--records", str(broken), "-o", str(gateway.root / "b.html"), "--json"
    )
    assert json.loads(done.stdout)["totals"]["requests"] == 2
    assert f"{broken}:2: skipped: not JSON" in done.stderr
    assert f"{broken}:3: skipped: not a request record" in done.stderr
    assert f"{broken}:5: skipped: not a JSON object" in done.stderr


def test_an_empty_range_and_bad_input_get_clear_messages(gateway: Gateway) -> None:
    db = str(gateway.db)
    empty = gateway.cli("report", "--db", db, "--until", "1000", expect=1)
    assert "no records in the request log" in empty.stderr
    assert "nothing to report" in empty.stderr
    bad = gateway.cli("log", "query", "--db", db, "--since", "yesterday", expect=2)
    assert "--since" in bad.stderr
    refused = gateway.cli(
        "log", "query", "--url", gateway.url, "--admin-token", "wrong-token-0000", expect=2
    )
    assert "401" in refused.stderr
    missing = gateway.cli("log", "query", "--db", str(gateway.root / "nope.db"), expect=2)
    assert "no request log" in missing.stderr
    other = gateway.root / "other.sqlite3"  # another program's database, named by mistake
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    for named in (other, gateway.root / "gateway.yaml"):
        foreign = gateway.cli("log", "query", "--db", str(named), expect=2)
        assert "is not a request log" in foreign.stderr
    with closing(sqlite3.connect(other)) as conn:  # left as it was: no log tables made in it
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]
    with httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {ADMIN}"}) as http:
        for params in ({"limit": "100000"}, {"cursor": "!!"}, {"bucket": "0", "since": "1h"}):
            path = "/admin/log/summary" if "bucket" in params else "/admin/log"
            answer = http.get(path, params=params)
            assert answer.status_code == 400, params
            assert answer.json()["error"]["param"] in params


def test_forged_limits_cursors_and_bytes_are_400s_or_exit_2_never_a_crash(
    gateway: Gateway,
) -> None:
    forged = base64.urlsafe_b64encode(b"1.0:" + b"9" * 60).decode().rstrip("=")
    with httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {ADMIN}"}) as http:
        for path in ("/admin/log", "/dashboard/api/requests"):
            # '²' is a digit to `str.isdigit`; the cursor decodes to a seq past 64 bits: 500s
            for params in ({"limit": "²"}, {"cursor": forged}):
                answer = http.get(path, params=params)
                assert answer.status_code == 400, (path, params, answer.text)
                assert answer.json()["error"]["param"] in params
    db = str(gateway.db)
    for flags in (["--cursor", "garbage"], ["--cursor", forged], ["--tenant", "\udcff"]):
        # "\udcff" goes out as the byte 0xff: a command line that is not UTF-8
        done = gateway.cli("log", "query", "--db", db, *flags, expect=2)
        assert "Traceback" not in done.stderr
        assert flags[0] in done.stderr


def test_export_report_and_tail_read_a_gateway_whose_pages_are_smaller(gateway: Gateway) -> None:
    # They ask for 1,000 records a page; a gateway whose max_page_size was less answered each
    # ask with a 400 (exit 2 / 3), and `tail` failed at its first poll.
    port = free_port()
    config = {
        "server": {"port": port},
        "upstreams": [{"name": "none", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": "*", "upstream": "none"}],
        "admin": {"enabled": True, "token": ADMIN},
        "request_log": {  # the same log, read through a second gateway
            "enabled": True, "page_size": 2, "max_page_size": 2,
            "store": {"sqlite_path": str(gateway.db)},
        },
    }  # fmt: skip
    (gateway.root / "small-pages.yaml").write_text(yaml.safe_dump(config))
    serve = Server(
        [*LEVERGATE, "serve", "--config", str(gateway.root / "small-pages.yaml")],
        port=port,
        log=gateway.root / "small-pages.log",
        cwd=gateway.root,
        env=clean_env(LEVERGATE_ADMIN__TOKEN=ADMIN),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        export = gateway.cli("log", "export", "--url", url)
        assert len(export.stdout.splitlines()) == 6
        report = gateway.cli("report", "--url", url, "-o", str(gateway.root / "s.html"), "--json")
        assert json.loads(report.stdout)["totals"]["requests"] == 6
        tail = gateway.cli("log", "tail", "--url", url, "--once", "-n", "5", "--json")
        assert len(tail.stdout.splitlines()) == 5
    finally:
        serve.stop()

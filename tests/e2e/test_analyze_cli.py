"""`levergate analyze` end to end: `levergate serve` (exact cache off, the request log on, bodies
off but for gpt-4o) in front of `levergate sim`, the official OpenAI SDK sending repeated
questions, then `levergate analyze` as a child process over the gateway's own log with a
candidate that turns the cache on: the repeats it would have answered, what that saves, what it
could not evaluate and why; with bodies logged, reworded questions the semantic cache would
answer (the gateway's own layer and MiniLM); the bad inputs (a candidate that does not
validate, malformed export lines, an empty input)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from levergate.analyze.render import table
from levergate.requestlog.query import LogFilter
from levergate.requestlog.store import SqliteLog
from levergate.testing.ports import free_port
from tests.e2e.test_readme import Server, clean_env

pytestmark = pytest.mark.timeout(180)
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
QUESTIONS, COPIES = 6, 3
# To gpt-4o, bodies logged: each question, then the same reworded (case and punctuation only).
REWORDED = ["How do I bake bread at home?", "how do i bake bread at home",
            "Why is the sky blue?", "why is the sky blue"]  # fmt: skip


class Rig:
    def __init__(self, root: Path, db: Path) -> None:
        self.root, self.db = root, db

    def cli(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*LEVERGATE, "analyze", *args], capture_output=True, text=True,
                              timeout=60, cwd=self.root, env=clean_env(), check=False)  # fmt: skip
        assert done.returncode == expect, (args, done.returncode, done.stdout, done.stderr)
        return done

    def write(self, name: str, data: Any) -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(data) if name.endswith(".yaml") else data)
        return path


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    root = tmp_path_factory.mktemp("analyze")
    sim_port, port = free_port(), free_port()
    db = root / "requests.sqlite3"
    config = {
        "server": {"port": port},
        "upstreams": [{"name": "sim", "base_url": f"http://127.0.0.1:{sim_port}/v1"}],
        "models": [{"name": "*", "upstream": "sim"}],
        "cache": {"enabled": False},
        "request_log": {
            "enabled": True,
            "flush_seconds": 0.05,
            "store": {"sqlite_path": str(db)},
            "bodies": {"models": ["gpt-4o"]},
        },
    }
    (root / "baseline.yaml").write_text(yaml.safe_dump(config))
    sim = Server([*LEVERGATE, "sim", "--port", str(sim_port)], port=sim_port,
                 log=root / "sim.log", cwd=root, env=clean_env())  # fmt: skip
    serve = Server([*LEVERGATE, "serve", "--config", str(root / "baseline.yaml")], port=port,
                   log=root / "serve.log", cwd=root, env=clean_env())  # fmt: skip
    try:
        send(f"http://127.0.0.1:{port}/v1", db)
        yield Rig(root, db)
    finally:
        serve.stop()
        sim.stop()


def send(url: str, db: Path) -> None:
    """Each question three times, one after the other, at temperature 0; then wait for the log."""
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    for copy in range(COPIES):
        for n in range(QUESTIONS):
            client.chat.completions.create(
                model="gpt-4o-mini", max_tokens=16, temperature=0, stream=copy == 1 and n == 0,
                messages=[{"role": "user", "content": f"Question {n}: " + "words " * 300}],
            )  # fmt: skip
    for text in REWORDED:
        client.chat.completions.create(model="gpt-4o", max_tokens=16, temperature=0,
                                       messages=[{"role": "user", "content": text}])  # fmt: skip
    client.close()
    for _ in range(200):
        if db.is_file():
            store = SqliteLog(str(db), timeout_seconds=1)
            try:
                if store.summary(LogFilter())["requests"] == QUESTIONS * COPIES + len(REWORDED):
                    return
            finally:
                store.close()
        time.sleep(0.05)
    raise AssertionError("the log never held every request")


def test_the_candidate_cache_is_replayed_over_the_gateways_own_log(rig: Rig) -> None:
    candidate = rig.write("candidate.yaml", {"cache": {"enabled": True,
                                                       "default": {"semantic": True}}})  # fmt: skip
    page = rig.root / "analysis.html"
    done = rig.cli("--config", str(candidate), "--baseline", "baseline.yaml", "--json",
                   "--html", str(page), "--model", "gpt-4o-mini")  # fmt: skip
    result = json.loads(done.stdout)
    assert result["input"]["requests"] == QUESTIONS * COPIES
    assert result["input"]["with_fingerprints"] == QUESTIONS * COPIES
    assert result["latency_model"]["how"].startswith("fitted")
    exact = next(r for r in result["levers"] if r["lever"] == "exact")
    assert result["candidate"]["exact_hits"] == QUESTIONS * (COPIES - 1)
    assert exact["hit_rate"] == pytest.approx((COPIES - 1) / COPIES)
    assert exact["change_share"] == pytest.approx(-(COPIES - 1) / COPIES, abs=0.02)
    assert exact["total_p50_change_ms"] < 0
    # The baseline replayed is the log's own spend (the same catalog, no cache).
    assert result["baseline"]["cost_usd"] == pytest.approx(result["logged_cost_usd"], rel=0.02)
    (semantic,) = result["not_evaluable"]
    assert semantic["lever"] == "semantic"
    assert "prompt's text" in semantic["reason"]  # gpt-4o-mini's bodies were not logged
    assert result["recommendations"][0]["route"] == "gpt-4o-mini"
    assert "analysis-data" in page.read_text()
    text = table(result)  # what the command prints without --json
    assert "the exact cache" in text
    assert "not evaluable:" in text


def test_prompt_cache_key_needs_a_provider_model_of_more_than_one_machine(rig: Rig) -> None:
    config = yaml.safe_load((rig.root / "baseline.yaml").read_text())
    keyed = rig.write("keyed.yaml", {**config, "prompt_cache": {"openai_cache_key": "on"}})
    args = ("--config", str(keyed), "--baseline", "baseline.yaml", "--json")
    (row,) = json.loads(rig.cli(*args).stdout)["not_evaluable"]
    assert row["lever"] == "prompt_cache_key"
    assert "--provider-machines" in row["reason"]
    result = json.loads(rig.cli(*args, "--provider-machines", "8").stdout)
    assert result["provider_cache"]["machines"] == 8
    (row,) = result["levers"]
    assert row["lever"] == "prompt_cache_key"
    assert row["evaluable"]
    assert row["change_usd"] == 0  # every prompt is below the 1,024-token minimum
    done = rig.cli(*args, "--provider-machines", "0", expect=2)
    assert "--provider-machines" in done.stderr


def test_a_candidate_that_does_not_validate_names_its_field(rig: Rig) -> None:
    bad = rig.write("bad.yaml", {"cache": {"default": {"ttl_seconds": -1}}})
    done = rig.cli("--config", str(bad), "--records", "missing.jsonl", expect=2)
    assert "cache.default.ttl_seconds" in done.stderr
    assert "missing.jsonl" not in done.stderr  # refused before reading anything


def test_malformed_export_lines_are_skipped_and_an_empty_input_is_said(rig: Rig) -> None:
    exported = subprocess.run(
        [*LEVERGATE, "log", "export", "--db", str(rig.db), "--model", "gpt-4o-mini"],
        capture_output=True, text=True, check=True, env=clean_env(),
    )  # fmt: skip
    lines = exported.stdout.splitlines()
    path = rig.write("export.jsonl", "\n".join([lines[0], "{broken", *lines[1:], "[]"]) + "\n")
    candidate = rig.write("on.yaml", {"cache": {"enabled": True}})
    done = rig.cli("--config", str(candidate), "--baseline", "baseline.yaml", "--records",
                   str(path), "--json")  # fmt: skip
    assert f"{path}:2: skipped: not JSON" in done.stderr
    assert f"{path}:{len(lines) + 2}: skipped: not a JSON object" in done.stderr
    result = json.loads(done.stdout)
    assert result["input"]["malformed"] == 2
    assert result["candidate"]["exact_hits"] == QUESTIONS * (COPIES - 1)
    empty = rig.write("empty.jsonl", "")
    done = rig.cli("--config", str(candidate), "--records", str(empty), expect=1)
    assert "nothing to analyse" in done.stderr


def test_with_bodies_logged_the_semantic_cache_is_replayed(rig: Rig) -> None:
    candidate = rig.write("semantic.yaml", {"cache": {"enabled": True, "models": {
        "gpt-4o": {"semantic": True}}}})  # fmt: skip
    done = rig.cli("--config", str(candidate), "--baseline", "baseline.yaml", "--json",
                   "--model", "gpt-4o")  # fmt: skip
    result = json.loads(done.stdout)
    assert result["input"]["with_bodies"] == len(REWORDED)
    assert not result["not_evaluable"]
    semantic = next(r for r in result["levers"] if r["lever"] == "semantic")
    assert result["candidate"]["semantic_hits"] == 2  # each reworded question
    assert semantic["hit_rate"] == pytest.approx(0.5)
    assert semantic["change_share"] == pytest.approx(-0.5, abs=0.1)
    assert semantic["quality"]["hits"] == 2
    assert semantic["quality"]["false_hit_rate"] == pytest.approx(0.0074, abs=0.0001)
    assert "false-hit rate 0.74%" in semantic["caveat"]
    assert "semantic-cache hits" in table(result)

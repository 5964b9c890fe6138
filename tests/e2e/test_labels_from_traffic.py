"""Labels from traffic end to end: the official OpenAI SDK through a gateway on loopback with
the request log on and a route whose cheap answers are all shadowed; every comparison lands in
the log's labels table beside its request, and `levergate labels export` (the real command line,
a child process) writes them as `levergate router train` reads them, or refuses too few naming
the minimum.

The simulator's words are a function of the prompt and the model name: `small` always
disagrees with `large`, `twin` (another alias of sim-large) always agrees."""

from __future__ import annotations

import asyncio
import csv
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from levergate.app import build_gateway
from levergate.config import Settings
from levergate.routing.labels import Columns, read_labels
from levergate.server.run import serving
from tests.e2e.shadow_rig import HEADERS, ask, gateway_settings, simulators
from tests.e2e.test_readme import ADMIN_TOKEN, clean_env

pytestmark = pytest.mark.timeout(120)
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]


def cli(*args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*LEVERGATE, *args], capture_output=True, text=True, timeout=60,
                          env=clean_env(), check=False)  # fmt: skip
    assert done.returncode == expect, (args, done.stdout, done.stderr)
    return done


def labels_in(db: Path) -> list[tuple[str, ...]]:
    """The labels written so far (none while the writer has not made the table)."""
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("SELECT request_id, cheap, strong, result, prompt FROM "
                                "lg_labels ORDER BY seq").fetchall()  # fmt: skip
        except sqlite3.OperationalError:
            return []


async def test_shadow_comparisons_are_logged_and_exported_as_training_labels(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.sqlite3"
    async with simulators() as (good, hung):
        settings = gateway_settings(good, hung, routing={
            "shadow": {"rate": 1.0},
            "routes": [{"name": "auto", "default": "large", "rules": [
                {"name": "faq", "to": "small", "when": {"feature": ["faq"]}},
                {"name": "chat", "to": "twin", "when": {"feature": ["chat"]}}]}],
        }, request_log={"enabled": True, "store": {"sqlite_path": str(db)},
                        "flush_seconds": 0.05, "bodies": {"models": ["auto"]}})  # fmt: skip
        async with (
            build_gateway(Settings.load(**settings)) as gateway,
            serving(gateway) as url,
            openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0,
                               default_headers=HEADERS) as sdk,
        ):  # fmt: skip
            ids = []
            for i in range(6):
                feature = "faq" if i < 4 else "chat"
                answer = await sdk.chat.completions.with_raw_response.create(
                    model="auto", messages=ask(f"Question {i}?"),
                    extra_headers={"x-levergate-feature": feature})  # fmt: skip
                ids.append(answer.headers["x-request-id"])
            for _ in range(400):
                if db.exists() and len(labels_in(db)) == 6:
                    break
                await asyncio.sleep(0.025)
    found = {row[0]: row[1:] for row in labels_in(db)}
    assert set(found) == set(ids)  # each label carries its request's id
    assert sorted(found.values()) == sorted(
        [("small", "large", "disagree", f"Question {i}?") for i in range(4)]
        + [("twin", "large", "agree", f"Question {i}?") for i in (4, 5)]
    )
    out = tmp_path / "auto.csv"
    done = cli("labels", "export", "--route", "auto", "-o", str(out), "--db", str(db),
               "--min-rows", "4", "--json")  # fmt: skip
    report = json.loads(done.stdout)
    assert (report["cheap"], report["strong"], report["rows"], report["agree"]) == (
        "small", "large", 4, 0)  # fmt: skip
    per_pair = {(c["cheap"], c["labels"], c["agree"], c["with_prompt"]) for c in report["counts"]}
    assert per_pair == {("small", 4, 0, 4), ("twin", 2, 2, 2)}
    labels = read_labels(out, Columns(cheap="small_correct", strong="large_correct"))
    assert sorted(labels.prompts) == [f"Question {i}?" for i in range(4)]
    assert labels.cheap.tolist() == [0.0] * 4
    assert labels.strong.tolist() == [1.0] * 4
    with out.open() as handle:
        assert {row["route"] for row in csv.DictReader(handle)} == {"auto"}
    twin = cli("labels", "export", "--route", "auto", "--cheap-model", "twin", "-o",
               str(tmp_path / "twin.jsonl"), "--db", str(db), "--min-rows", "2")  # fmt: skip
    assert "2 labels of route auto (twin against large, 2 agreeing)" in twin.stdout
    refused = cli("labels", "export", "--route", "auto", "-o", str(tmp_path / "x.csv"),
                  "--db", str(db), expect=2)  # fmt: skip
    assert "has 4 labels with a prompt for small against large; at least 100 are needed" in (
        refused.stderr)  # fmt: skip


async def test_the_strong_models_answers_export_as_fine_tuning_lines(tmp_path: Path) -> None:
    db = tmp_path / "log.sqlite3"
    async with simulators() as (good, hung):
        settings = gateway_settings(good, hung, routing={
            "shadow": {"rate": 1.0},
            "routes": [{"name": "auto", "default": "large", "rules": [
                {"name": "chat", "to": "twin", "when": {"feature": ["chat"]}}]}],
        }, request_log={"enabled": True, "store": {"sqlite_path": str(db)},
                        "flush_seconds": 0.05, "bodies": {
                            "models": ["*"], "max_bytes": 512,
                            "private_tenants": ["secretive"]}})  # fmt: skip
        async with (
            build_gateway(Settings.load(**settings)) as gateway,
            serving(gateway) as url,
            openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0,
                               default_headers=HEADERS) as sdk,
        ):  # fmt: skip
            ask_large = sdk.chat.completions.create
            for i in range(3):
                await ask_large(model="large", messages=[
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": f"Fact {i}?"}])  # fmt: skip
            await ask_large(model="large", messages=ask("Mine alone?"),
                            extra_headers={"x-levergate-tenant": "secretive"})  # fmt: skip
            await ask_large(model="large", messages=ask("long " * 200))  # cut at 512 bytes
            for i in range(2):
                await ask_large(model="auto", messages=ask(f"Agreed {i}?"),
                                extra_headers={"x-levergate-feature": "chat"})  # fmt: skip
            for _ in range(400):
                if db.exists() and len(labels_in(db)) == 2:
                    break
                await asyncio.sleep(0.025)
            await asyncio.sleep(0.2)  # the last records' batch
    out = tmp_path / "distil.jsonl"
    export = ("log", "export", "--format", "openai-finetune", "--model", "large", "--db",
              str(db), "--base-model", "gpt-4o-mini")  # fmt: skip
    report = json.loads(cli(*export, "-o", str(out)).stdout)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(line["messages"][1]["content"] for line in lines) == [
        f"Fact {i}?" for i in range(3)]  # fmt: skip
    assert all(line["messages"][0] == {"role": "system", "content": "Be brief."}
               and line["messages"][2]["role"] == "assistant"
               and line["messages"][2]["content"] for line in lines)  # fmt: skip
    assert report["examples"] == 3
    # The private tenant's text was never logged: nothing of it can be exported.
    assert report["skipped"] == {"no_bodies": 1, "truncated": 1}
    assert report["tokens"] > 3 * 3 * 4  # three messages a line, each with its framing
    assert report["estimated_training_usd"] == pytest.approx(report["tokens"] * 3 * 3.0 / 1e6)
    agreed = json.loads(cli(*export, "-o", str(tmp_path / "agreed.jsonl"),
                            "--shadow-agreed").stdout)  # fmt: skip
    assert agreed["examples"] == 2
    shadowed = [json.loads(x) for x in (tmp_path / "agreed.jsonl").read_text().splitlines()]
    assert sorted(x["messages"][0]["content"] for x in shadowed) == ["Agreed 0?", "Agreed 1?"]


async def test_labels_are_exported_from_a_running_gateway_page_by_page(tmp_path: Path) -> None:
    """`labels export --url`: the same rows as from the store itself, read over
    `GET /admin/labels` with the admin token, two rows a page (the gateway's
    `max_page_size`; the command asks for more and takes the bound the 400 names)."""
    db = tmp_path / "log.sqlite3"
    async with simulators() as (good, hung):
        settings = gateway_settings(good, hung, routing={
            "shadow": {"rate": 1.0},
            "routes": [{"name": "auto", "default": "large", "rules": [
                {"name": "faq", "to": "small", "when": {"feature": ["faq"]}}]}],
        }, admin={"enabled": True, "token": ADMIN_TOKEN},
           request_log={"enabled": True, "store": {"sqlite_path": str(db)}, "page_size": 2,
                        "max_page_size": 2, "flush_seconds": 0.05,
                        "bodies": {"models": ["auto"]}})  # fmt: skip
        async with (
            build_gateway(Settings.load(**settings)) as gateway,
            serving(gateway) as url,
            openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0,
                               default_headers=HEADERS) as sdk,
        ):  # fmt: skip
            for i in range(5):
                await sdk.chat.completions.create(model="auto", messages=ask(f"Question {i}?"))
            for _ in range(400):
                if db.exists() and len(labels_in(db)) == 5:
                    break
                await asyncio.sleep(0.025)
            over_http, from_store = tmp_path / "http.csv", tmp_path / "store.csv"
            flags = ("labels", "export", "--route", "auto", "--min-rows", "5", "--json")
            done = await asyncio.to_thread(cli, *flags, "-o", str(over_http), "--url", url)
            await asyncio.to_thread(cli, *flags, "-o", str(from_store), "--db", str(db))
            refused = await asyncio.to_thread(cli, *flags[:-1], "-o", str(tmp_path / "x.csv"),
                                              "--url", url, "--admin-token", "wrong" * 4,
                                              expect=2)  # fmt: skip
    assert over_http.read_text() == from_store.read_text()
    assert json.loads(done.stdout)["rows"] == 5
    assert "401" in refused.stderr

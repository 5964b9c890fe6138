"""The semantic cache's threshold gate end to end: `levergate serve` (the local MiniLM embedder,
the semantic cache on for `faq` at 0.95, every lookup sampled and verified, the request log on,
the admin API on) in front of `levergate sim`, the official OpenAI SDK asking paraphrases, then
`levergate cache threshold --url` and `levergate cache rollback` as child processes; the running
gateway serves the installed threshold without a restart, and the rolled-back one after.

What the test expects is computed with the gateway's own parts, not hard-coded: each question's
similarity to the stored one with the same MiniLM embedder, and each answer with the simulator's
own word function (`simulator.tokens.words`: the answer is a function of the prompt), so the
test picks, for every pair, a conversation (its system prompt, which also keeps each pair in a
partition of its own) in which the two answers agree or differ as the plan needs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import yaml

from levergate.policies.shadow import agree
from levergate.simulator import tokens
from levergate.testing.ports import free_port
from tests.e2e.test_readme import ADMIN_TOKEN, Server, clean_env

pytestmark = pytest.mark.timeout(240)
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
BASE = "How do I reset my password?"
# (paraphrase, whether its answer agrees with the stored one's): in the band below 0.95 ...
NEAR = [("What are the steps to reset my password?", True),
        ("I forgot my password, how do I reset it?", True),
        ("Password reset: how do I do it?", False),
        ("How do I change my password?", False),
        ("How do I reset my password? I am user number 1.", False)]  # fmt: skip
HIT = ("How can I reset my password?", True)  # ... and above it: served, then asked again
LATER = "What are the steps to reset my password?"  # asked again in a new conversation


def similarities(texts: list[str]) -> list[float]:
    """Each text's cosine to `BASE`, by the embedder the gateway's cache uses."""
    from levergate.upstreams.embeddings_local import default_embedder

    async def run() -> list[float]:
        embedder = default_embedder()
        try:
            vectors = np.array(await embedder.embed([BASE, *texts]))
        finally:
            await embedder.aclose()
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return [float(v @ vectors[0]) for v in vectors[1:]]

    return asyncio.run(run())


def answer(system: str, question: str) -> str:
    text = f"system\n{system}\nuser\n{question}\n"
    return "".join(tokens.words(seed=0, text=text, salt="sim-small|None", count=1))


def conversation(question: str, *, agrees: bool, taken: set[str]) -> str:
    """A system prompt (new) in which `question`'s answer agrees with `BASE`'s, or not."""
    for n in range(5000):
        system = f"Conversation {n}."
        if system not in taken and agree(answer(system, BASE), answer(system, question)) == agrees:
            taken.add(system)
            return system
    raise AssertionError("no conversation gives the wanted answers")


class Rig:
    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url
        self.sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)

    def ask(self, system: str, question: str) -> Any:
        return self.sdk.chat.completions.with_raw_response.create(
            model="faq", max_tokens=1, temperature=0,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        )  # fmt: skip

    def cli(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*LEVERGATE, *args], capture_output=True, text=True, timeout=60,
                              cwd=self.root, env=clean_env(), check=False)  # fmt: skip
        assert done.returncode == expect, (args, done.returncode, done.stdout, done.stderr)
        return done

    def labels(self) -> list[dict[str, Any]]:
        params = {"layer": "semantic", "uncompared": "true"}
        headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        answer = httpx.get(f"{self.url}/admin/labels", params=params, headers=headers)
        assert answer.status_code == 200, answer.text
        found: list[dict[str, Any]] = answer.json()["data"]
        return found

    def reloads(self) -> float:
        text = httpx.get(f"{self.url}/metrics").text
        for line in text.splitlines():
            if line.startswith('levergate_cache_threshold_reloads_total{result="loaded"}'):
                return float(line.split()[-1])
        return 0.0

    def wait(self, condition: Any, what: str) -> None:
        for _ in range(400):
            if condition():
                return
            time.sleep(0.025)
        raise AssertionError(f"never: {what}")


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    root = tmp_path_factory.mktemp("threshold")
    sim_port, port = free_port(), free_port()
    config = {
        "server": {"port": port},
        "admin": {"enabled": True},
        "upstreams": [{"name": "sim", "base_url": f"http://127.0.0.1:{sim_port}/v1"}],
        "models": [{"name": "faq", "upstream": "sim", "upstream_model": "sim-small"}],
        "cache": {"models": {"faq": {"semantic": True}}, "semantic": {
            "threshold": 0.95, "guards": [], "thresholds_file": str(root / "thresholds.json"),
            "watch_seconds": 0.1, "calibration": {"rate": 1.0, "band": 0.15, "per_minute": 6000}}},
        "request_log": {"enabled": True, "flush_seconds": 0.05,
                        "store": {"sqlite_path": str(root / "log.sqlite3")}},
    }  # fmt: skip
    (root / "gateway.yaml").write_text(yaml.safe_dump(config))
    sim = Server([*LEVERGATE, "sim", "--port", str(sim_port)], port=sim_port,
                 log=root / "sim.log", cwd=root, env=clean_env())  # fmt: skip
    serve = Server([*LEVERGATE, "serve", "--config", str(root / "gateway.yaml")], port=port,
                   log=root / "serve.log", cwd=root, env=clean_env())  # fmt: skip
    try:
        yield Rig(root, f"http://127.0.0.1:{port}")
    finally:
        serve.stop()
        sim.stop()


def test_the_threshold_is_chosen_from_verified_lookups_and_installed_live(rig: Rig) -> None:
    plan = [*NEAR, HIT]
    sims = dict(zip([q for q, _ in plan], similarities([q for q, _ in plan]), strict=True))
    assert all(0.80 + 0.005 < sims[q] < 0.95 - 0.003 for q, _ in NEAR)  # in the band
    assert sims[HIT[0]] > 0.95 + 0.005
    taken: set[str] = set()
    first, then = [], {}
    for question, agrees in plan:
        system = conversation(question, agrees=agrees, taken=taken)
        stored = rig.ask(system, BASE)
        assert stored.headers["x-levergate-cache"] == "miss"
        first.append(stored.headers["x-request-id"])
        served = rig.ask(system, question)
        hit = question == HIT[0]
        assert served.headers["x-levergate-cache"] == ("semantic" if hit else "miss")
        then[served.headers["x-request-id"]] = question
    rig.wait(lambda: len(rig.labels()) == 2 * len(plan), "every sampled lookup labelled")
    found = {row["request_id"]: row for row in rig.labels()}
    assert {found[i]["result"] for i in first} == {"none"}  # nothing stored before them
    answers = dict(plan)
    for request_id, question in then.items():
        row = found[request_id]
        assert row["result"] == ("agree" if answers[question] else "disagree"), row
        assert row["similarity"] == pytest.approx(sims[question], abs=1e-3)

    base = ("cache", "threshold", "--route", "faq", "--url", rig.url,
            "--admin-token", ADMIN_TOKEN, "--config", str(rig.root / "gateway.yaml"))  # fmt: skip
    few = rig.cli(*base, "--target-false-hit", "0.05", expect=2)
    assert "has 6 verified semantic cache lookups in the log; at least 100 are needed" in (
        few.stderr)  # fmt: skip
    low = sims["Password reset: how do I do it?"] - 0.001
    named = rig.cli(*base, "--target-false-hit", "0.05", "--min-verifications", "2",
                    "--threshold", f"{low:.4f}", "--by", "estimate", expect=1)  # fmt: skip
    assert f"refused: threshold {low:.4f} has a measured false-hit rate of 25.00%" in named.stdout
    assert not (rig.root / "thresholds.json").exists()

    # Three verifications are too few for the default (the 95% upper bound of 0 in 3 is 56%).
    assert (
        "refused: no threshold"
        in rig.cli(*base, "--target-false-hit", "0.05", "--min-verifications", "2", expect=1).stdout
    )
    done = rig.cli(*base, "--target-false-hit", "0.05", "--min-verifications", "2", "--by",
                   "estimate", "--json")  # fmt: skip
    report = json.loads(done.stdout)
    lowest_agreeing = min(sims[q] for q, agrees in NEAR if agrees)
    assert report["installed"] is True
    assert report["chosen"]["threshold"] == pytest.approx(lowest_agreeing, abs=1e-3)
    assert (report["chosen"]["verified"], report["chosen"]["false_hits"]) == (3, 0)
    assert report["current"]["threshold"] == 0.95
    rig.wait(lambda: rig.reloads() >= 1, "the gateway loaded the installed threshold")
    # A paraphrase at 0.946, below the configured 0.95 and above the installed threshold: a hit.
    system = conversation(LATER, agrees=True, taken=taken)
    rig.ask(system, BASE)
    assert rig.ask(system, LATER).headers["x-levergate-cache"] == "semantic"

    back = rig.cli("cache", "rollback", "--route", "faq", "--config",
                   str(rig.root / "gateway.yaml"))  # fmt: skip
    assert "rolled back: faq -> 0.9500" in back.stdout
    rig.wait(lambda: rig.reloads() >= 2, "the gateway loaded the rolled-back threshold")
    system = conversation(LATER, agrees=True, taken=taken)
    rig.ask(system, BASE)
    assert rig.ask(system, LATER).headers["x-levergate-cache"] == "miss"


def test_the_labels_route_refuses_bad_parameters_naming_them(rig: Rig) -> None:
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    for params, name in (({"layer": "nope"}, "layer"), ({"limit": "0"}, "limit"),
                         ({"cursor": "garbage!"}, "cursor"), ({"since": "soon"}, "since"),
                         ({"uncompared": "maybe"}, "uncompared"), ({"colour": "red"}, "colour"),
                         ({"name": "x" * 300}, "name")):  # fmt: skip
        answer = httpx.get(f"{rig.url}/admin/labels", params=params, headers=headers)
        assert answer.status_code == 400, (params, answer.text)
        assert answer.json()["error"]["param"] == name
    assert httpx.get(f"{rig.url}/admin/labels").status_code == 401

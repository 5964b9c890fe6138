"""The learning loop from the command line (the first training a child process, the rest
in-process through the same `main`, to keep the embedder's start-up to one): shadow labels in a
request log, `levergate router train --from-log` (older labels train, newer ones evaluate),
`levergate router promote` (the gate, on labels the candidate never trained on), `levergate
router rollback`, and the refusals: too few labels, a candidate below the route's target, one
trained for other models. With `--json` each prints one JSON document on stdout, and nothing else
(the child process's stdout is read whole, so a stray line from the embedder would fail it).

The labels are written to the log's store as the gateway's writer writes them (label_row); that
the gateway writes them is tests/e2e/test_labels_from_traffic.py. Hard prompts (proofs, integrals)
are where the cheap answer disagrees with the strong one, as on real traffic."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from levergate.cli.main import main
from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.layers.measure.shadow_labels import ShadowLabel
from levergate.layers.route_paths import challenger_path
from levergate.requestlog.labels import label_row
from levergate.requestlog.store import SqliteLog
from levergate.routing.model import load
from levergate.routing.promote import previous_of
from levergate.server.run import serving
from levergate.simulator import SimSettings, run_simulator
from tests.e2e.test_readme import clean_env

pytestmark = pytest.mark.timeout(180)
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
EASY = ("What is the capital of {}?", "Say hello to {} politely.", "Translate 'cat' for {}.")
HARD = ("Prove that the integral of x^{} over [0, 1] converges.",
        "Derive the closed form of the series sum k^{} and prove it by induction.")  # fmt: skip
PLACES = ("France", "Peru", "Japan", "Kenya", "Norway", "Chile", "Egypt", "India")


def child(*args: str) -> tuple[str, str]:
    done = subprocess.run([*LEVERGATE, *args], capture_output=True, text=True, timeout=120,
                          env=clean_env(), check=False)  # fmt: skip
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout, done.stderr


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[str, str]]:
    """`levergate ARGS` in this process: (stdout, stderr), the exit code checked."""

    def run(*args: str, expect: int = 0) -> tuple[str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        assert code == expect, (args, out, err)
        return out, err

    return run


def forged(router: Path, out: Path, *, threshold: float) -> Path:
    """`router` whose calibration claims every target is met at `threshold`: the gate measures
    on the logged labels, it does not take the file's word."""
    found, _ = load(router)
    c = found.calibration
    lying = c.model_copy(update={"thresholds": [threshold], "retention": [1.0],
                                 "strong_share": [0.0]})  # fmt: skip
    found.model_copy(update={"calibration": lying, "threshold": threshold}).save(out)
    return out


def labels(n: int) -> list[tuple[object, ...]]:
    rng = random.Random(5)
    rows = []
    for i in range(n):
        hard = rng.random() < 0.3
        prompt = (rng.choice(HARD).format(i % 9 + 2) if hard
                  else rng.choice(EASY).format(rng.choice(PLACES)))  # fmt: skip
        agree = rng.random() < (0.1 if hard else 0.97)
        label = ShadowLabel(f"r{i}", "route", "auto", "mini", "big",
                            "agree" if agree else "disagree", "normalized", None, prompt,
                            "cheap", "strong", "acme", "faq")  # fmt: skip
        rows.append(label_row(1_000_000.0 + 60 * i, label, (prompt, "cheap", "strong")))
    return rows


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the gateway's configuration, the route's router file), the log holding 240 labels."""
    root = tmp_path_factory.mktemp("learn")
    db = root / "log.sqlite3"
    store = SqliteLog(str(db), timeout_seconds=5)
    store.write_labels(labels(240))
    store.close()
    router = root / "router.json"
    config = root / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "upstreams": [{"name": "up", "base_url": "http://127.0.0.1:9"}],
        "models": [{"name": "mini", "upstream": "up"}, {"name": "big", "upstream": "up"}],
        "routing": {"routes": [{"name": "auto", "default": "big", "learned": {
            "file": str(router), "cheap": "mini", "strong": "big", "target_quality": 0.9}}]},
        "request_log": {"enabled": True, "store": {"sqlite_path": str(db)}},
    }))  # fmt: skip
    return config, router


Cli = Callable[..., tuple[str, str]]


@pytest.fixture(scope="module")
def trained(loop: tuple[Path, Path]) -> tuple[Path, dict[str, Any]]:
    """(a candidate trained on the log's older labels by the real command, what it printed
    with `--json`)."""
    config, router = loop
    candidate = router.with_name("candidate.json")
    out, err = child("router", "train", "--from-log", "--route", "auto", "--config", str(config),
                     "-o", str(candidate), "--target-quality", "0.9", "--json")  # fmt: skip
    assert "held out:" not in out + err  # the human lines are not printed at all
    return candidate, json.loads(out)


def test_train_from_the_log_promote_through_the_gate_and_roll_back(
    loop: tuple[Path, Path], trained: tuple[Path, dict[str, Any]], cli: Cli
) -> None:
    config, router = loop
    candidate, report = trained
    made, _ = load(candidate)
    log = made.training["log"]
    assert report["held_out"] == log
    assert report["router"] == {"file": str(candidate), "cheap": "mini", "strong": "big"}
    assert (report["rows"], report["target_quality"], report["threshold"]) == (
        168, 0.9, made.threshold)  # fmt: skip
    assert report["retention_at_threshold"] >= 0.9
    assert {"cheap_accuracy", "strong_accuracy", "saving_at_threshold"} < report.keys()
    assert (log["train_rows"], log["test_rows"], made.models.cheap) == (168, 72, "mini")
    assert log["split_ts"] == 1_000_000.0 + 60 * 168  # the newest 30% held back, by time
    assert log["test_saving"] > 0.3  # the easy prompts go to the cheap model
    promote = ("router", "promote", "--route", "auto", "--config", str(config))
    # No router yet: the route sends everything to its default, which saves nothing.
    first = json.loads(cli(*promote, str(candidate), "--json")[0])
    assert first["promoted"]
    assert first["rows"] == 72
    assert first["candidate"]["retention"] >= 0.9
    assert first["current"]["saving"] == 0.0
    assert router.read_bytes() == candidate.read_bytes()
    assert not previous_of(router).exists()
    # Everything to the cheap model: below the route's target on the held-out labels.
    greedy = forged(candidate, router.with_name("greedy.json"), threshold=1e9)
    out, _ = cli(*promote, str(greedy), expect=1)
    assert "below the route's target 90.0%" in out
    assert "kept (candidate)" in out
    assert "kept (current)" in out
    # Everything to the strong model: keeps quality, saves less than the router serving now.
    timid = forged(candidate, router.with_name("timid.json"), threshold=-1e9)
    out, _ = cli(*promote, str(timid), expect=1)
    assert "saves 0.0% of strong calls, less than the current router's" in out
    assert router.read_bytes() == candidate.read_bytes()
    # The same candidate again passes (it saves what the current one saves): the old is kept.
    cli(*promote, str(candidate))
    assert previous_of(router).read_bytes() == candidate.read_bytes()
    previous_of(router).write_bytes(timid.read_bytes())  # as if the timid one had served before
    out, err = cli("router", "rollback", "--route", "auto", "--config", str(config), "--json")
    assert router.read_bytes() == timid.read_bytes()
    assert previous_of(router).read_bytes() == candidate.read_bytes()
    assert json.loads(out) == {
        "route": "auto", "route_file": str(router), "previous_file": str(previous_of(router)),
        "sha256": hashlib.sha256(timid.read_bytes()).hexdigest(),
        "previous_sha256": hashlib.sha256(candidate.read_bytes()).hexdigest()}  # fmt: skip
    assert err == ""
    out, _ = cli("router", "rollback", "--route", "auto", "--config", str(config))
    assert out.startswith(f"rolled back: {router} is the router it replaced")
    assert router.read_bytes() == candidate.read_bytes()


def test_bad_candidates_and_too_few_labels_are_refused_by_name(
    loop: tuple[Path, Path], tmp_path: Path, cli: Cli
) -> None:
    config, _ = loop
    train = ("router", "train", "--from-log", "--route", "auto", "--config", str(config))
    _, few = cli(*train, "-o", str(tmp_path / "x.json"), "--min-rows", "500", expect=2)
    assert "has 240 labels with a prompt for mini against big; at least 500 are needed" in few
    out = str(tmp_path / "x.json")
    assert "--min-rows must be at least 1" in cli(*train, "-o", out, "--min-rows", "0",
                                                  expect=2)[1]  # fmt: skip
    assert "between 0 and 1" in cli(*train, "-o", out, "--test-share", "1.5", expect=2)[1]
    assert "needs --route" in cli("router", "train", "--from-log", "--config", str(config),
                                  "-o", out, expect=2)[1]  # fmt: skip
    other = tmp_path / "other.json"
    cli(*train, "-o", str(other), "--cheap-model", "mini", "--strong-model", "gpt-4o")
    promote = ("router", "promote", "--route", "auto", "--config", str(config))
    _, wrong = cli(*promote, str(other), expect=2)
    assert "was trained for strong model 'gpt-4o', but learned.strong is 'big'" in wrong
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    assert "not a levergate router" in cli(*promote, str(broken), expect=2)[1]


async def test_a_running_gateway_serves_the_router_a_rollback_puts_back(
    loop: tuple[Path, Path], tmp_path: Path, cli: Cli
) -> None:
    source, _ = loop
    trained = tmp_path / "trained.json"
    out, _ = cli("router", "train", "--from-log", "--route", "auto", "--config", str(source),
                 "-o", str(trained), "--target-quality", "0.9")  # fmt: skip
    assert "held out: the newest 72 labels" in out
    assert "trained on 168 rows: mini" in out
    router = tmp_path / "router.json"
    router.write_bytes(trained.read_bytes())
    forged(trained, previous_of(router), threshold=1e9)  # everything to the cheap model
    async with run_simulator(SimSettings.model_validate({"port": 0})) as sim:
        settings = {
            "upstreams": [{"name": "sim", "base_url": sim.base_url}],
            "models": [{"name": "mini", "upstream": "sim"}, {"name": "big", "upstream": "sim"}],
            "routing": {"watch_seconds": 0.05, "routes": [{"name": "auto", "default": "big",
                        "learned": {"file": str(router), "cheap": "mini", "strong": "big"}}]},
        }  # fmt: skip
        config = tmp_path / "gateway.yaml"
        config.write_text(yaml.safe_dump(settings))
        async with (
            Gateway(Settings.load(config)) as gateway,
            serving(gateway) as url,
            openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as sdk,
        ):

            async def answered_by() -> str:
                raw = await sdk.chat.completions.with_raw_response.create(
                    model="auto", messages=[{"role": "user", "content": HARD[0].format(3)}]
                )
                return raw.headers["x-levergate-model"]

            assert await answered_by() == "big"
            await asyncio.to_thread(main, ["router", "rollback", "--route", "auto", "--config",
                                           str(config)])  # fmt: skip
            for _ in range(200):
                if await answered_by() == "mini":
                    break
                await asyncio.sleep(0.025)
            assert await answered_by() == "mini"  # no restart, no reload: the file was watched


Own = tuple[Path, Path, Path, Path]


@pytest.fixture
def own(loop: tuple[Path, Path], trained: tuple[Path, dict[str, Any]], tmp_path: Path) -> Own:
    """(a copy of the candidate, a configuration whose route file and log are this test's own,
    that route file (not there yet), that log)."""
    config, _ = loop
    candidate = tmp_path / "candidate.json"
    candidate.write_bytes(trained[0].read_bytes())
    settings = yaml.safe_load(config.read_text())
    db = Path(settings["request_log"]["store"]["sqlite_path"])
    fresh = tmp_path / "log.sqlite3"
    fresh.write_bytes(db.read_bytes())
    router = tmp_path / "router.json"
    learned = settings["routing"]["routes"][0]["learned"]
    learned["file"] = str(router)
    settings["request_log"]["store"]["sqlite_path"] = str(fresh)
    ours = tmp_path / "gateway.yaml"
    ours.write_text(yaml.safe_dump(settings))
    return candidate, ours, router, fresh


def test_a_challenger_losing_quality_live_is_refused_though_it_passes_offline(
    own: Own, cli: Cli
) -> None:
    """`router challenge` puts the candidate beside the route's file; its live labels (layer
    `challenger`, carrying its digest) hold it to the target as the offline rows do."""
    candidate, ours, router, fresh = own
    out, _ = cli("router", "challenge", str(candidate), "--route", "auto", "--config", str(ours),
                 "--share", "0.25")  # fmt: skip
    assert "challenges the route's router on 25.0% of its learned decisions" in out
    beside = challenger_path(str(router))
    challenge = json.loads(beside.read_text())["training"]["challenge"]
    digest = hashlib.sha256(candidate.read_bytes()).hexdigest()
    assert (challenge["share"], challenge["sha256"]) == (0.25, digest)
    promote = ("router", "promote", str(candidate), "--route", "auto", "--config", str(ours))
    quiet = json.loads(cli(*promote, "--json")[0])  # no live labels yet: the offline gate
    assert quiet["promoted"]
    assert quiet["live"]["rows"] == 0
    assert not beside.exists()  # promoted: the challenger is the champion now
    router.unlink()
    store = SqliteLog(str(fresh), timeout_seconds=5)
    rows = []
    for i in range(40):  # the challenger sends all cheap; half of those disagree
        detail = {"candidate": digest, "challenger": "cheap",
                  "champion": "cheap" if i % 4 == 0 else "strong"}  # fmt: skip
        label = ShadowLabel(f"c{i}", "challenger", "auto", "mini", "big",
                            "disagree" if i % 2 else "agree", "normalized", None, f"q {i}", "",
                            None, "acme", "faq", None, json.dumps(detail))  # fmt: skip
        rows.append(label_row(2_000_000.0 + i, label, None))
    store.write_labels(rows)
    store.close()
    out, _ = cli(*promote, expect=1)
    assert "offline, candidate at its threshold" in out
    assert "live, 40 challenged requests (used by the gate):" in out
    assert "challenger 50.0% kept, 100.0% saved" in out
    assert "champion   100.0% kept, 25.0% saved" in out
    assert (
        "refused: live, the candidate keeps 50.0% of strong quality on 40 challenged "
        "requests, below the route's target 90.0%"
    ) in out
    assert not router.exists()
    cli("router", "challenge", str(candidate), "--route", "auto", "--config", str(ours))
    assert beside.exists()
    out, _ = cli("router", "challenge", "--stop", "--route", "auto", "--config", str(ours))
    assert "no challenger" in out
    assert not beside.exists()


def test_a_challenge_and_its_stop_print_one_json_document(own: Own, cli: Cli) -> None:
    candidate, ours, router, _ = own
    out, err = cli("router", "challenge", str(candidate), "--route", "auto", "--config",
                   str(ours), "--json")  # fmt: skip
    beside = challenger_path(str(router))
    challenge = json.loads(beside.read_text())["training"]["challenge"]
    assert json.loads(out) == {"route": "auto", "challenging": True,
                               "challenger_file": str(beside), "candidate": str(candidate),
                               "share": 0.05, "sha256": challenge["sha256"],
                               "started": challenge["started"]}  # fmt: skip
    assert err == ""
    stop = ("router", "challenge", "--stop", "--route", "auto", "--config", str(ours), "--json")
    out, err = cli(*stop)
    assert not beside.exists()
    assert json.loads(out) == {"route": "auto", "challenging": False,
                               "challenger_file": str(beside), "removed": True}  # fmt: skip
    assert err == ""
    assert json.loads(cli(*stop)[0])["removed"] is False  # stopping twice is no error

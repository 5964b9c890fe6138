"""Reading what is replayed: malformed lines named by number and skipped, cache hits priced as
the miss that filled them, OpenAI request files and log records into the same `Req`; and the
analysis saying what it could not evaluate, and why."""

from __future__ import annotations

from pathlib import Path

import orjson

from levergate.analyze.analysis import analyse
from levergate.analyze.inputs import Skipped, from_bodies, from_records, read_lines
from levergate.requestlog.features import features_of_body
from tests.unit.analyze.reqs import plan


def record(n: int, text: str, **changes: object) -> dict[str, object]:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}],
            "temperature": 0}  # fmt: skip
    found: dict[str, object] = {
        "ts": 1000.0 + n, "total_ms": 500.0, "ttft_ms": None, "overhead_ms": 1.0,
        "model": "gpt-4o-mini", "alias": "gpt-4o-mini", "tenant": "t", "feature": "",
        "upstream": "sim", "outcome": "ok", "input_tokens": 1200, "cached_tokens": 0,
        "cache_write_tokens": 0, "output_tokens": 50, "cost_usd": 0.001, "cache": None,
        "replay": features_of_body(body, kind="chat", model="gpt-4o-mini"),
    }  # fmt: skip
    found.update(changes)
    return found


def test_malformed_lines_are_reported_by_number_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    good = orjson.dumps(record(0, "a")).decode()
    path.write_text(f'{good}\nnot json\n[1, 2]\n\n{good}\n{{"ts": "x"}}\n')
    skipped = Skipped()
    lines = ((f"{path}:{n}", v) for n, v in read_lines(path, skipped))
    got = from_records(lines, source="test", skipped=skipped)
    assert len(got.requests) == 2
    assert skipped.malformed == 3
    assert [line.split(": skipped")[0] for line in skipped.lines] == [
        f"{path}:2", f"{path}:3", f"{path}:6"]  # fmt: skip


def test_a_logged_hit_is_priced_as_the_miss_that_filled_it() -> None:
    records = [record(0, "a"), record(1, "a", cache="exact:hit", alias="", input_tokens=0,
                                      output_tokens=0, total_ms=2.0, cost_usd=0.0)]  # fmt: skip
    got = from_records((("r", r) for r in records), source="t", skipped=Skipped())
    hit = got.requests[1]
    assert hit.hit
    assert (hit.prompt, hit.output, hit.alias) == (1200, 50, "gpt-4o-mini")
    assert got.hit_seconds == 0.002
    assert got.requests[0].fp == hit.fp is not None


def test_failed_requests_and_old_rows_are_counted_apart() -> None:
    records = [record(0, "a", outcome="upstream_error"), record(1, "b", replay=None)]
    skipped = Skipped()
    got = from_records((("r", r) for r in records), source="t", skipped=skipped)
    assert (skipped.errors, skipped.without_features, len(got.requests)) == (1, 1, 1)


def test_an_openai_batch_file_is_read_line_by_line(tmp_path: Path) -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 7}  # fmt: skip
    path = tmp_path / "batch.jsonl"
    lines = [{"custom_id": "1", "method": "POST", "url": "/v1/chat/completions", "body": body},
             body, {"body": {"model": "m"}}]  # fmt: skip
    path.write_text("\n".join(orjson.dumps(line).decode() for line in lines))
    skipped = Skipped()
    got = from_bodies(path, interval=2.0, skipped=skipped)
    assert [r.arrival for r in got.requests] == [2.0, 4.0]
    assert got.requests[0].fp == got.requests[1].fp
    assert got.requests[0].output == 7
    assert skipped.lines == [f"{path}:3: skipped: not an OpenAI request (no messages or prompt)"]


def test_what_needs_bodies_or_a_provider_model_is_not_evaluable() -> None:
    given = from_records((("r", record(n, "a")) for n in range(3)), source="t",
                         skipped=Skipped())  # fmt: skip
    models = {"upstreams": [{"name": "sim", "base_url": "http://127.0.0.1:9/v1"}],
              "models": [{"name": "gpt-4o-mini", "upstream": "sim"}]}  # fmt: skip
    candidate = plan(cache={"default": {"semantic": True}},
                     prompt_cache={"openai_cache_key": "on"}, **models)  # fmt: skip
    result = analyse(given, baseline=plan(cache={"enabled": False}, **models),
                     candidate=candidate)  # fmt: skip
    reasons = {r["lever"]: r.get("reason") for r in result["levers"]}
    assert "prompt's text" in reasons["semantic"]
    assert "--provider-machines" in reasons["prompt_cache_key"]  # one machine: no routing
    assert reasons["exact"] is None
    exact = next(r for r in result["levers"] if r["lever"] == "exact")
    assert exact["change_usd"] < 0
    assert exact["hit_rate"] == 2 / 3
    assert result["recommendations"][0]["lever"] == "exact"


def test_a_trace_without_fingerprints_cannot_evaluate_the_exact_cache() -> None:
    given = from_records((("r", record(n, "a", replay=None)) for n in range(3)), source="t",
                         skipped=Skipped())  # fmt: skip
    result = analyse(given, baseline=plan(cache={"enabled": False}), candidate=plan())
    (row,) = result["not_evaluable"]
    assert row["lever"] == "exact"
    assert "fingerprints" in row["reason"]


def test_fingerprints_of_an_older_features_version_match_only_each_other() -> None:
    old = {**record(0, "a")["replay"], "v": 1}  # type: ignore[dict-item]
    records = [record(0, "a", replay=old), record(1, "a", replay=old),
               record(2, "a", cache="exact:hit", alias="")]  # fmt: skip
    got = from_records((("r", r) for r in records), source="t", skipped=Skipped())
    assert got.requests[0].fp == got.requests[1].fp != got.requests[2].fp
    assert got.requests[2].fp == record(3, "a")["replay"]["fp"]  # type: ignore[index]

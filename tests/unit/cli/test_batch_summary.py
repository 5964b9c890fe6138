"""The batch CLI's pure parts: the summary's counts, usage, cost and savings (batch_summary),
and the local input check and run tag (batch_run.plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.catalog import Catalog
from levergate.cli.batch_run import InputError, plan
from levergate.cli.batch_summary import Tally, document, money, render
from levergate.config import PriceSettings
from levergate.policies.pricing import Lever

BIG = PriceSettings(input=2.0, output=8.0, cache_read=0.5)
MODELS = Catalog.of_prices({"big": BIG, "*": PriceSettings(input=1.0, output=1.0)})


def result(custom_id: str, *, status: int = 200, prompt: int = 0, completion: int = 0,
           cached: int | None = None) -> bytes:  # fmt: skip
    usage: dict[str, object] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    body = {"model": "upstream-name", "usage": usage}
    error = None if status == 200 else {"code": "x", "message": "y"}
    return orjson.dumps({"custom_id": custom_id, "error": error,
                         "response": {"status_code": status, "body": body}})  # fmt: skip


def test_counts_usage_and_cost_at_the_alias_the_line_asked_for() -> None:
    tally = Tally()
    tally.add_result(result("a", prompt=1_000_000, completion=1_000_000, cached=500_000),
                     model="big")  # fmt: skip
    tally.add_result(result("b", prompt=1_000_000, completion=0), model="other")
    tally.add_result(result("c", status=429), model="big")
    worth = money(tally, MODELS)
    assert (tally.ok, tally.failed) == (2, 1)
    # big: 0.5M fresh x 2 + 0.5M cached x 0.5 + 1M out x 8 = 1 + 0.25 + 8; other at "*": 1.
    assert worth.cost == pytest.approx(10.25)
    assert worth.savings == {"prompt_cache": pytest.approx(0.75)}  # 0.5M x (2 - 0.5)


def test_an_error_line_without_a_response_is_failed_and_unpriced() -> None:
    tally = Tally()
    line = orjson.dumps({"custom_id": "a", "response": None,
                         "error": {"code": "batch_cancelled", "message": "m"}})  # fmt: skip
    tally.add_result(line, model="big")
    assert (tally.ok, tally.failed, dict(tally.by_model)) == (0, 1, {})


def test_what_the_gateway_caches_answered_comes_off_the_cost() -> None:
    tally = Tally()
    for custom_id in ("a", "b"):  # b was a cache hit: the same usage, nothing paid
        tally.add_result(result(custom_id, prompt=1_000_000, completion=0), model="big")
    tally.add_record({Lever.EXACT: 2.0})
    worth = money(tally, MODELS)
    assert worth.usage_cost == pytest.approx(4.0)
    assert worth.cost == pytest.approx(2.0)
    assert worth.savings == {"exact": 2.0}
    text = "\n".join(render(document(tally, worth, status="completed", output="o", errors=None,
                                     in_process=True)))  # fmt: skip
    assert (
        "cost: $2.000000 (usage priced by the ledger at the config's catalog, less $2.000000"
        in text
    )
    assert "saved by exact: $2.000000" in text


def test_without_prices_the_summary_says_so_and_keeps_the_gateway_levers() -> None:
    tally = Tally()
    tally.add_result(result("a", prompt=10, completion=5), model="big")
    tally.add_record({Lever.EXACT: 0.5})
    tally.add_record({Lever.EXACT: 0.25, Lever.SEMANTIC: 1.0})
    worth = money(tally, None)
    assert not worth.priced
    assert worth.savings == {"exact": 0.75, "semantic": 1.0}
    text = "\n".join(render(document(tally, worth, status="completed", output="o", errors=None,
                                     in_process=False)))  # fmt: skip
    assert "cost: not priced" in text
    assert "saved by exact: $0.750000" in text
    assert "tokens: 10 prompt (0 cached), 5 completion" in text
    assert "errors: none" in text


def test_a_model_no_alias_prices_is_named() -> None:
    tally = Tally()
    tally.add_result(result("a", prompt=10), model="nope")
    worth = money(tally, Catalog.of_prices({"big": BIG}))
    assert worth.unpriced == ("nope",)
    assert "not priced (no alias matches): nope" in "\n".join(
        render(document(tally, worth, status="completed", output="o", errors="e", in_process=True))
    )


def test_the_json_document_says_what_the_text_says() -> None:
    tally = Tally()
    tally.add_result(result("a", prompt=1_000_000, completion=0, cached=500_000), model="big")
    tally.add_result(result("b", prompt=10), model="nope")
    tally.add_result(result("c", status=429), model="big")
    tally.add_record({Lever.EXACT: 0.5})
    worth = money(tally, Catalog.of_prices({"big": BIG}))
    facts: dict[str, Any] = {"status": "completed", "output": "o", "errors": "e"}
    facts["in_process"] = True
    shown = document(tally, worth, **facts)
    assert shown == {
        "status": "completed", "completed": 2, "failed": 1,
        "tokens": {"prompt": 1_000_010, "cached": 500_000, "completion": 0},
        "cost_usd": pytest.approx(worth.cost), "usage_cost_usd": pytest.approx(1.25),
        "priced_by": "config_catalog", "unpriced_models": ["nope"],
        "savings_usd": {"exact": 0.5, "prompt_cache": pytest.approx(0.75)},
        "lever_requests": 1, "output": "o", "errors": "e",
    }  # fmt: skip
    text = "\n".join(render(shown))
    assert "batch completed: 2 completed, 1 failed" in text
    assert f"cost: ${shown['cost_usd']:.6f}" in text
    over_url = document(tally, money(tally, None), **{**facts, "in_process": False})
    assert (over_url["cost_usd"], over_url["priced_by"], over_url["lever_requests"]) == (
        None, None, None,
    )  # fmt: skip


@given(
    st.lists(
        st.tuples(st.integers(0, 10**7), st.integers(0, 10**7), st.integers(0, 10**7)),
        max_size=20,
    )
)
def test_cached_tokens_never_cost_more_and_savings_make_up_the_difference(
    usages: list[tuple[int, int, int]],
) -> None:
    tally = Tally()
    uncached = Tally()
    for i, (prompt, completion, wanted) in enumerate(usages):
        cached = min(wanted, prompt)
        tally.add_result(result(str(i), prompt=prompt, completion=completion, cached=cached),
                         model="big")  # fmt: skip
        uncached.add_result(result(str(i), prompt=prompt, completion=completion), model="big")
    worth, full = money(tally, MODELS), money(uncached, MODELS)
    assert worth.cost <= full.cost + 1e-9
    saved = worth.savings.get("prompt_cache", 0.0)
    assert worth.cost + saved == pytest.approx(full.cost, rel=1e-9, abs=1e-9)


def test_plan_names_the_run_by_input_bytes_and_output_path(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('\n{"custom_id": "a", "url": "/v1/embeddings", "body": {}}\n')
    first = plan(source, tmp_path / "out.jsonl")
    assert first.endpoint == "/v1/embeddings"
    assert first.errors == tmp_path / "out.jsonl.errors.jsonl"
    assert plan(source, tmp_path / "out.jsonl").tag == first.tag
    assert plan(source, tmp_path / "other.jsonl").tag != first.tag
    source.write_text('{"custom_id": "b", "url": "/v1/embeddings", "body": {}}\n')
    assert plan(source, tmp_path / "out.jsonl").tag != first.tag


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "is empty"),
        ("a,b\n", "is not JSONL"),
        ("[1, 2]\n", 'has no "url"'),
        ('{"custom_id": "a"}\n', 'has no "url"'),
    ],
)
def test_plan_refuses_what_cannot_be_a_batch(tmp_path: Path, text: str, words: str) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(text)
    with pytest.raises(InputError, match=words):
        plan(source, tmp_path / "out.jsonl")


def test_plan_refuses_an_output_that_would_overwrite_the_input(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"custom_id": "a", "url": "/v1/embeddings", "body": {}}\n')
    with pytest.raises(InputError, match="overwrite the input"):
        plan(source, tmp_path / "." / "in.jsonl")


def test_plan_refuses_a_missing_file_or_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        plan(tmp_path / "nope", tmp_path / "out.jsonl")
    with pytest.raises(InputError, match="not found"):
        plan(tmp_path, tmp_path / "out.jsonl")

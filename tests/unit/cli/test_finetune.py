"""A logged request and answer as a fine-tuning line: text conversations only, nothing cut."""

from __future__ import annotations

import json

import pytest

from levergate.cli.finetune import example


def body(*messages: dict[str, object]) -> str:
    return json.dumps({"model": "large", "messages": list(messages)})


def test_a_conversation_and_its_answer_become_one_line() -> None:
    line, why = example(body({"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "2+2?", "name": "x"}), "4")  # fmt: skip
    assert why == "written"
    assert line == {"messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "2+2?"},
                                 {"role": "assistant", "content": "4"}]}  # fmt: skip


@pytest.mark.parametrize(
    ("request_body", "answer", "why"),
    [
        (None, "4", "no_bodies"),
        (body({"role": "user", "content": "q"}), "", "no_bodies"),
        (body({"role": "user", "content": "q"}), "4 and[truncated: 90000 bytes]", "truncated"),
        (
            '{"model": "large", "messages": [{"role": "user", "con[truncated: 99 bytes]',
            "4",
            "truncated",
        ),
        (json.dumps({"model": "large", "prompt": "q"}), "4", "not_chat"),
        (body({"role": "user", "content": [{"type": "image_url"}]}), "4", "not_text"),
        (body({"role": "tool", "content": "x"}), "4", "not_text"),
        ("not json", "4", "not_chat"),
    ],
)
def test_what_cannot_teach_is_skipped_with_its_reason(
    request_body: str | None, answer: str, why: str
) -> None:
    assert example(request_body, answer) == (None, why)

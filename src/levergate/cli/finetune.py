"""`levergate log export --format openai-finetune --model STRONG`: the strong model's logged
answers as chat fine-tuning JSONL (one `{"messages": [...]}` a line, the answer last as the
assistant's), to distil it into a cheaper model.

    levergate log export --format openai-finetune --model gpt-4o --base-model gpt-4o-mini \
        --since 7d -o distil.jsonl [--shadow-agreed]

Which answers. By default every request the strong alias answered (its `alias`, not only asked
for: a fallback's answer is another model's) with both bodies logged. `--shadow-agreed` takes
instead the strong answers of shadow samples (requestlog/labels.py) that the cheap alias agreed
with: a second model reached the same result, the closest thing to "judged correct" the log
holds. Never an example whose body or answer was cut by `request_log.bodies.max_bytes` (half an
answer would teach half answers), one with a non-text message (an image, a tool call), nor one
of a tenant in `request_log.bodies.private_tenants` (their text is never logged either; this is
the second guard, for bodies logged before the tenant was marked).

The counts: examples written and skipped by reason, the tokens (tiktoken, per message content
plus OpenAI's ~4 tokens of framing per message: an estimate, said as one), and the training
cost for `--epochs` passes at the catalog's fine-tuning price of `--base-model` (unknown when
the catalog lists none).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson

from levergate.cli.log_source import LogSource, StoreSource
from levergate.cli.output import ExitCode, print_json
from levergate.core.json_bound import parse_json
from levergate.errors import ConfigError
from levergate.requestlog.query import LogFilter

__all__ = ["examples", "run"]

PAGE = 1000
TRUNCATED = "[truncated: "
MESSAGE_FRAMING_TOKENS = 4  # OpenAI's per-message overhead in chat token counts, roughly
ROLES = frozenset({"system", "developer", "user", "assistant"})


def example(request_body: str | None, answer: str | None) -> tuple[dict[str, Any] | None, str]:
    """A fine-tuning line from a logged request and answer, or None and why not."""
    if not request_body or not answer:
        return None, "no_bodies"
    if TRUNCATED in request_body[-64:] or TRUNCATED in answer[-64:]:
        return None, "truncated"
    try:
        body = parse_json(request_body)
    except ValueError:  # not JSON, or nested past the bound (TooDeep is one)
        return None, "not_chat"
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        return None, "not_chat"
    kept = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            return None, "not_text"
        content = message.get("content")
        if not isinstance(content, str):
            return None, "not_text"
        kept.append({"role": message["role"], "content": content})
    return {"messages": [*kept, {"role": "assistant", "content": answer}]}, "written"


def examples(
    source: LogSource, where: LogFilter, *, strong: str, private: frozenset[str]
) -> Iterator[tuple[dict[str, Any] | None, str]]:
    """Every request `strong` answered, as (line or None, the reason)."""
    cursor = None
    while True:
        page = source.page(where, cursor=cursor, limit=PAGE)
        for record in page.records:
            if record.get("alias") != strong or record.get("outcome") != "ok":
                continue
            if record.get("tenant") in private:
                yield None, "private_tenant"
                continue
            yield example(record.get("request_body"), record.get("answer_body"))
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def agreed(
    source: StoreSource, where: LogFilter, *, strong: str, private: frozenset[str]
) -> Iterator[tuple[dict[str, Any] | None, str]]:
    """The strong answers of shadow samples the cheap answer agreed with, each with its
    request's logged body."""
    from levergate.requestlog.labels import Labelled

    for label in source.labels(Labelled(since=where.since, until=where.until)):
        if label["strong"] != strong or label["result"] != "agree":
            continue
        if label["tenant"] in private:
            yield None, "private_tenant"
            continue
        rows = source.page(LogFilter(request_id=label["request_id"]), cursor=None, limit=1)
        body = rows.records[0].get("request_body") if rows.records else None
        yield example(body, label["strong_text"])


def run(args: argparse.Namespace, source: LogSource, where: LogFilter) -> int:
    from levergate.catalog import Catalog
    from levergate.config import Settings
    from levergate.protocol.tokens import TiktokenCounter

    strong = where.model
    if strong is None or args.output is None:
        raise ConfigError("--format openai-finetune needs --model STRONG (the alias whose "
                          "answers to export) and -o FILE")  # fmt: skip
    if args.epochs < 1:
        raise ConfigError("--epochs must be at least 1")
    settings = Settings.load(args.config) if args.config else Settings.load()
    private = frozenset(settings.request_log.bodies.private_tenants)
    if args.shadow_agreed:
        if not isinstance(source, StoreSource):
            raise ConfigError("--shadow-agreed reads the log's labels: use --config or --db")
        found = agreed(source, where, strong=strong, private=private)
    else:
        found = examples(source, where, strong=strong, private=private)
    base = args.base_model or strong
    counter, counts, tokens = TiktokenCounter(), Counter[str](), 0
    with args.output.open("wb") as out:
        for line, why in found:
            counts[why] += 1
            if line is not None:
                out.write(orjson.dumps(line) + b"\n")
                tokens += sum(counter.count(m["content"], model=base).tokens
                              + MESSAGE_FRAMING_TOKENS for m in line["messages"])  # fmt: skip
    price = Catalog.build(settings).spec(base).fine_tuning
    cost = None if price is None else tokens * args.epochs * price / 1e6
    print_json({"output": str(args.output), "model": strong, "base_model": base,
                "examples": counts.pop("written", 0), "skipped": dict(counts),
                "tokens": tokens, "epochs": args.epochs, "training_usd_per_million": price,
                "estimated_training_usd": cost})  # fmt: skip
    return ExitCode.OK

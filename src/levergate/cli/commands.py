"""The subcommands of `levergate`, in `--help` order, each with its one-line summary.

The top-level parser lists them from this table without importing their modules
(levergate/cli/main.py): `levergate --help` and every subcommand start without loading the
others' implementations (the gateway, the HTTP stacks). Each module's `register` adds its parser
with the same summary. A new subcommand: its module levergate/cli/<name>.py with `register`,
and its row here.
"""

from __future__ import annotations

SUMMARY: dict[str, str] = {
    "serve": "run the gateway as an OpenAI-compatible HTTP proxy",
    "sim": "run a simulated OpenAI-compatible provider (for tests, demos, benchmarks)",
    "bench": "load-test an OpenAI-compatible URL (closed or open loop, exact percentiles)",
    "batch": "run a JSONL batch through levergate (resumable), or watch/cancel one",
    "catalog": "list the model catalog: prices, context windows, tokenizers",
    "router": "train, evaluate, promote and roll back the learned router",
    "labels": "the shadow comparisons logged from live traffic, as router training labels",
    "cache": "choose and install the semantic cache's threshold per route, or roll it back",
    "config": "check a configuration file; print the settings' schema or reference",
    "local": "the embedded engine's model files",
    "log": "read the request log: query, tail, export (JSONL, CSV, Parquet)",
    "report": "an offline HTML report and a markdown summary of the log or a bench run",
    "analyze": "replay your traffic through candidate settings: what each lever would save",
}

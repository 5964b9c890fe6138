"""Labels from the gateway's own traffic: the request log's shadow labels (requestlog/labels.py)
as the rows `levergate router train` learns from, and the time-ordered split the learning loop
evaluates on.

What a label says. A shadow sample asked the route's strong alias the same request the cheap
alias had answered, and compared the two (policies/shadow.py). The strong answer is the
reference, so a logged label reads as a labelled row with the strong model correct (1) and the
cheap model correct exactly when it agreed. That is the counterfactual the live retention gauge
uses too; what it does not see (the strong model wrong where the cheap one was right) makes
retention understated, never overstated. Only labels carrying their prompt can train (texts are
kept where bodies are logged); failed comparisons are no label at all.

The split. Traffic drifts, so a router is judged on what came after what it learned from: the
labels are ordered by time, the oldest `1 - test_share` train, the newest `test_share` evaluate
(`split`), and the router file records the boundary (`training.log.split_ts`) so the promotion
gate (routing/promote.py) measures a candidate only on labels it never saw.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from levergate.errors import ConfigError
from levergate.requestlog.labels import ROUTER_LAYERS, Labelled
from levergate.routing.labels import MAX_ROWS, Labels

__all__ = ["LogLabels", "read_log_labels", "split", "write_labels"]

CORRECT = "_correct"


class LabelReader(Protocol):
    """The labels' store (requestlog/store.py), or a running gateway's (cli/log_source.py)."""

    def labels(self, which: Labelled, *, limit: int) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class LogLabels:
    """One route's labels from the log, oldest first, for one cheap / strong pair."""

    route: str
    cheap: str
    strong: str
    labels: Labels
    ts: npt.NDArray[np.float64]  # when each was compared (epoch seconds), ascending
    request_ids: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: npt.NDArray[np.intp]) -> LogLabels:
        return LogLabels(self.route, self.cheap, self.strong, self.labels.subset(index),
                         self.ts[index], [self.request_ids[i] for i in index])  # fmt: skip


def read_log_labels(
    store: LabelReader,
    *,
    route: str,
    since: float | None = None,
    until: float | None = None,
    cheap: str | None = None,
    min_rows: int = 1,
) -> LogLabels:
    """`route`'s labels that carry their prompt, for `cheap` (default: the cheap alias with
    the most labels); a `ConfigError` naming the minimum when fewer than `min_rows`."""
    which = Labelled(name=route, since=since, until=until, layers=ROUTER_LAYERS)
    rows = store.labels(which, limit=MAX_ROWS)
    rows = [r for r in rows if r["prompt"]]
    pairs = Counter((r["cheap"], r["strong"]) for r in rows if cheap is None or r["cheap"] == cheap)
    if not pairs:
        raise ConfigError(
            f"route {route!r} has no labels with a prompt in the request log (0 rows; at least "
            f"{min_rows} are needed): shadow sampling on (routing.shadow.rate) and bodies "
            "logged for the route (request_log.bodies.models) make them"
        )
    (chosen, strong), count = pairs.most_common(1)[0]
    if count < min_rows:
        raise ConfigError(
            f"route {route!r} has {count} labels with a prompt for {chosen} against {strong}; "
            f"at least {min_rows} are needed (--min-rows)"
        )
    rows = [r for r in rows if (r["cheap"], r["strong"]) == (chosen, strong)]
    labels = Labels(
        prompts=[r["prompt"] for r in rows],
        cheap=np.array([1.0 if r["result"] == "agree" else 0.0 for r in rows]),
        strong=np.ones(len(rows)), source=f"request log, route {route}",
    )  # fmt: skip
    ts = np.array([float(r["ts"]) for r in rows])
    return LogLabels(route, chosen, strong, labels, ts, [str(r["request_id"]) for r in rows])


def split(found: LogLabels, *, test_share: float) -> tuple[LogLabels, LogLabels, float]:
    """(older, newer, the first newer label's time): the oldest `1 - test_share` train, the
    newest `test_share` evaluate (each at least one row)."""
    if not 0 < test_share < 1:
        raise ConfigError("the share of newest labels held back must be between 0 and 1")
    n = len(found)
    held = min(n - 1, max(1, round(n * test_share)))
    if n < 2 or held < 1:
        raise ConfigError("need at least two labels to train on older and test on newer ones")
    cut = n - held
    index = np.arange(n)
    return found.subset(index[:cut]), found.subset(index[cut:]), float(found.ts[cut])


def write_labels(found: LogLabels, path: Path) -> None:
    """The labels as `levergate router train` reads them (CSV or JSONL by the suffix): `prompt`,
    `CHEAP_correct`, `STRONG_correct`, and when, the route and the request id beside them."""
    names = ("prompt", found.cheap + CORRECT, found.strong + CORRECT, "ts", "route", "request_id")
    rows: Sequence[tuple[Any, ...]] = [
        (p, int(c), int(s), t, found.route, r)
        for p, c, s, t, r in zip(found.labels.prompts, found.labels.cheap, found.labels.strong,
                                 found.ts.tolist(), found.request_ids, strict=True)
    ]  # fmt: skip
    with path.open("w", encoding="utf-8", newline="") as handle:
        if path.suffix.lower() in {".jsonl", ".ndjson"}:
            for row in rows:
                handle.write(json.dumps(dict(zip(names, row, strict=True))) + "\n")
            return
        writer = csv.writer(handle)
        writer.writerow(names)
        writer.writerows(rows)

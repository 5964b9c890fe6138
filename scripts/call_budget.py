"""The hot path's call budget (issue 22): function calls per chat request on the default
path, in-process and over HTTP, whole and streamed, and an exact-cache hit (`hit`: the same
deterministic request again, answered whole); and in-process, whole answers with the request
log on (`log`) and with tracing too (`traced`); counted by `levergate.bench.calls`, against
the budget committed in tests/call_budget.json that `make test` holds every change to
(tests/unit/bench/test_call_budget.py).

    .venv/bin/python scripts/call_budget.py                    # measure; show where calls go
    .venv/bin/python scripts/call_budget.py --write --reason "why the budget moves"

`--write` records today's counts as the budget with the reason, which the commit that moves
the budget carries too.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
from pathlib import Path

from levergate.bench.calls import FEATURE_KINDS, WAYS, Counted, Way, count, kinds

BUDGET = Path(__file__).resolve().parents[1] / "tests" / "call_budget.json"


def measure() -> dict[tuple[Way, str], Counted]:
    return {(way, kind): asyncio.run(count(way, kind)) for way in WAYS for kind in kinds(way)}


def budget_of(counted: dict[tuple[Way, str], Counted], reason: str) -> dict[str, object]:
    return {
        "date": dt.datetime.now(dt.UTC).date().isoformat(),
        "reason": reason,
        **{way: {kind: {"gateway_calls": round(counted[way, kind].gateway_per_request),
                        "all_calls": round(counted[way, kind].per_request),
                        **_over_whole(counted, way, kind)}
                  for kind in kinds(way)}
           for way in WAYS},
    }  # fmt: skip


def _over_whole(counted: dict[tuple[Way, str], Counted], way: Way, kind: str) -> dict[str, int]:
    """A feature's share: its gateway calls a request over a whole answer's."""
    if kind not in FEATURE_KINDS:
        return {}
    added = counted[way, kind].gateway_per_request - counted[way, "whole"].gateway_per_request
    return {"over_whole": round(added)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="record the counts as the budget")
    parser.add_argument("--reason", help="why the budget moves (required with --write)")
    args = parser.parse_args()
    if args.write and not args.reason:
        parser.error("--write needs --reason")
    counted = measure()
    for (way, kind), c in counted.items():
        print(f"{way}, {kind}: {c.gateway_per_request:.1f} gateway calls per request "
              f"({c.per_request:.1f} in the whole process); the most calling modules:")  # fmt: skip
        for module, calls in c.by_module.most_common(15):
            print(f"  {calls / c.requests:8.1f}  {module}")
    if args.write:
        BUDGET.write_text(json.dumps(budget_of(counted, args.reason), indent=2) + "\n")
        print(f"wrote {BUDGET}")


if __name__ == "__main__":
    main()

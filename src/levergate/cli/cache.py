"""`levergate cache threshold | rollback`: the semantic cache's threshold per route, chosen from
the verifications logged from live traffic and installed in running gateways without a restart.

    levergate cache threshold --route faq --target-false-hit 0.02 --config gw.yaml
    levergate cache threshold --route faq --target-false-hit 0.02 --threshold 0.88 --dry-run
    levergate cache rollback --route faq --config gw.yaml

`threshold` reads the route's semantic labels (`cache.semantic.calibration` samples and verifies
lookups: layers/cache/checks.py) from the request log (`--config`'s store, `--db FILE`, or a
running gateway's `--url`), prints the curve — each threshold's hit rate and false-hit rate
with its 95% interval — and chooses the lowest threshold whose measured false-hit rate is at
most the target on at least `--min-verifications` verified would-be hits
(policies/cache_threshold.py); by default the rate's 95% upper bound is held to the target
(`--by estimate`: the measured rate itself, which on held-out QQP pairs overshot a 10% or 15%
target in 3 of 5 splits, where the upper bound never did: results/cache_threshold_gate.md).
`--threshold T` asks for one by name: refused, naming it, when
its measured false-hit rate is above the target or it has too few verifications. The choice is
written to `cache.semantic.thresholds_file` (or `--file`) with the threshold it replaces;
gateways load it within `cache.semantic.watch_seconds`. `rollback` swaps the two back.
Fewer verifications than the minimum in all: refused, naming the minimum. Both take `--json`:
their report as one JSON document on stdout instead of the lines.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from levergate.cli.commands import SUMMARY
from levergate.cli.output import ExitCode, add_json_flag, emit_report
from levergate.errors import ConfigError

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.policies.cache_threshold import Point, Verification

__all__ = ["MIN_VERIFICATIONS", "register"]

# The fewest verified would-be hits a threshold is chosen on: at 100, one false hit moves the
# measured rate by a point, the size of the targets people set (1-2%).
MIN_VERIFICATIONS = 100
CURVE_STEP = 0.01


def register(subparsers: Any) -> None:
    from levergate.cli.log_source import add_label_source_flags

    parser: argparse.ArgumentParser = subparsers.add_parser("cache", help=SUMMARY["cache"])
    commands = parser.add_subparsers(dest="cache_command", required=True)
    threshold = commands.add_parser(
        "threshold", help="choose a route's semantic cache threshold from logged verifications "
        "and install it")  # fmt: skip
    add = threshold.add_argument
    add("--route", required=True, help="the model or route name clients ask for")
    add("--target-false-hit", type=float, required=True,
        help="the highest false-hit rate allowed (0.02: 2%% of hits)")  # fmt: skip
    add("--min-verifications", type=int, default=MIN_VERIFICATIONS,
        help="refuse a threshold measured on fewer verified hits (%(default)s)")  # fmt: skip
    add("--threshold", type=float, help="install this threshold, if it passes (default: choose)")
    add("--by", choices=("upper", "estimate"), default="upper",
        help="what is held to the target: the false-hit rate's 95%% upper bound (default) or "
        "its estimate")  # fmt: skip
    add("--file", help="the thresholds file (default: cache.semantic.thresholds_file)")
    add("--dry-run", action="store_true", help="print the curve and the choice; install nothing")
    add_label_source_flags(threshold)
    add_json_flag(threshold, "the curve and the choice")
    threshold.set_defaults(func=run_threshold)
    back = commands.add_parser("rollback", help="swap a route's threshold and the one it replaced")
    back.add_argument("--route", required=True)
    back.add_argument("--config", help="the gateway's YAML settings")
    back.add_argument("--file", help="the thresholds file (default: the config's)")
    add_json_flag(back, "the threshold now served and the one it replaced")
    back.set_defaults(func=run_rollback)


def _settings(config: str | None) -> Settings:
    from levergate.config import Settings

    return Settings.load(config) if config else Settings.load()


def _file(args: argparse.Namespace, settings: Settings) -> str | None:
    return args.file or settings.cache.semantic.thresholds_file


def verifications(rows: list[dict[str, Any]]) -> list[Verification]:
    """The rows of `lg_labels` (layer semantic) as the gate reads them."""
    from levergate.policies.cache_threshold import Verification

    found = []
    for row in rows:
        try:
            detail = json.loads(row.get("detail") or "{}")
            floor = float(detail["floor"])
        except (ValueError, KeyError, TypeError):
            continue  # not a row the checks wrote
        similarity = row.get("similarity")
        found.append(Verification(None if similarity is None else float(similarity), floor,
                                  str(row["result"])))  # fmt: skip
    return found


def read_rows(args: argparse.Namespace) -> list[Verification]:
    from levergate.cli.labels import window
    from levergate.cli.log_source import SourceError, labels_of
    from levergate.requestlog.labels import Labelled

    since, until = window(args)
    source = labels_of(args)
    try:
        rows = source.labels(Labelled(name=args.route, since=since, until=until,
                                      layers=("semantic",), uncompared=True))  # fmt: skip
    except SourceError as exc:
        raise ConfigError(f"the request log at {source.where} cannot be read: {exc}") from None
    finally:
        source.close()
    return verifications(rows)


def run_threshold(args: argparse.Namespace) -> int:
    from levergate.layers.cache.thresholds import RouteThreshold, install, load
    from levergate.policies.cache_threshold import choose, point, refusals

    if not 0 <= args.target_false_hit < 1:
        raise ConfigError("--target-false-hit must be from 0 to below 1 (0.02: 2% of hits)")
    if args.min_verifications < 1:
        raise ConfigError("--min-verifications must be at least 1")
    if args.threshold is not None and not 0 < args.threshold <= 1:
        raise ConfigError("--threshold must be above 0 and at most 1")
    settings = _settings(args.config)
    path = _file(args, settings)
    if path is None and not args.dry_run:
        raise ConfigError("no thresholds file to install into: set "
                          "cache.semantic.thresholds_file (and --config), or --file")  # fmt: skip
    rows = read_rows(args)
    verified = sum(r.result in ("agree", "disagree") for r in rows)
    if verified < args.min_verifications:
        raise ConfigError(
            f"route {args.route!r} has {verified} verified semantic cache lookups in the log; at "
            f"least {args.min_verifications} are needed (--min-verifications): sample more "
            "lookups (cache.semantic.calibration.rate) or wait"
        )
    entry = load(path).routes.get(args.route) if path else None
    current = entry.threshold if entry else settings.cache.semantic.threshold
    target, least = args.target_false_hit, args.min_verifications
    upper = args.by == "upper"
    if args.threshold is not None:
        asked = point(rows, args.threshold)
        reasons = refusals(asked, target=target, min_verified=least, upper=upper)
        chosen: Point | None = asked
    else:
        chosen = choose(rows, target=target, min_verified=least, upper=upper)
        what = "false-hit rate whose 95% upper bound is" if upper else "measured false-hit rate"
        reasons = [] if chosen is not None else [(
            f"no threshold has a {what} at most {target:.2%} on at least {least} verified "
            "hits")]  # fmt: skip
    report = _report(args, rows, current=current, chosen=chosen, reasons=reasons, path=path)
    if not reasons and not args.dry_run and chosen is not None and path is not None:
        install(path, args.route, RouteThreshold(
            threshold=chosen.threshold, previous=current, target_false_hit=target,
            installed_at=time.time(), measured=_point(chosen)))  # fmt: skip
        report["installed"] = True
    emit_report(report, args, render)
    return ExitCode.FAILED if reasons else ExitCode.OK


def _point(p: Point) -> dict[str, Any]:
    interval = p.interval()
    return {"threshold": p.threshold, "lookups": p.lookups, "hits": p.hits,
            "hit_rate": p.hit_rate, "verified": p.verified, "false_hits": p.false_hits,
            "false_hit_rate": p.false_hit_rate,
            "interval": None if interval is None else list(interval)}  # fmt: skip


def _report(
    args: argparse.Namespace,
    rows: list[Verification],
    *,
    current: float,
    chosen: Point | None,
    reasons: list[str],
    path: str | None,
) -> dict[str, Any]:
    from levergate.policies.cache_threshold import curve, point

    floor = min(r.floor for r in rows)
    steps = round((1.0 - floor) / CURVE_STEP)
    grid = sorted({round(floor + i * CURVE_STEP, 4) for i in range(steps + 1)} | {current})
    if chosen is not None:
        grid = sorted({*grid, chosen.threshold})
    return {"route": args.route, "target_false_hit": args.target_false_hit,
            "min_verifications": args.min_verifications, "by": args.by,
            "rows": len(rows), "current": _point(point(rows, current)),
            "chosen": None if chosen is None else _point(chosen),
            "curve": [_point(p) for p in curve(rows, grid) if p.lookups],
            "reasons": reasons, "file": path, "installed": False}  # fmt: skip


def render(r: dict[str, Any]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.1%}"

    head = "threshold   hit rate   verified   false hits   false-hit rate (95% interval)"
    lines = [(f"route {r['route']}: {r['rows']} sampled lookups; target false-hit rate "
              f"{r['target_false_hit']:.1%} on at least {r['min_verifications']} verified hits"),
             "", head]  # fmt: skip
    marks = {r["current"]["threshold"]: " <- current"}
    if r["chosen"] is not None:
        marks[r["chosen"]["threshold"]] = marks.get(r["chosen"]["threshold"], "") + " <- chosen"
    for p in r["curve"]:
        interval = p["interval"]
        band = "" if interval is None else f" ({pct(interval[0])}-{pct(interval[1])})"
        lines.append(f"{p['threshold']:>9.4f}   {pct(p['hit_rate']):>8}   {p['verified']:>8}   "
                     f"{p['false_hits']:>10}   {pct(p['false_hit_rate']):>6}{band}"
                     f"{marks.get(p['threshold'], '')}")  # fmt: skip
    if r["reasons"]:
        lines += ["refused: " + reason for reason in r["reasons"]]
    elif r["installed"]:
        lines.append(f"installed: {r['route']} -> {r['chosen']['threshold']:.4f} in "
                     f"{r['file']} (was {r['current']['threshold']:.4f}; gateways load it "
                     "within cache.semantic.watch_seconds; `levergate cache rollback` undoes "
                     "it)")  # fmt: skip
    else:
        lines.append(f"chosen {r['chosen']['threshold']:.4f} (dry run: nothing installed)")
    return "\n".join(lines)


def run_rollback(args: argparse.Namespace) -> int:
    from levergate.layers.cache.thresholds import rollback

    settings = _settings(args.config)
    path = _file(args, settings)
    if path is None:
        raise ConfigError("no thresholds file: set cache.semantic.thresholds_file (and "
                          "--config), or --file")  # fmt: skip
    if not Path(path).is_file():
        raise ConfigError(f"no thresholds file at {path}")
    entry = rollback(path, args.route, default=settings.cache.semantic.threshold)
    report = {"route": args.route, "file": path, "threshold": entry.threshold,
              "previous": entry.previous}  # fmt: skip
    emit_report(report, args, render_rollback)
    return ExitCode.OK


def render_rollback(r: dict[str, Any]) -> str:
    return (f"rolled back: {r['route']} -> {r['threshold']:.4f} in {r['file']} (was "
            f"{r['previous']}); gateways load it within cache.semantic.watch_seconds")  # fmt: skip

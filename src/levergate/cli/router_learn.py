"""The learning loop's half of `levergate router`: training on the gateway's own labels, the
promotion gate, and rolling back.

    levergate router train --from-log --route auto --config gw.yaml -o candidate.json [public.csv]
    levergate router promote candidate.json --route auto --config gw.yaml
    levergate router rollback --route auto --config gw.yaml

`train --from-log` reads the route's logged shadow labels (requestlog/router_labels.py),
trains on the oldest and evaluates on the newest `--test-share` (time-ordered: traffic drifts,
and a router is judged on what came after what it learned from), optionally with a public
labelled file mixed into the training rows; the held-out numbers and the split are recorded in
the file (`training.log`). `promote` measures the candidate and the route's current router on the
route's labels newer than the candidate's split (routing/promote.py has the rule), prints both
curves, and installs the candidate only when it passes: the route's file is replaced atomically
and the old one kept as `FILE.previous`; gateways serving the route load it within
`routing.watch_seconds` (layers/route_watch.py). `rollback` swaps the two back. Each takes
`--json`: its report as one JSON document on stdout instead of the lines.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from levergate.cli.labels import add_log_flags, window
from levergate.cli.output import ExitCode, add_json_flag, emit_report
from levergate.config import RouteSpecSettings, Settings
from levergate.config.routing import LEARN_MIN_LABELS, LEARN_TEST_SHARE, TRAIN_TARGET_QUALITY
from levergate.errors import ConfigError

if TYPE_CHECKING:
    from levergate.requestlog.router_labels import LogLabels
    from levergate.routing.labels import Labels
    from levergate.routing.model import RouterFile, Scorer
    from levergate.routing.promote import Gate, Measured

GATE_MIN_LABELS = 30  # held-out labels the gate needs: 30% of LEARN_MIN_LABELS
CHALLENGE_SHARE = 0.05
SHARES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def add_from_log_flags(train: argparse.ArgumentParser) -> None:
    add = train.add_argument
    add("--from-log", action="store_true", help="train on the route's labels in the request "
        "log (LABELS, when given, is a public file mixed into the training rows)")  # fmt: skip
    add("--route", help="with --from-log: the route whose labels to learn from")
    add(
        "--test-share",
        type=float,
        default=LEARN_TEST_SHARE,
        help="with --from-log: the newest share of labels held back (default %(default)s)",
    )
    add(
        "--min-rows",
        type=int,
        default=LEARN_MIN_LABELS,
        help="with --from-log: refuse fewer labels than this (default %(default)s)",
    )
    add_log_flags(train)


def register(commands: Any) -> None:
    promote = commands.add_parser("promote", help="install a candidate router if it passes the "
                                  "gate on the route's newer logged labels")  # fmt: skip
    promote.add_argument("candidate", type=Path, help="the candidate router file")
    promote.add_argument("--route", required=True)
    promote.add_argument(
        "--min-rows",
        type=int,
        default=GATE_MIN_LABELS,
        help="refuse to decide on fewer labels (default %(default)s)",
    )
    add_log_flags(promote)
    add_json_flag(promote, "the gate's numbers and decision")
    promote.set_defaults(func=run_promote)
    challenge = commands.add_parser("challenge", help="run a candidate router beside the "
                                    "route's on a share of live traffic")  # fmt: skip
    challenge.add_argument("candidate", type=Path, nargs="?", help="the candidate router file")
    challenge.add_argument("--route", required=True)
    challenge.add_argument("--config", required=True, help="the gateway's YAML settings")
    challenge.add_argument("--share", type=float, default=CHALLENGE_SHARE,
                           help="the share of the route's learned decisions the candidate "
                           "decides too (default %(default)s)")  # fmt: skip
    challenge.add_argument("--stop", action="store_true", help="end the route's challenge")
    add_json_flag(challenge, "the challenge started (or stopped)")
    challenge.set_defaults(func=run_challenge)
    back = commands.add_parser("rollback", help="swap a route's router file and the one its "
                               "last promotion replaced")  # fmt: skip
    back.add_argument("--route", required=True)
    back.add_argument("--config", required=True, help="the gateway's YAML settings")
    add_json_flag(back, "the files swapped")
    back.set_defaults(func=run_rollback)


# ---- train --from-log ---------------------------------------------------------------------------


def log_labels(args: argparse.Namespace, *, route: str, cheap: str | None, min_rows: int,
               since: float | None = None) -> LogLabels:  # fmt: skip
    """`route`'s labels in the log `args` names (`--config`, `--db`, `--url`, `--since`,
    `--until`)."""
    from levergate.cli.log_source import SourceError, labels_of
    from levergate.requestlog.router_labels import read_log_labels

    if min_rows < 1:
        raise ConfigError("--min-rows must be at least 1")

    first, until = window(args)
    since = max(v for v in (first, since) if v is not None) if (first or since) else None
    source = labels_of(args)
    try:
        return read_log_labels(source, route=route, since=since, until=until, cheap=cheap,
                               min_rows=min_rows)  # fmt: skip
    except SourceError as exc:
        raise ConfigError(f"the request log at {source.where} cannot be read: {exc}") from None
    finally:
        source.close()


def training_rows(args: argparse.Namespace, read: Any) -> tuple[Labels, LogLabels, LogLabels]:
    """(training rows: the older logged labels first, then any public file; the older, the
    newer). The threshold is read on the logged rows alone (`calibrated`): the gate measures
    retention in the log's terms, agreement with the strong model, not a public file's."""
    from levergate.requestlog.router_labels import split
    from levergate.routing.labels import Labels

    if not args.route:
        raise ConfigError("--from-log needs --route (the route whose labels to learn from)")
    found = log_labels(args, route=args.route, cheap=args.cheap_model, min_rows=args.min_rows)
    older, newer, _ = split(found, test_share=args.test_share)
    args.cheap_model = args.cheap_model or found.cheap
    args.strong_model = args.strong_model or found.strong
    if not args.labels:
        return older.labels, older, newer
    public: Labels = read(args)
    mixed = Labels(older.labels.prompts + public.prompts,
                   np.concatenate([older.labels.cheap, public.cheap]),
                   np.concatenate([older.labels.strong, public.strong]),
                   f"{older.labels.source} + {public.source}")  # fmt: skip
    return mixed, older, newer


def calibrated(labels: Labels, older: LogLabels) -> npt.NDArray[np.bool_]:
    """The training rows the threshold is chosen on: the logged ones (they come first)."""
    return np.arange(len(labels)) < len(older)


def held_out(router: RouterFile, scorer: Scorer, older: LogLabels, newer: LogLabels,
             features: Any) -> RouterFile:  # fmt: skip
    """`router` with what it measured on the newer labels recorded (`training.log`)."""
    from levergate.routing.curve import curve, measured

    scores = scorer.score(features(newer.labels.prompts))
    kept, share = measured(scores, newer.labels.cheap, newer.labels.strong, router.threshold)
    c = curve(scores, newer.labels.cheap, newer.labels.strong)
    log = {"route": older.route, "cheap": older.cheap, "strong": older.strong,
           "split_ts": float(newer.ts[0]), "train_rows": len(older), "test_rows": len(newer),
           "test_retention": kept, "test_saving": 1 - share,
           "test_saving_at_target": c.saving_at(router.target_quality)}  # fmt: skip
    return router.model_copy(update={"training": {**router.training, "log": log}})


# ---- promote and rollback -----------------------------------------------------------------------


def _route(settings: Settings, name: str) -> RouteSpecSettings:
    for spec in settings.routing.routes:
        if spec.name == name:
            if spec.learned is None:
                raise ConfigError(f"route {name!r} has no learned router (routing.routes[]."
                                  "learned) to promote into")  # fmt: skip
            return spec
    raise ConfigError(f"no route {name!r} in the configuration")


def run_promote(args: argparse.Namespace) -> int:
    from levergate.layers.route import fits
    from levergate.routing.model import load

    if args.config is None:
        raise ConfigError("router promote needs --config: the gateway's settings name the route")
    settings = Settings.load(args.config)
    spec = _route(settings, args.route)
    learned = spec.learned
    assert learned is not None  # noqa: S101 - _route checked
    models = {m.name: m for m in settings.models}
    candidate, scorer = load(args.candidate)
    fits(candidate, spec, settings=settings.routing, models=models)
    route_file = Path(learned.file)
    current = load(route_file) if route_file.exists() else None
    split = candidate.training.get("log", {}).get("split_ts")
    rows = log_labels(args, route=spec.name, cheap=learned.cheap, min_rows=args.min_rows,
                      since=float(split) if split is not None else None)  # fmt: skip
    result = _measure(spec, (candidate, scorer), current, rows)
    report = _report(result, candidate=str(args.candidate), route_file=str(route_file))
    report["live"] = _live(args, spec.name, digest=_digest(args.candidate), target=result.target)
    report["reasons"] += report["live"]["reasons"]
    passed = result.passed and not report["live"]["reasons"]
    report["promoted"] = passed
    if passed:
        from levergate.layers.route_paths import challenger_path
        from levergate.routing.promote import install

        install(args.candidate, route_file)
        challenging = challenger_path(str(route_file))
        if challenging.is_file() and _challenged_digest(challenging) == report["live"]["sha256"]:
            challenging.unlink()  # the challenger is the champion now
    emit_report(report, args, render)
    return ExitCode.OK if passed else ExitCode.FAILED


def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _challenged_digest(path: Path) -> str | None:
    import json

    try:
        found = json.loads(path.read_text(encoding="utf-8"))["training"]["challenge"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if isinstance(found, str) else None


def _live(args: argparse.Namespace, route: str, *, digest: str, target: float) -> dict[str, Any]:
    """The candidate's live numbers as a challenger (its labels: layer `challenger`, its file's
    SHA-256), beside the champion's on the same requests; used by the gate when there are at
    least `--min-rows`."""
    import json

    from levergate.cli.log_source import SourceError, labels_of
    from levergate.requestlog.labels import Labelled
    from levergate.routing.promote import live

    first, until = window(args)
    source = labels_of(args)
    try:
        rows = source.labels(Labelled(name=route, since=first, until=until,
                                      layers=("challenger",), uncompared=True))  # fmt: skip
    except SourceError as exc:
        raise ConfigError(f"the request log at {source.where} cannot be read: {exc}") from None
    finally:
        source.close()
    ours = []
    for row in rows:
        try:
            detail = json.loads(row.get("detail") or "{}")
        except ValueError:
            continue
        if isinstance(detail, dict) and detail.get("candidate") == digest:
            ours.append({**row, "detail": detail})
    found = live(ours)
    report: dict[str, Any] = {"sha256": digest, "rows": 0 if found is None else found.rows,
                              "used": False, "reasons": []}  # fmt: skip
    if found is None:
        return report
    report.update(challenger=dict(zip(("retention", "saving"), found.challenger, strict=True)),
                  champion=dict(zip(("retention", "saving"), found.champion, strict=True)),
                  used=found.rows >= args.min_rows)  # fmt: skip
    if report["used"] and found.challenger[0] < target - 1e-12:
        report["reasons"].append(
            f"live, the candidate keeps {found.challenger[0]:.1%} of strong quality on "
            f"{found.rows} challenged requests, below the route's target {target:.1%}")  # fmt: skip
    return report


def run_challenge(args: argparse.Namespace) -> int:
    """Put the candidate beside the route's router file as its challenger (or `--stop`)."""
    from levergate.layers.route import fits
    from levergate.layers.route_paths import challenger_path
    from levergate.routing.model import load

    settings = Settings.load(args.config)
    spec = _route(settings, args.route)
    assert spec.learned is not None  # noqa: S101 - _route checked
    path = challenger_path(spec.learned.file)
    if args.stop:
        report: dict[str, Any] = {"route": args.route, "challenging": False,
                                  "challenger_file": str(path),
                                  "removed": path.exists()}  # fmt: skip
        path.unlink(missing_ok=True)
        emit_report(report, args, render_challenge)
        return ExitCode.OK
    if args.candidate is None:
        raise ConfigError("router challenge needs the candidate router file (or --stop)")
    if not 0 < args.share <= 1:
        raise ConfigError("--share must be above 0 and at most 1")
    models = {m.name: m for m in settings.models}
    candidate, _ = load(args.candidate)
    fits(candidate, spec, settings=settings.routing, models=models, file=str(args.candidate))
    import time

    challenge = {"share": args.share, "sha256": _digest(args.candidate), "started": time.time(),
                 "file": str(args.candidate)}  # fmt: skip
    marked = candidate.model_copy(update={"training": {**candidate.training,
                                                       "challenge": challenge}})  # fmt: skip
    beside = path.with_name(f".{path.name}.tmp")
    marked.save(beside)
    beside.replace(path)
    report = {"route": args.route, "challenging": True, "challenger_file": str(path),
              "candidate": challenge["file"], "share": args.share,
              "sha256": challenge["sha256"], "started": challenge["started"]}  # fmt: skip
    emit_report(report, args, render_challenge)
    return ExitCode.OK


def render_challenge(r: dict[str, Any]) -> str:
    if not r["challenging"]:
        return (f"route {r['route']}: no challenger ({r['challenger_file']} removed); gateways "
                "drop it within routing.watch_seconds")  # fmt: skip
    return (f"route {r['route']}: {r['candidate']} challenges the route's router on "
            f"{r['share']:.1%} of its learned decisions ({r['challenger_file']}); gateways start "
            "within routing.watch_seconds, and `router promote` reads its live labels")  # fmt: skip


def _measure(
    spec: RouteSpecSettings,
    candidate: tuple[RouterFile, Scorer],
    current: tuple[RouterFile, Scorer] | None,
    rows: LogLabels,
) -> Gate:
    from levergate.cli.router import _embeddings_of
    from levergate.layers.route import serving_threshold
    from levergate.routing.promote import gate
    from levergate.routing.train import embedder, features

    learned = spec.learned
    assert learned is not None  # noqa: S101
    embed = embedder(_embeddings_of(candidate[0]))
    prompts = rows.labels.prompts

    def scored(pair: tuple[RouterFile, Scorer]) -> tuple[Any, float]:
        x = features(prompts, embed=embed, text_chars=pair[0].features.text_chars)
        return pair[1].score(x), serving_threshold(pair[0], learned)

    target = learned.target_quality or (current[0] if current else candidate[0]).target_quality
    return gate(candidate=scored(candidate), current=None if current is None else scored(current),
                cheap=rows.labels.cheap, strong=rows.labels.strong,
                target=target or TRAIN_TARGET_QUALITY)  # fmt: skip


def _points(measured: Measured) -> list[dict[str, float]]:
    c = measured.curve
    if c is None:
        return [{"strong_share": 1.0, "retention": 1.0}]
    found = []
    for wanted in SHARES:
        i = min(int(np.searchsorted(c.strong_share, wanted - 1e-12)), len(c.strong_share) - 1)
        found.append({"strong_share": float(c.strong_share[i]),
                      "retention": float(c.retention[i])})  # fmt: skip
    return found


def _report(result: Gate, *, candidate: str, route_file: str) -> dict[str, Any]:
    def side(m: Measured) -> dict[str, Any]:
        return {"threshold": m.threshold, "retention": m.retention, "saving": m.saving,
                "curve": _points(m)}  # fmt: skip

    return {"promoted": result.passed, "rows": result.rows, "target": result.target,
            "candidate_file": candidate, "route_file": route_file,
            "candidate": side(result.candidate), "current": side(result.current),
            "reasons": list(result.reasons)}  # fmt: skip


def render(r: dict[str, Any]) -> str:
    pct = "{:.1%}".format
    lines = [(f"{r['rows']} logged labels the candidate never trained on; route target "
             f"{pct(r['target'])} of strong quality"), "",
             "strong calls   kept (candidate)   strong calls   kept (current)"]  # fmt: skip
    ours, theirs = r["candidate"]["curve"], r["current"]["curve"]
    for i in range(max(len(ours), len(theirs))):
        a = ours[i] if i < len(ours) else None
        b = theirs[i] if i < len(theirs) else None
        left = f"{pct(a['strong_share']):>12}   {pct(a['retention']):>16}" if a else " " * 31
        right = f"   {pct(b['strong_share']):>12}   {pct(b['retention']):>14}" if b else ""
        lines.append(left + right)
    for who in ("candidate", "current"):
        m = r[who]
        lines.append(f"offline, {who} at its threshold: {pct(m['retention'])} kept, "
                     f"{pct(m['saving'])} saved")  # fmt: skip
    lines += _render_live(r.get("live"))
    if r["promoted"]:
        lines.append(f"promoted: {r['candidate_file']} -> {r['route_file']} (the old one kept as "
                     f"{r['route_file']}.previous; gateways load it within "
                     "routing.watch_seconds)")  # fmt: skip
    else:
        lines += ["refused: " + reason for reason in r["reasons"]]
    return "\n".join(lines)


def _render_live(live: dict[str, Any] | None) -> list[str]:
    if not live or not live.get("rows"):
        return ["live: no challenged requests for this candidate (levergate router challenge)"]
    pct = "{:.1%}".format
    used = "used by the gate" if live["used"] else "too few for the gate (--min-rows)"
    return [f"live, {live['rows']} challenged requests ({used}):"] + [
        f"  {who:<10} {pct(live[who]['retention'])} kept, {pct(live[who]['saving'])} saved"
        for who in ("challenger", "champion")]  # fmt: skip


def run_rollback(args: argparse.Namespace) -> int:
    from levergate.routing.promote import previous_of, rollback

    spec = _route(Settings.load(args.config), args.route)
    assert spec.learned is not None  # noqa: S101
    path = Path(spec.learned.file)
    rollback(path)
    previous = previous_of(path)
    report = {"route": args.route, "route_file": str(path), "sha256": _digest(path),
              "previous_file": str(previous),
              "previous_sha256": _digest(previous) if previous.is_file() else None}  # fmt: skip
    emit_report(report, args, render_rollback)
    return ExitCode.OK


def render_rollback(r: dict[str, Any]) -> str:
    return (f"rolled back: {r['route_file']} is the router it replaced (the one it was is now "
            f"{r['previous_file']}); gateways load it within routing.watch_seconds")  # fmt: skip

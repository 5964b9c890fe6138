"""`levergate router train | eval`: the learned router, offline.

    levergate router train labels.csv --cheap-model fast --strong-model smart -o router.json
    levergate router eval held_out.csv --router router.json
    levergate router eval labels.csv --confidence-col mean_logprob [--cheap-cost 0.05]

Both read CSV or JSONL: a `prompt` column and, per model, a `MODEL_correct` column (1/true where
that model answered right). `--cheap-model / --strong-model` name the models, which are the
gateway aliases the router will choose between (a route refuses a router trained for other
models), and so the columns read; `eval --router` takes them from the file. With neither, the
columns are those of RouteLLM's MMLU release (`mixtral_8x7b_correct`, `gpt4_1106_correct`);
`--prompt-col / --cheap-col / --strong-col` name any columns explicitly. `eval` prints the
cost-quality curve against random routing and the oracle, the saving at 95% of the strong
model's quality, and what the router's configured threshold keeps and saves on these rows.
Cost is the RouteLLM convention: the share of calls sent to the strong model.

`eval --confidence-col COL` evaluates a cascade instead of a router file: each row carries the
score a cascade check would read from the cheap answer, and rows scoring below the threshold
escalate (cli/cascade_eval.py).

With `--json`, `train` and `eval` (and router_learn.py's commands) print their numbers as one JSON
document on stdout instead of the lines (cli/output.py has the conventions).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from levergate.cli import router_learn
from levergate.cli.commands import SUMMARY
from levergate.cli.output import add_json_flag, emit_report
from levergate.config import LocalEmbeddingsSettings, RoutingSettings
from levergate.config.routing import TRAIN_C, TRAIN_FOLDS, TRAIN_TARGET_QUALITY
from levergate.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from levergate.routing.curve import Curve
    from levergate.routing.labels import Labels
    from levergate.routing.model import RouterFile

CORRECT = "_correct"  # a model's labels are the column MODEL_correct
SHARES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("router", help=SUMMARY["router"])
    commands = parser.add_subparsers(dest="router_command", required=True)
    train = commands.add_parser("train", help="train a router file from labelled prompts")
    _labels_arguments(train)
    add = train.add_argument
    add("-o", "--output", required=True, metavar="FILE", help="the router file to write (JSON)")
    add("--target", choices=("gain", "strong_needed", "cheap_wrong"), default="gain",
        help="what the router learns (default gain: E[strong - cheap correct])")  # fmt: skip
    add("--target-quality", type=float, default=TRAIN_TARGET_QUALITY,
        help="share of strong quality the threshold must keep (default %(default)s)")  # fmt: skip
    add("--c", type=float, default=TRAIN_C, help="inverse L2 regularisation (default %(default)s)")
    add("--hidden", type=int, default=0, help="hidden ReLU units (default 0: linear)")
    add(
        "--folds",
        type=int,
        default=TRAIN_FOLDS,
        help="folds for choosing the threshold (default %(default)s)",
    )
    add("--seed", type=int, default=0)
    serving = RoutingSettings().embeddings
    add("--max-tokens", type=int, default=serving.max_tokens,
        help="embedding tokens (default %(default)s, as routing.embeddings)")  # fmt: skip
    add("--quantize", choices=("int8", "off"), default=serving.quantize,
        help="the embedder's MatMuls (default %(default)s, as routing.embeddings)")  # fmt: skip
    router_learn.add_from_log_flags(train)
    add_json_flag(train, "what was trained (file, models, rows, threshold, numbers)")
    train.set_defaults(func=run_train)
    router_learn.register(commands)
    evaluate = commands.add_parser(
        "eval", help="the cost-quality curve of a router file, or of a cascade's confidence"
    )
    _labels_arguments(evaluate)
    add = evaluate.add_argument
    add("--router", metavar="FILE", help="the router file to evaluate")
    add("--confidence-col", metavar="COL", help="instead of --router: evaluate a cascade whose "
        "check reads this column's score (a number per row) from the cheap answer")  # fmt: skip
    pick = evaluate.add_mutually_exclusive_group()
    pick.add_argument("--threshold", type=float, metavar="T",
                      help="a router: as learned.threshold; a cascade: escalate rows with score "
                      "< T, as the cascade's checks (a score equal to T passes)")  # fmt: skip
    pick.add_argument("--target-quality", type=float, metavar="Q",
                      help="a router: as learned.target_quality, the file's threshold for it; a "
                      "cascade: the share of strong quality to reach (default "
                      f"{TRAIN_TARGET_QUALITY}), its threshold on these rows reported")  # fmt: skip
    add("--cheap-cost", type=float, metavar="R", help="a cascade: the cheap call's price as a "
        "share of the strong call's, 0 <= R < 1 (default 0: count strong calls only, as "
        "RouteLLM); saving = 1 - escalated - R")  # fmt: skip
    add(
        "--json",
        dest="as_json",
        action="store_true",
        help="print the numbers as one JSON document on stdout (instead of the table)",
    )
    add("--json-out", metavar="FILE", help="also write the numbers as JSON to FILE")
    # Accepted only to be refused by name: eval embeds as the router file says (as serving does).
    add("--max-tokens", type=int, default=None, help=argparse.SUPPRESS)
    evaluate.set_defaults(func=run_eval)


def _labels_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("labels", nargs="?", help="labelled prompts: .csv or .jsonl (train --from-log: an "
        "optional public file mixed into the logged labels)")  # fmt: skip
    add("--prompt-col", default="prompt")
    add("--cheap-model", metavar="ALIAS", help="the cheap model: the alias a route will name "
        "(recorded in a trained file; its labels are the column ALIAS_correct)")  # fmt: skip
    add("--strong-model", metavar="ALIAS", help="the strong model, likewise")
    add("--cheap-col", help="1/true where the cheap model was right (default: "
        "CHEAP-MODEL_correct, else RouteLLM's mixtral_8x7b_correct)")  # fmt: skip
    add("--strong-col", help="1/true where the strong one was right (default: "
        "STRONG-MODEL_correct, else RouteLLM's gpt4_1106_correct)")  # fmt: skip


def name_columns(
    args: argparse.Namespace, *, cheap: str | None = None, strong: str | None = None
) -> None:
    """Settle `args.cheap_col / strong_col`: as given, else the named model's `MODEL_correct`
    (`--cheap-model`, else `cheap`: a router file's), else RouteLLM's columns."""
    from levergate.routing.labels import DEFAULT_CHEAP, DEFAULT_STRONG

    for role, fallback, default in (("cheap", cheap, DEFAULT_CHEAP),
                                    ("strong", strong, DEFAULT_STRONG)):  # fmt: skip
        model = getattr(args, f"{role}_model") or fallback
        column = getattr(args, f"{role}_col") or (model + CORRECT if model else default)
        setattr(args, f"{role}_col", column)


def _named_read(args: argparse.Namespace) -> Labels:
    """The labels file, its columns named after the models (train --from-log's public file)."""
    name_columns(args)
    return _read(args)


def _read(args: argparse.Namespace) -> Labels:
    from levergate.routing.labels import Columns, read_labels

    columns = Columns(prompt=args.prompt_col, cheap=args.cheap_col, strong=args.strong_col)
    return read_labels(args.labels, columns)


def run_train(args: argparse.Namespace) -> int:
    from levergate.routing.model import Models, Scorer
    from levergate.routing.train import Options, embedder, features, spec_for, train

    if not 0 < args.target_quality <= 1 or args.c <= 0 or args.folds < 2 or args.hidden < 0:
        raise ConfigError("need 0 < --target-quality <= 1, --c > 0, --folds >= 2, --hidden >= 0")
    held, calibrate = None, None
    if args.from_log:
        labels, older, newer = router_learn.training_rows(args, _named_read)
        held, calibrate = (older, newer), router_learn.calibrated(labels, older)
    elif args.labels is None:
        raise ConfigError("router train needs LABELS (a .csv or .jsonl file) or --from-log")
    else:
        name_columns(args)
        labels = _read(args)
    settings = _embeddings(args.max_tokens, quantize=args.quantize)
    embed = embedder(settings)
    spec = spec_for(settings, dimensions=int(embed(["dimensions"]).shape[1]))
    x = features(labels.prompts, embed=embed, text_chars=spec.text_chars)
    models = Models(cheap=args.cheap_model or _bare(args.cheap_col),
                    strong=args.strong_model or _bare(args.strong_col))  # fmt: skip
    options = Options(target=args.target, c=args.c, hidden=args.hidden, folds=args.folds,
                      target_quality=args.target_quality, seed=args.seed)  # fmt: skip
    router = train(labels, x=x, spec=spec, models=models, options=options,
                   labels_path=Path(args.labels) if args.labels else None,
                   calibrate=calibrate)  # fmt: skip
    if held is not None:
        scorer = Scorer(router.network, inputs=x.shape[1])
        router = router_learn.held_out(router, scorer, held[0], held[1], features=lambda p: (
            features(p, embed=embed, text_chars=spec.text_chars)))  # fmt: skip
    router.save(args.output)
    kept, share = router.measured_at(router.threshold)
    report = {"router": {"file": args.output, "cheap": models.cheap, "strong": models.strong},
              "rows": len(labels), "cheap_accuracy": float(labels.cheap.mean()),
              "strong_accuracy": float(labels.strong.mean()),
              "target_quality": router.target_quality, "threshold": router.threshold,
              "retention_at_threshold": float(kept), "saving_at_threshold": float(1 - share),
              "held_out": None if held is None else router.training["log"]}  # fmt: skip
    emit_report(report, args, render_train)
    return 0


def render_train(r: dict[str, Any]) -> str:
    """`train`'s lines; the threshold's numbers are out of fold on the training rows."""
    lines: list[str] = []
    router = r["router"]
    if (log := r["held_out"]) is not None:
        lines.append(f"held out: the newest {log['test_rows']} labels: "
                     f"{log['test_retention']:.1%} of strong quality kept, "
                     f"{log['test_saving']:.1%} saved at the threshold")  # fmt: skip
    lines.append(f"trained on {r['rows']} rows: {router['cheap']} {r['cheap_accuracy']:.1%} "
                 f"correct, {router['strong']} {r['strong_accuracy']:.1%}")  # fmt: skip
    lines.append(f"threshold {r['threshold']:.4f} (out of fold on the training rows: "
                 f"{r['retention_at_threshold']:.1%} of strong quality, "
                 f"{r['saving_at_threshold']:.1%} saved) -> {router['file']}")  # fmt: skip
    return "\n".join(lines)


def run_eval(args: argparse.Namespace) -> int:
    from levergate.cli import cascade_eval

    if (args.router is None) == (args.confidence_col is None):
        raise ConfigError("router eval takes one of --router FILE (a learned router) and "
                          "--confidence-col COL (a cascade's confidence per row)")  # fmt: skip
    if args.max_tokens is not None:
        raise ConfigError("router eval embeds with the settings the router file was trained "
                          "with (its features.max_tokens), as serving does: --max-tokens is a "
                          "`router train` option")  # fmt: skip
    cascade_eval.check_pick(args.threshold, args.target_quality)
    if args.confidence_col is not None:
        name_columns(args)
        return cascade_eval.run(args)
    if args.cheap_cost is not None:
        raise ConfigError("--cheap-cost prices a cascade's cheap calls; a router makes one call "
                          "a row (use it with --confidence-col)")  # fmt: skip
    return _eval_router(args)


def _eval_router(args: argparse.Namespace) -> int:
    from levergate.routing.curve import curve
    from levergate.routing.model import load
    from levergate.routing.train import embedder, features

    router, scorer = load(args.router)
    name_columns(args, cheap=router.models.cheap, strong=router.models.strong)
    labels = _read(args)
    settings = _embeddings_of(router)
    x = features(labels.prompts, embed=embedder(settings), text_chars=router.features.text_chars)
    scores = scorer.score(x)
    threshold = router.threshold if args.threshold is None else args.threshold
    if args.target_quality is not None:
        threshold = router.threshold_for(args.target_quality)[0]
    report = summary(curve(scores, labels.cheap, labels.strong), scores, labels,
                     threshold=threshold, target=router.target_quality)  # fmt: skip
    report["router"] = {"file": args.router, **router.models.model_dump()}
    digest = hashlib.sha256(Path(args.labels).read_bytes()).hexdigest()
    report["seen_in_training"] = digest == router.training.get("labels_sha256")
    emit_report(report, args, render)
    return 0


def summary(
    c: Curve, scores: npt.NDArray[np.float64], labels: Labels, *, threshold: float, target: float
) -> dict[str, Any]:
    """The numbers `eval` prints: the curve at fixed shares, the saving at `target`, and the
    retention and saving at `threshold` (cost: share of strong calls)."""
    import numpy as np

    from levergate.routing.curve import curve, measured, random_saving

    oracle = curve(labels.strong - labels.cheap, labels.cheap, labels.strong)
    kept, share = measured(scores, labels.cheap, labels.strong, threshold)
    points = []
    for wanted in SHARES:
        i = int(np.searchsorted(c.strong_share, wanted - 1e-12))
        i = min(i, len(c.strong_share) - 1)
        share_i = float(c.strong_share[i])
        randomly = c.cheap_quality + share_i * (c.strong_quality - c.cheap_quality)
        points.append({"strong_share": share_i, "retention": float(c.retention[i]),
                       "random_retention": randomly / c.strong_quality})  # fmt: skip
    return {
        "rows": len(labels), "cheap_accuracy": c.cheap_quality,
        "strong_accuracy": c.strong_quality, "target_quality": target,
        "saving_at_target": c.saving_at(target),
        "random_saving_at_target": random_saving(labels.cheap, labels.strong, target),
        "oracle_saving_at_target": oracle.saving_at(target),
        "threshold": threshold, "retention_at_threshold": kept, "saving_at_threshold": 1 - share,
        "curve": points,
    }  # fmt: skip


def render(r: dict[str, Any]) -> str:
    pct = "{:.1%}".format
    lines = [
        (
            f"{r['rows']} rows: cheap {pct(r['cheap_accuracy'])} correct, strong "
            f"{pct(r['strong_accuracy'])} (cost = share of calls to the strong model)"
        ),
        "",
        "strong calls   quality kept (router)   quality kept (random)",
    ]
    lines += [f"{pct(p['strong_share']):>12}   {pct(p['retention']):>21}   "
              f"{pct(p['random_retention']):>21}" for p in r["curve"]]  # fmt: skip
    target = pct(r["target_quality"])
    lines += [
        "",
        (
            f"saving at {target} of strong quality: router {pct(r['saving_at_target'])}, random "
            f"{pct(r['random_saving_at_target'])}, oracle {pct(r['oracle_saving_at_target'])}"
        ),
        (
            f"at the configured threshold {r['threshold']:.4f}: {pct(r['retention_at_threshold'])} "
            f"of strong quality kept, {pct(r['saving_at_threshold'])} saved"
        ),
    ]
    if r.get("seen_in_training"):
        lines.append("warning: the router was trained on these very rows; the figures are "
                     "optimistic (evaluate on rows it never saw)")  # fmt: skip
    return "\n".join(lines)


def _embeddings(max_tokens: int, quantize: Literal["off", "int8"]) -> LocalEmbeddingsSettings:
    """routing.embeddings with these tokens and MatMuls."""
    if not 8 <= max_tokens <= 512:
        raise ConfigError("--max-tokens must be between 8 and 512")
    update = {"max_tokens": max_tokens, "quantize": quantize}
    return RoutingSettings().embeddings.model_copy(update=update)


def _embeddings_of(router: RouterFile) -> LocalEmbeddingsSettings:
    """The embedder a router file was trained on."""
    found = _embeddings(router.features.max_tokens, "off").named(router.features.embedder)
    if found is None:
        raise ConfigError(f"the router file was trained on {router.features.embedder} "
                          "embeddings, which this levergate does not run")  # fmt: skip
    return found


def _bare(column: str) -> str:
    return column.removesuffix(CORRECT) or column

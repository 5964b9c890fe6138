"""The learning loop on shifted traffic: a router trained on one public labelled set serves
another, learns weekly from its own shadow labels, and is promoted only through the gate.

Data: ../shared/data/routellm/mmlu_mixtral_vs_gpt4_dev.csv (7,096 MMLU questions; whether
Mixtral-8x7B and GPT-4-1106 each answered correctly), read at run time, never copied here.

The shift: the starting router is trained (exactly as `levergate router train`) on the
high-school subjects (`high_school_*`, 1,981 rows: the public file), and the traffic is every
other subject (college, professional, miscellaneous: 5,115 rows) in a seeded random order. A
fifth of the traffic is held back, never served and never learned from: every week's router is
also measured there. The rest is served over `WEEKS` weeks.

Each week the champion routes the week's rows (score >= its threshold: strong). Shadow sampling
as the gateway does it (layers/route_shadow.py): each row the router sent cheap is shadowed by
the strong model with probability `RATE`, and each row it sent strong is explored (the cheap
model asked off the path, `learned.explore`) with the same probability, so the labels are a
uniform sample of the traffic. What decides a label: the shadow's `normalized` comparison of the
two answers' final choice letters. The data says only whether each model was right, so: both
right, the letters agree; one right, they disagree; both wrong, they agree when the two wrong
letters coincide, drawn with probability 1/3 (three wrong letters; a seeded draw). Fair because
it is the information a live shadow has, no more: the strong answer is the reference, so a cheap
answer that is right where the strong one is wrong counts as a loss, which understates
retention (the gate is conservative) — true retention is then measured with the real labels.

At the end of each week a candidate is trained as `levergate router train --from-log` does:
the logged labels so far in time order, the oldest 70% (plus the public file) to train, its
threshold read on the logged rows' out-of-fold scores, the newest 30% held out; the gate
(`routing/promote.py`, what `levergate router promote` runs)
measures candidate and champion on those newest labels at their thresholds, and promotes only
when the candidate keeps the target and saves at least what the champion saves (or the
champion itself misses the target there).

Reported per week, on the week's served rows and on the held-back rows, with the real labels:
saving (share of calls not sent to GPT-4, the RouteLLM convention) and retention (quality as a
share of GPT-4's) of the learning router, of the never-learning starting router, and of a
prompt-length rule (longer prompts to the strong model, its length threshold chosen on the
public file for the same target).

    python benchmarks/learning_loop.py [--smoke] [--weeks 4] [--rate 0.25]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this tree's levergate

from harness import RESULTS, Output, add_output_options, data_file, stamp

from levergate.config import RoutingSettings
from levergate.routing.curve import curve, kept_by
from levergate.routing.labels import Labels, read_labels
from levergate.routing.model import Models, RouterFile, Scorer
from levergate.routing.promote import gate
from levergate.routing.train import Options, embedder, features, spec_for, train

FILE = "routellm/mmlu_mixtral_vs_gpt4_dev.csv"
TARGET = 0.95
TEST_SHARE = 0.3  # as `router train --from-log`'s default (config/routing.py)
Vector = npt.NDArray[np.float64]
Matrix = npt.NDArray[np.float64]


@dataclass
class Rows:
    """Labelled rows and their feature rows (real correctness of each model)."""

    labels: Labels
    x: Matrix
    length: Vector

    def take(self, index: npt.NDArray[np.intp]) -> Rows:
        return Rows(self.labels.subset(index), self.x[index], self.length[index])


@dataclass
class Router:
    file: RouterFile
    scorer: Scorer

    def strong(self, rows: Rows) -> npt.NDArray[np.bool_]:
        return self.scorer.score(rows.x) >= self.file.threshold


def shadow_label(cheap: float, strong: float, rng: random.Random) -> float:
    """1.0 when the shadow's comparison would say the answers agree (module docstring)."""
    if cheap == strong == 1.0:
        return 1.0
    if cheap != strong:
        return 0.0
    return 1.0 if rng.random() < 1 / 3 else 0.0


def fitted(
    labels: Labels, x: Matrix, folds: int, calibrate: npt.NDArray[np.bool_] | None = None
) -> Router:
    serving = RoutingSettings().embeddings
    spec = spec_for(serving, dimensions=x.shape[1] - 8)
    file = train(labels, x=x, spec=spec, models=Models(cheap="mixtral", strong="gpt-4"),
                 options=Options(folds=folds, target_quality=TARGET),
                 calibrate=calibrate)  # fmt: skip
    return Router(file, Scorer(file.network, inputs=x.shape[1]))


def measured(sent: npt.NDArray[np.bool_], rows: Rows) -> dict[str, float]:
    kept, share = kept_by(sent, rows.labels.cheap, rows.labels.strong)
    return {"retention": kept, "saving": 1.0 - share}


def length_threshold(public: Rows) -> float:
    return curve(public.length, public.labels.cheap, public.labels.strong).threshold_for(TARGET)


@dataclass
class Log:
    """The shadow labels logged so far, oldest first: feature rows, prompts, agreement."""

    x: list[Vector]
    prompts: list[str]
    agree: list[float]

    def collect(self, week: Rows, rate: float, rng: random.Random) -> int:
        """Each row shadowed (sent cheap) or explored (sent strong) with probability `rate`:
        alike whichever way the router sent it."""
        taken = 0
        for i in range(len(week.labels)):
            if rng.random() >= rate:
                continue
            c, s = week.labels.cheap[i], week.labels.strong[i]
            self.x.append(week.x[i])
            self.prompts.append(week.labels.prompts[i])
            self.agree.append(shadow_label(float(c), float(s), rng))
            taken += 1
        return taken

    def split(self) -> tuple[Labels, Matrix, Labels, Matrix]:
        """(older labels, their rows, newer labels, their rows): the time-ordered split."""
        n = len(self.agree)
        cut = n - max(1, round(n * TEST_SHARE))
        agree, ones = np.array(self.agree), np.ones(n)
        x = np.array(self.x)
        older = Labels(self.prompts[:cut], agree[:cut], ones[:cut], "log")
        newer = Labels(self.prompts[cut:], agree[cut:], ones[cut:], "log")
        return older, x[:cut], newer, x[cut:]


def load(smoke: bool) -> tuple[Rows, Rows, float]:
    """(the public rows, the traffic rows in serving order, seconds spent embedding)."""
    path = data_file(FILE)
    labels = read_labels(path)
    with path.open(encoding="utf-8", newline="") as handle:
        subject = [row["subject"] for row in csv.DictReader(handle)]
    public = np.array([i for i, s in enumerate(subject) if s.startswith("high_school_")])
    traffic = np.array([i for i, s in enumerate(subject) if not s.startswith("high_school_")])
    rng = np.random.default_rng(0)
    traffic = rng.permutation(traffic)
    if smoke:
        public, traffic = rng.permutation(public)[:160], traffic[:240]
    keep = np.concatenate([public, traffic])
    serving = RoutingSettings().embeddings
    t0 = time.perf_counter()
    x = features([labels.prompts[i] for i in keep], embed=embedder(serving),
                 text_chars=serving.max_tokens * 8)  # fmt: skip
    seconds = time.perf_counter() - t0
    rows = Rows(labels.subset(keep), x, np.log1p([len(labels.prompts[i]) for i in keep]))
    n = len(public)
    return rows.take(np.arange(n)), rows.take(np.arange(n, len(keep))), seconds


def week_of(
    champion: Router, start: Router, length_cut: float, served: Rows, held: Rows
) -> dict[str, Any]:
    """The three rules' saving and retention on the week's rows and on the held-back rows."""
    found: dict[str, Any] = {}
    for where, rows in (("served", served), ("held_back", held)):
        found[where] = {
            "learning": measured(champion.strong(rows), rows),
            "never_learning": measured(start.strong(rows), rows),
            "prompt_length": measured(rows.length >= length_cut, rows),
        }
    return found


def retrain(log: Log, public: Rows, champion: Router, folds: int) -> tuple[Router, dict[str, Any]]:
    """A candidate from the log (older labels + the public file) and the gate's verdict on
    the newer labels; the router that serves next week."""
    older, x_old, newer, x_new = log.split()
    mixed = Labels(
        older.prompts + public.labels.prompts,
        np.concatenate([older.cheap, public.labels.cheap]),
        np.concatenate([older.strong, public.labels.strong]),
        "log + public",
    )
    # As `router train --from-log`: the threshold read on the logged rows (they come first).
    logged = np.arange(len(mixed)) < len(older)
    candidate = fitted(mixed, np.vstack([x_old, public.x]), folds, calibrate=logged)
    verdict = gate(
        candidate=(candidate.scorer.score(x_new), candidate.file.threshold),
        current=(champion.scorer.score(x_new), champion.file.threshold),
        cheap=newer.cheap, strong=newer.strong, target=TARGET,
    )  # fmt: skip
    facts = {"labels": len(log.agree), "train_labels": len(older), "gate_labels": len(newer),
             "promoted": verdict.passed, "reasons": list(verdict.reasons),
             "candidate": {"retention": verdict.candidate.retention,
                           "saving": verdict.candidate.saving},
             "champion": {"retention": verdict.current.retention,
                          "saving": verdict.current.saving}}  # fmt: skip
    return (candidate if verdict.passed else champion), facts


def run(args: argparse.Namespace) -> dict[str, Any]:
    public, traffic, embed_seconds = load(args.smoke)
    folds = 2 if args.smoke else 5
    n_held = len(traffic.labels) // 5
    held = traffic.take(np.arange(n_held))
    stream = traffic.take(np.arange(n_held, len(traffic.labels)))
    start = fitted(public.labels, public.x, folds)
    length_cut = length_threshold(public)
    champion, log, rng = start, Log([], [], []), random.Random(1)
    weeks = []
    for w, index in enumerate(np.array_split(np.arange(len(stream.labels)), args.weeks), 1):
        served = stream.take(index)
        week = {"week": w, "rows": len(index), **week_of(champion, start, length_cut, served,
                                                          held)}  # fmt: skip
        week["shadowed"] = log.collect(served, args.rate, rng)
        if w < args.weeks:
            champion, week["gate"] = retrain(log, public, champion, folds)
        weeks.append(week)
    return {**stamp(), "file": FILE, "target": TARGET, "rate": args.rate,
            "public_rows": len(public.labels), "held_back_rows": n_held,
            "served_rows": len(stream.labels), "embed_seconds": embed_seconds,
            "public_cheap_accuracy": float(public.labels.cheap.mean()),
            "public_strong_accuracy": float(public.labels.strong.mean()),
            "traffic_cheap_accuracy": float(traffic.labels.cheap.mean()),
            "traffic_strong_accuracy": float(traffic.labels.strong.mean()),
            "weeks": weeks}  # fmt: skip


def markdown(d: dict[str, Any]) -> str:
    pct = "{:.1%}".format
    lines = [
        "# The learning loop on shifted traffic (RouteLLM MMLU: Mixtral-8x7B vs GPT-4-1106)",
        "",
        (
            f"{d['date']} · {d['machine']} · public file: the high-school subjects "
            f"({d['public_rows']} rows; Mixtral {pct(d['public_cheap_accuracy'])}, GPT-4 "
            f"{pct(d['public_strong_accuracy'])} right) · traffic: every other subject (Mixtral "
            f"{pct(d['traffic_cheap_accuracy'])}, GPT-4 {pct(d['traffic_strong_accuracy'])}), "
            f"{d['served_rows']} rows served over {len(d['weeks'])} weeks, {d['held_back_rows']} "
            f"held back · shadow and explore rate {pct(d['rate'])} · target {pct(d['target'])} · "
            "saving = share of calls kept off GPT-4, retention = quality / GPT-4's (real labels)"
        ),
        "",
        (
            "| week | where | learning: saving / retention | never learning | prompt length | "
            "gate after the week |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for w in d["weeks"]:
        g = w.get("gate")
        verdict = "" if g is None else (
            f"{'promoted' if g['promoted'] else 'refused'} ({g['gate_labels']} newest of "
            f"{g['labels']} labels: candidate {pct(g['candidate']['saving'])} / "
            f"{pct(g['candidate']['retention'])}, champion {pct(g['champion']['saving'])} / "
            f"{pct(g['champion']['retention'])})")  # fmt: skip
        for where in ("served", "held_back"):
            r = w[where]
            cells = [f"{pct(r[k]['saving'])} / {pct(r[k]['retention'])}"
                     for k in ("learning", "never_learning", "prompt_length")]  # fmt: skip
            lines.append(f"| {w['week']} | {where.replace('_', ' ')} | " + " | ".join(cells)
                         + f" | {verdict if where == 'served' else ''} |")  # fmt: skip
    lines += ["", *summary(d)]
    return "\n".join(lines) + "\n"


def summary(d: dict[str, Any]) -> list[str]:
    """What the weeks say: where each rule stood against the target on the held-back rows, and
    how much cheaper the learning router got from its first week at the target to the last."""
    pct = "{:.1%}".format
    target, weeks = d["target"], d["weeks"]
    held = [w["held_back"] for w in weeks]
    start = held[0]["never_learning"]["retention"]
    length = held[0]["prompt_length"]["retention"]
    lines = [
        (
            f"On the held-back rows the starting router keeps {pct(start)} of GPT-4's quality "
            f"and the prompt-length rule {pct(length)}: both chosen for {pct(target)} on the "
            f"public file, both below it on the shifted traffic. The learning router's held-back "
            f"retention by week: {', '.join(pct(h['learning']['retention']) for h in held)}."
        ),
    ]
    at = [i for i, h in enumerate(held) if h["learning"]["retention"] >= target - 1e-12]
    if at:
        first, last = weeks[at[0]]["served"]["learning"], weeks[-1]["served"]["learning"]
        cheaper = 1 - (1 - last["saving"]) / (1 - first["saving"]) if first["saving"] < 1 else 0
        lines.append(
            f"From week {at[0] + 1}, its first at the target, to week {len(weeks)}: strong calls "
            f"{pct(1 - first['saving'])} -> {pct(1 - last['saving'])} of traffic, {pct(cheaper)} "
            "cheaper, retention on held-back rows never below the target after it was reached."
            if all(h["learning"]["retention"] >= target - 1e-12 for h in held[at[0]:])
            else f"From week {at[0] + 1} the learning router reached the target, but fell below "
            "it again later."
        )  # fmt: skip
    lines.append(
        "The labels are agreement with GPT-4's answer (what a live shadow sees), a strict proxy "
        "here: GPT-4 itself is right on about 80% of these questions, so a cheap answer that is "
        "right where GPT-4 is wrong counts as a loss; the gate, measuring in those terms, is "
        "conservative, and the real-label retention lands well above the target."
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weeks", type=int, default=4)
    parser.add_argument(
        "--rate",
        type=float,
        default=0.25,
        help="shadow and explore sampling rate (default %(default)s)",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="rewrite results/learning_loop.md from results/learning_loop.json",
    )
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.render:
        data = json.loads((RESULTS / "learning_loop.json").read_text())
        out.write("learning_loop", data, markdown(data))
        return
    data = run(args)
    out.write("learning_loop", data, markdown(data))


if __name__ == "__main__":
    main()

"""Cascades replayed: which cascade each logged request asks for is the gateway's own `Plans`
(layers/cascade/plan.py: named cascades, `cascade:a>b` names), and whether its first step's
answer is accepted is the cascade's own compiled checks (policies/confidence.py) run on that
answer, where it can run offline:

- the log kept the first step's answer: the request was answered by the first step and not
  escalated, with bodies logged (the log keeps an answer's generated text);
- the checks read only the text: `json`, `json_schema`, `regex`, `confidence_field`. A
  logprob check needs the token logprobs, which the log does not keep, and a `judge` check is a
  model call: for those, and for a request whose first step's answer the log does not have
  (a longer cascade's middle steps, a request a baseline without the cascade sent elsewhere),
  the acceptance is unknown, the request is priced as logged, and the count is said.

A request the log shows escalated keeps its escalation (the first answer it rejected is paid
again in the replay: the log priced it as a side spend). An accepted answer the candidate's
checks reject is escalated: its first answer paid and waited for, then the last step's, priced
and timed as that alias (analyze/effects.py). The escalation rate is measured over the requests
whose acceptance is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from levergate.analyze.effects import Effect
from levergate.analyze.inputs import Req
from levergate.config import CascadeSettings, Settings
from levergate.config.cascade import JudgeSettings
from levergate.errors import BadRequest
from levergate.layers.cascade.plan import Plan, Plans

__all__ = ["Cascaded", "replay_cascades"]


@dataclass
class Cascaded:
    effects: dict[int, Effect] = field(default_factory=dict)
    cascaded: int = 0  # requests asking for a cascade
    known: int = 0  # of which the acceptance is known
    escalated: int = 0  # of those, escalated
    unknown: dict[str, int] = field(default_factory=dict)  # why not known -> requests

    @property
    def escalation_rate(self) -> float | None:
        return self.escalated / self.known if self.known else None


def replay_cascades(cascade: CascadeSettings, settings: Settings, reqs: Sequence[Req]) -> Cascaded:
    found = Cascaded()
    plans = Plans(cascade, aliases=[m.name for m in settings.models])
    if not plans:
        return found
    for at, req in enumerate(reqs):
        try:
            plan = plans.find(req.model)
        except BadRequest:
            continue
        if plan is None:
            continue
        found.cascaded += 1
        first, last = plan.steps[0], plan.strongest
        if req.escalations:
            found.known += 1
            found.escalated += 1
            found.effects[at] = Effect(first=first, alias=last)
            continue
        why = _unknown(plan, req)
        if why is not None:
            found.unknown[why] = found.unknown.get(why, 0) + 1
            continue
        found.known += 1
        if not _accepted(plan, req.answer or ""):
            found.escalated += 1
            found.effects[at] = Effect(first=first, alias=last)
    return found


def _unknown(plan: Plan, req: Req) -> str | None:
    """Why the first step's acceptance cannot be decided offline, or None."""
    if any(isinstance(s, JudgeSettings) for s in plan.signals):
        return "a judge check is a model call"
    if plan.logprobs:
        return "a logprob check needs logprobs, which the log does not keep"
    if req.alias != plan.steps[0]:
        return "the log has no answer of the first step"
    if req.answer is None:
        return "the answer was not logged (bodies off for the route)"
    return None


def _accepted(plan: Plan, text: str) -> bool:
    """The plan's checks, in order, on the logged answer text as a whole chat answer."""
    data: dict[str, Any] = {"object": "chat.completion", "choices": [
        {"index": 0, "finish_reason": "stop",
         "message": {"role": "assistant", "content": text}}]}  # fmt: skip
    for signal in plan.signals:
        if isinstance(signal, JudgeSettings) or not signal(data).passed:
            return False
    return True

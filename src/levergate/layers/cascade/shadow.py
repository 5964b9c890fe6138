"""The cascade's shadow samples: an accepted cheap answer, answered again by the cascade's
strongest step off the request path, and the two compared — the measurement behind
`levergate_cascade_quality_retention` (policies/shadow.py has the formula and what agreement
does and does not prove).

`Shadows` is the cascade's `ShadowQueue` (layers/shadow.py: the bounded queue, the workers under
the Supervisor as the `cascade_shadow` job, the shadow and judge calls, their spend as
`levergate_spend_usd{kind="shadow"}`); what is the cascade's own is what it offers. When a
cascade accepts a step's answer, `offer` draws from the queue's seeded random source and, with
probability `shadow.rate` (the cascade's plan carries its sampling), queues the accepted text
for the strongest step. An answer with no text (a tool call) is not sampled: there is nothing to
compare. Only accepted answers are offered: an escalated request was answered by the strongest
step itself, and a fallback to the cheap answer replaced an error, not the strong answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from levergate.layers.shadow import ShadowQueue
from levergate.policies.confidence import answer_text

if TYPE_CHECKING:
    from levergate.core.call import Call
    from levergate.layers.cascade.plan import Plan


class Shadows(ShadowQueue):
    JOB_NAME = "cascade_shadow"
    LAYER = "cascade"

    def offer(self, call: Call, plan: Plan, answer: Mapping[str, Any], *, alias: str) -> None:
        """Maybe shadow `answer`, the accepted answer of step `alias` to `call`. Never waits."""
        if not self.drawn(plan.shadow):
            return
        cheap = answer_text(answer)
        if cheap is None:  # a tool call, a refusal: no text to compare, nothing to pay for
            return
        self.put(call, label=plan.label, strong=plan.strongest, sampling=plan.shadow, cheap=cheap,
                 cheap_alias=alias)  # fmt: skip

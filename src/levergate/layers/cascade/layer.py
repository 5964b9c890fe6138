"""Cascade: the cheapest step answers first; the next step is called only when its answer fails
a confidence check (policies/confidence.py), up to the last, strongest step.

FRONT, under the caches (a cached answer skips the whole cascade) and right above Fallback (each
step is an alias with its own fallbacks, retries, balancing and limits). Each step is one call
down the stack under the step's alias; a judge check is one more call, to the judge's alias.

What is buffered, and why: an answer can only be judged whole (a mean logprob, a JSON parse, a
judge's grade all need the end of it), so every step but the last is asked for a whole answer
(`stream: false`, with `logprobs: true` when a check reads them) and held in memory — at most the
upstream's `response_limits.body_bytes`. A streaming client whose cheap answer is accepted gets
it replayed as a well-formed stream (role, content, finish, usage chunks); its time to first
token is then the cheap model's whole answer time. The last step is never judged: it is called
with the client's own body and its stream is passed through live, byte for byte. Logprobs the
cascade asked for are removed from the answer when the client did not ask for them.

If the last step fails (any gateway error, before its first streamed byte), the newest answer an
earlier step gave is returned after all, marked `x-levergate-cascade: fallback-to-cheap` and
`trace.cascade_fallback`: a rejected answer beats an error. An earlier step that fails with an
upstream error escalates like a failed check. What was paid for and not returned (rejected
answers, judge calls) goes to `trace.side_spend`; `trace.route` names the step that answered
against the last step (the counterfactual the ledger prices savings from).

What the checks cost in quality is measured, not assumed: with `shadow.rate` above 0 a share of
the accepted answers is answered again by the strongest step off the request path and compared
(layers/cascade/shadow.py), giving `levergate_cascade_quality_retention` next to the savings.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from levergate.config.cascade import CascadeSettings, JudgeSettings
from levergate.core.call import Call, RouteDecision, Spend, Trace
from levergate.core.reply import Completed, Reply, Stream
from levergate.core.service import Answer, Layer, Service
from levergate.errors import BadRequest, LevergateError, UpstreamError, UpstreamTimeout
from levergate.layers.cache.replay import as_stream, whole
from levergate.layers.cascade.metrics import CascadeMetrics
from levergate.layers.cascade.plan import Plan, Plans
from levergate.layers.cascade.shadow import Shadows
from levergate.policies.confidence import Verdict, answer_text, judge_messages, judge_verdict
from levergate.policies.pricing import spent

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

CASCADE_HEADER = "x-levergate-cascade"  # accepted | escalated | fallback-to-cheap
CASCADE_ALIAS_HEADER = "x-levergate-cascade-alias"  # the step that answered
ACCEPTED, ESCALATED, FALLBACK = "accepted", "escalated", "fallback-to-cheap"


@dataclass(slots=True)
class _Answer:
    """A buffered step answer and who produced it (restored on the trace if it is returned)."""

    alias: str
    reply: Completed
    upstream: str
    upstream_model: str

    def spend(self, purpose: str) -> Spend:
        return spent(self.alias, purpose, self.reply.usage)


class Cascade:
    @classmethod
    def layer(
        cls, settings: CascadeSettings, *, aliases: Collection[str], shared: Shared
    ) -> Layer | None:
        """None when neither `cascade:` names nor named cascades are on."""
        plans = Plans(settings, aliases=aliases)
        if not plans:
            return None
        metrics = CascadeMetrics(shared.registry)
        shadows = None
        if settings.shadowed:
            shadows = Shadows.build(settings.shadow, shared=shared, metrics=metrics.shadows)
        return partial(cls, plans=plans, metrics=metrics, shadows=shadows)

    def __init__(
        self,
        inner: Service,
        *,
        plans: Plans,
        metrics: CascadeMetrics,
        shadows: Shadows | None = None,
    ) -> None:
        self._inner = inner
        self._plans = plans
        self._metrics = metrics
        self._shadows = shadows  # None: no cascade shadows its answers
        if shadows is not None:
            shadows.bind(inner)

    def __call__(self, call: Call) -> Answer:
        plan = self._plans.find(call.model)
        if plan is None:
            return self._inner(call)
        return self._cascaded(call, plan)

    async def _cascaded(self, call: Call, plan: Plan) -> Reply:
        if call.kind != "chat":
            raise BadRequest("Cascades serve chat completions only.", param="model")
        if call.body.get("n") not in (None, 1):
            raise BadRequest("A cascade judges one answer: 'n' must be 1.", param="n")
        try:
            return await self._run(call, plan)
        except LevergateError:
            self._metrics.requests.labels(plan.label, "failed", "").inc()
            raise

    async def _run(self, call: Call, plan: Plan) -> Reply:
        trace = call.ctx.trace
        paid: list[_Answer] = []  # every answer received, newest last
        why = ""
        for index, alias in enumerate(plan.steps):
            if index == len(plan.steps) - 1:
                return await self._last(call, plan, paid, why=why)
            try:
                answer = await self._buffered(call, plan, alias)
            except LevergateError as exc:
                if not _escalates(exc):
                    raise
                why = f"{alias} failed: {exc.code or type(exc).__name__}"
                self._escalate(call, plan, index, why="error", reason=why)
                continue
            paid.append(answer)
            verdict = await self._judged(call, plan, answer)
            if verdict.passed:
                self._decide(trace, plan, alias, f"accepted at {alias}: {verdict.reason}", verdict)
                if self._shadows is not None:
                    self._shadows.offer(call, plan, answer.reply.data, alias=alias)
                return self._deliver(call, plan, answer, paid, outcome=ACCEPTED)
            why = f"{alias} rejected by {verdict.signal}: {verdict.reason}"
            self._escalate(call, plan, index, why="check", reason=why)
        raise AssertionError("unreachable: the last step returns")  # pragma: no cover

    async def _last(self, call: Call, plan: Plan, paid: list[_Answer], *, why: str) -> Reply:
        """The strongest step, with the client's own body; its stream is passed through live."""
        trace, alias = call.ctx.trace, plan.strongest
        try:
            reply = await self._inner(call.with_body(model=alias))
            if isinstance(reply, Stream):
                reply = await reply.prime()
        except LevergateError as exc:
            if not paid:
                raise
            kept = paid[-1]
            trace.cascade_fallback = True
            reason = f"{why}; {alias} failed ({exc.code or type(exc).__name__})"
            self._decide(trace, plan, kept.alias, f"fallback to {kept.alias}: {reason}", None)
            return self._deliver(call, plan, kept, paid, outcome=FALLBACK)
        self._decide(trace, plan, alias, why, None)
        trace.side_spend.extend(a.spend("cascade") for a in paid)
        reply.headers[CASCADE_HEADER] = ESCALATED
        reply.headers[CASCADE_ALIAS_HEADER] = alias
        self._metrics.answered(plan.label, "escalated", alias)
        return reply

    async def _buffered(self, call: Call, plan: Plan, alias: str) -> _Answer:
        body = {k: v for k, v in call.body.items() if k not in ("stream", "stream_options")}
        body["model"] = alias
        if plan.logprobs and not body.get("logprobs"):
            body["logprobs"] = True
        # An upstream that streams anyway: judged whole.
        reply = await whole(await self._inner(_derived(call, body)))
        trace = call.ctx.trace
        return _Answer(alias, reply, trace.upstream, trace.upstream_model)

    async def _judged(self, call: Call, plan: Plan, answer: _Answer) -> Verdict:
        """Every check in order; the first that fails decides. Metrics see each score."""
        verdict = Verdict("none", passed=True)
        for signal in plan.signals:
            if isinstance(signal, JudgeSettings):
                verdict = await self._judge(call, signal, answer)
            else:
                verdict = signal(answer.reply.data)
            result = "pass" if verdict.passed else "fail"
            self._metrics.checks.labels(plan.label, verdict.signal, result).inc()
            if verdict.score is not None:
                self._metrics.confidence.labels(plan.label, verdict.signal).observe(verdict.score)
            if not verdict.passed:
                return verdict
        return verdict

    async def _judge(self, call: Call, judge: JudgeSettings, answer: _Answer) -> Verdict:
        """A real call to the judge's alias; a judge that fails or gives no score fails the
        check (escalate: the safe direction). Its usage is a side spend whatever it said."""
        text = answer_text(answer.reply.data)
        if text is None:
            return Verdict.failed("judge", "no text to judge")
        messages = judge_messages(call.body["messages"], text, max_chars=judge.max_chars)
        body = {"model": judge.alias, "messages": messages, "max_tokens": judge.max_tokens,
                "temperature": 0}  # fmt: skip
        try:
            reply = await whole(await self._inner(_derived(call, body)))
        except LevergateError as exc:
            if not _escalates(exc):
                raise
            return Verdict.failed("judge", f"the judge failed: {type(exc).__name__}")
        call.ctx.trace.side_spend.append(spent(judge.alias, "judge", reply.usage))
        return judge_verdict(answer_text(reply.data), threshold=judge.threshold)

    def _deliver(
        self, call: Call, plan: Plan, answer: _Answer, paid: list[_Answer], *, outcome: str
    ) -> Reply:
        """A buffered answer as the client asked for it: whole, or replayed as a stream."""
        trace = call.ctx.trace
        trace.alias, trace.upstream = answer.alias, answer.upstream
        trace.upstream_model = answer.upstream_model
        trace.side_spend.extend(a.spend("cascade") for a in paid if a is not answer)
        self._metrics.answered(plan.label, outcome.replace("-", "_"), answer.alias)
        headers = {**answer.reply.headers, CASCADE_HEADER: outcome,
                   CASCADE_ALIAS_HEADER: answer.alias}  # fmt: skip
        data = answer.reply.data
        stripped = plan.logprobs and not call.body.get("logprobs")
        if stripped:
            data = _without_logprobs(data)
        if call.stream:
            return as_stream("chat", data, headers=headers)
        if not stripped:
            return Completed(answer.reply.raw, data=data, status=answer.reply.status,
                             headers=headers)  # fmt: skip
        return Completed(data=data, status=answer.reply.status, headers=headers)

    def _decide(
        self, trace: Trace, plan: Plan, chosen: str, reason: str, verdict: Verdict | None
    ) -> None:
        score = verdict.score if verdict is not None else None
        trace.route = RouteDecision(
            router="cascade", asked=plan.name, chosen=chosen, default=plan.strongest,
            reason=reason[:500], score=score,
        )  # fmt: skip

    def _escalate(self, call: Call, plan: Plan, index: int, *, why: str, reason: str) -> None:
        trace = call.ctx.trace
        trace.escalations += 1
        here, then = plan.steps[index], plan.steps[index + 1]
        trace.escalation_reasons.append(reason[:500])  # the record's reasons, in order
        self._metrics.escalations.labels(plan.label, here, then, why).inc()


def _escalates(exc: LevergateError) -> bool:
    """An upstream failure moves on to the next step; a passed deadline leaves no time to."""
    if isinstance(exc, UpstreamTimeout):
        return exc.code != "deadline_exceeded"
    return isinstance(exc, UpstreamError) or exc.http_status >= 500


def _derived(call: Call, body: dict[str, Any]) -> Call:
    return Call(kind="chat", body=body, ctx=call.ctx)


def _without_logprobs(data: Mapping[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list):
        return dict(data)
    return {**data, "choices": [{**c, "logprobs": None} if isinstance(c, dict) else c
                                for c in choices]}  # fmt: skip

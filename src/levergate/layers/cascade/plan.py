"""`Plans`: which cascade a model name asks for, resolved and checked before any call is made.

A named cascade's plan is built at start-up (its steps were checked by `Settings`); a
`cascade:a>b` name is parsed per request, and every way it can be wrong is the client's 400:
one step, more than `cascade.max_steps`, an empty or repeated step, a step that is not a
configured alias (the `*` catch-all does not count: a cascade never sends a name nobody
configured to whatever the wildcard reaches), an over-long name. Each plan carries its compiled
signals (policies/confidence.py), whether they need the upstream's logprobs, and how its
accepted answers are shadowed (`cascade.shadow`, or the named cascade's own).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from levergate.config import WILDCARD
from levergate.config.cascade import (
    CASCADE_PREFIX,
    STEP_SEPARATOR,
    CascadeSettings,
    Check,
    JudgeSettings,
    NamedCascadeSettings,
)
from levergate.config.shadow import ShadowSamplingSettings
from levergate.errors import BadRequest
from levergate.policies.confidence import Signal, compile_check, needs_logprobs

# Longer model names are refused before they are split (a name is client-controlled).
MAX_NAME_CHARS = 1024
OTHER = "other"


@dataclass(frozen=True, slots=True)
class Plan:
    name: str  # what the client asked for: the named cascade, or the `cascade:` name
    label: str  # its metric label (bounded: see `Plans.label`)
    steps: tuple[str, ...]
    signals: tuple[Signal | JudgeSettings, ...]
    logprobs: bool  # the signals read token logprobs: ask the upstream for them
    shadow: ShadowSamplingSettings  # which accepted answers the strongest step answers again

    @property
    def strongest(self) -> str:
        return self.steps[-1]


class Plans:
    def __init__(self, settings: CascadeSettings, *, aliases: Collection[str]) -> None:
        self._ad_hoc = settings.ad_hoc
        self._max_steps = settings.max_steps
        self._aliases = frozenset(aliases) - {WILDCARD}
        self._checks = tuple(compile_check(c) for c in settings.checks)
        self._logprobs = needs_logprobs(settings.checks)
        self._shadow = settings.sampling(None)
        self._named = {c.name: _plan(c, settings.sampling(c)) for c in settings.cascades}
        self._max_labels = settings.max_metric_names
        self._labels: set[str] = set()

    def __bool__(self) -> bool:
        return self._ad_hoc or bool(self._named)

    def find(self, model: str) -> Plan | None:
        """The plan `model` names, None when it names no cascade; BadRequest for a bad name."""
        named = self._named.get(model)
        if named is not None:
            return named
        if not model.startswith(CASCADE_PREFIX):
            return None
        if not self._ad_hoc:
            raise BadRequest(
                "'cascade:' model names are turned off here; use a named cascade.",
                param="model",
                code="invalid_cascade",
            )
        steps = self._steps(model)
        return Plan(model, self.label(model), steps, self._checks, self._logprobs, self._shadow)

    def label(self, name: str) -> str:
        """`name` as a metric label: the first `max_metric_names` names each get their own."""
        if name in self._labels:
            return name
        if len(self._labels) >= self._max_labels:
            return OTHER
        self._labels.add(name)
        return name

    def _steps(self, model: str) -> tuple[str, ...]:
        if len(model) > MAX_NAME_CHARS:
            raise _bad(f"a cascade name may be at most {MAX_NAME_CHARS} characters")
        steps = tuple(model[len(CASCADE_PREFIX) :].split(STEP_SEPARATOR))
        if len(steps) < 2:
            raise _bad("a cascade needs at least two steps: 'cascade:cheap>strong'")
        if len(steps) > self._max_steps:
            raise _bad(f"a cascade may have at most {self._max_steps} steps, not {len(steps)}")
        for step in steps:
            if not step:
                raise _bad("a cascade step is empty: name steps as 'cascade:cheap>strong'")
            if step not in self._aliases:
                raise _bad(
                    f"unknown model alias {step[:128]!r} in the cascade", code="model_not_found"
                )
        if len(set(steps)) != len(steps):
            raise _bad("a cascade names the same model twice")
        return steps


def _plan(named: NamedCascadeSettings, shadow: ShadowSamplingSettings) -> Plan:
    checks: Sequence[Check] = named.checks
    signals = tuple(compile_check(c) for c in checks)
    steps = tuple(named.steps)
    return Plan(named.name, named.name, steps, signals, needs_logprobs(checks), shadow)


def _bad(message: str, *, code: str = "invalid_cascade") -> BadRequest:
    return BadRequest(f"Invalid cascade model name: {message}.", param="model", code=code)

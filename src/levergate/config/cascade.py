"""Cascades: a cheap model answers first, a stronger one only when a confidence check fails.

Two ways to ask for one (layers/cascade.py serves both):

    model: "cascade:small>large"         steps named in the request, checked with `checks`
    cascades: [{name: "qa", steps: [small, large], checks: [...]}]     a named cascade

Each step must be a configured model alias (not the `*` catch-all: a cascade that names a model
nobody configured is refused, never sent silently to whatever the wildcard reaches). Checks run
in order on a step's answer; the first that fails escalates to the next step. A check is one of:

    {kind: mean_logprob, threshold: -0.5}    mean token logprob of the answer >= threshold
    {kind: min_logprob, threshold: -4.0}     its least likely token >= threshold
    {kind: json}                             the answer parses as JSON
    {kind: json_schema, schema: {...}}       ... and validates against the schema (jsonschema)
    {kind: regex, pattern: "...", full: false}   the answer matches (search, or fullmatch)
    {kind: confidence_field, field: confidence, threshold: 0.7}   a self-reported score in [0, 1]
    {kind: judge, alias: judge-model, threshold: 0.7}   another alias scores it in [0, 1]

The logprob defaults are starting points, not measurements of any one model: a model's logprobs
depend on its tokenizer and sampling, so tune the threshold on your own traffic
(`benchmarks/cascade.py` shows the escalation-quality trade-off it controls).

Shadow sampling measures what the checks cost in quality (layers/cascade/shadow.py; the settings
are config/shadow.py's, shared with routes): a share of the accepted cheap answers is answered
again, off the request path, by the cascade's strongest step, and the two answers are compared.
Off by default (`rate: 0`); every shadow call is paid for
(`levergate_spend_usd{kind="shadow"}`).

    shadow: {rate: 0.05, compare: normalized}       the `cascade:` names and the default for all
    shadow: {rate: 0.2, compare: judge, judge: judge-model}     or on one named cascade
    shadow: {queue: 256, concurrency: 2, timeout_seconds: 120}  the one queue (cascade level)

`compare: normalized` agrees when the texts are equal once case, spacing and surrounding
punctuation are ignored, or both end on the same choice letter / number (policies/shadow.py);
`compare: judge` asks another alias whether the two answers are equivalent, which suits open-ended
text. A named cascade's `shadow` replaces the cascade-level sampling (rate, compare, judge) whole.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from levergate.config.base import WILDCARD, _Strict
from levergate.config.shadow import ShadowSamplingSettings, ShadowSettings, unknown_judge

CASCADE_PREFIX = "cascade:"
STEP_SEPARATOR = ">"


class MeanLogprobSettings(_Strict):
    kind: Literal["mean_logprob"] = "mean_logprob"
    # exp(-0.5) ~ 0.61 geometric-mean token probability.
    threshold: float = Field(-0.5, le=0)


class MinLogprobSettings(_Strict):
    kind: Literal["min_logprob"] = "min_logprob"
    # exp(-4) ~ 0.018: one token the model itself found this unlikely.
    threshold: float = Field(-4.0, le=0)


class MustParseSettings(_Strict):
    kind: Literal["json"] = "json"


class JsonSchemaSettings(_Strict):
    kind: Literal["json_schema"] = "json_schema"
    json_schema: dict[str, Any] = Field(alias="schema")

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        from levergate.policies.confidence import check_schema

        check_schema(schema)  # a broken schema is a start-up error, not a 500 per request
        return schema


class RegexSettings(_Strict):
    kind: Literal["regex"] = "regex"
    pattern: str = Field(min_length=1, max_length=4096)
    full: bool = False  # True: the whole answer must match (re.fullmatch), else re.search

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
        return pattern


class ConfidenceFieldSettings(_Strict):
    kind: Literal["confidence_field"] = "confidence_field"
    field: str = Field("confidence", min_length=1, max_length=64, pattern=r"^[A-Za-z_][\w-]*$")
    threshold: float = Field(0.7, ge=0, le=1)


class JudgeSettings(_Strict):
    kind: Literal["judge"] = "judge"
    alias: str = Field(min_length=1)
    threshold: float = Field(0.7, ge=0, le=1)  # the judge's score: a probability in [0, 1]
    max_tokens: int = Field(16, ge=1, le=1024)
    # The newest characters of the conversation (and of the answer) the judge is shown: a long
    # history would make every judge call cost as much as the strong model's.
    max_chars: int = Field(32_000, ge=256)


Check = Annotated[
    MeanLogprobSettings
    | MinLogprobSettings
    | MustParseSettings
    | JsonSchemaSettings
    | RegexSettings
    | ConfidenceFieldSettings
    | JudgeSettings,
    Field(discriminator="kind"),
]


class NamedCascadeSettings(_Strict):
    name: str = Field(min_length=1, max_length=128)
    steps: list[str] = Field(min_length=2)
    checks: list[Check] = Field(min_length=1)
    # None: the cascade-level `cascade.shadow` sampling.
    shadow: ShadowSamplingSettings | None = None

    @field_validator("name")
    @classmethod
    def _not_prefixed(cls, name: str) -> str:
        if name.startswith(CASCADE_PREFIX) or name == WILDCARD:
            raise ValueError(f"a named cascade may not be called {name!r}")
        return name


def _default_checks() -> list[Check]:
    return [MeanLogprobSettings()]


class CascadeSettings(_Strict):
    """`cascade:` model names and named cascades (see the module docstring)."""

    # `cascade:` names are accepted (False: only named cascades).
    ad_hoc: bool = True
    # The most steps one cascade may have: each is a model call that may be paid for.
    max_steps: int = Field(4, ge=2, le=8)
    # What a `cascade:` name is checked with (a named cascade lists its own).
    checks: list[Check] = Field(default_factory=_default_checks, min_length=1)
    cascades: list[NamedCascadeSettings] = Field(default_factory=list)
    # Distinct `cascade:` names given their own metric labels; later ones share "other".
    max_metric_names: int = Field(50, ge=1)
    # Quality measured: accepted answers shadowed by the strongest step (off by default).
    shadow: ShadowSettings = Field(default_factory=ShadowSettings)

    @model_validator(mode="after")
    def _steps_bounded(self) -> CascadeSettings:
        for named in self.cascades:
            if len(named.steps) > self.max_steps:
                raise ValueError(
                    f"cascade {named.name!r} has {len(named.steps)} steps; "
                    f"cascade.max_steps is {self.max_steps}"
                )
        names = [c.name for c in self.cascades]
        if len(names) != len(set(names)):
            raise ValueError("cascade names must be unique")
        return self

    @property
    def enabled(self) -> bool:
        return self.ad_hoc or bool(self.cascades)

    def sampling(self, named: NamedCascadeSettings | None) -> ShadowSamplingSettings:
        """The shadow sampling of `named` (None: of the `cascade:` names)."""
        if named is not None and named.shadow is not None:
            return named.shadow
        return self.shadow

    @property
    def shadowed(self) -> bool:
        """Some cascade shadows its accepted answers (the shadow queue is needed)."""
        rates = [self.shadow.rate if self.ad_hoc else 0.0]
        rates += [self.sampling(c).rate for c in self.cascades]
        return any(rate > 0 for rate in rates)


def check_references(settings: CascadeSettings, aliases: Collection[str]) -> None:
    """Every step and judge of a named cascade, and every judge of the `cascade:` checks, is a
    configured alias; a named cascade does not shadow one. Raises ValueError (Settings makes it
    a start-up `ConfigError` naming the cascade)."""
    known = set(aliases) - {WILDCARD}
    for judge in _judges(settings.checks):
        if judge.alias not in known:
            raise ValueError(f"cascade.checks: unknown judge alias {judge.alias!r}")
    if (unknown := unknown_judge(settings.shadow, known)) is not None:
        raise ValueError(f"cascade.shadow: unknown judge alias {unknown!r}")
    for named in settings.cascades:
        if named.name in known:
            raise ValueError(f"cascade {named.name!r} has the name of a model alias")
        for step in named.steps:
            if step not in known:
                raise ValueError(f"cascade {named.name!r}: unknown model alias {step!r}")
        if len(set(named.steps)) != len(named.steps):
            raise ValueError(f"cascade {named.name!r} names a step twice")
        for judge in _judges(named.checks):
            if judge.alias not in known:
                raise ValueError(f"cascade {named.name!r}: unknown judge alias {judge.alias!r}")
        if (shadow := unknown_judge(named.shadow, known)) is not None:
            raise ValueError(f"cascade {named.name!r}: unknown shadow judge alias {shadow!r}")


def _judges(checks: list[Check]) -> list[JudgeSettings]:
    return [c for c in checks if isinstance(c, JudgeSettings)]

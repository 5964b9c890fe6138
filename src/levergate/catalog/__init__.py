"""The model catalog: each model alias's resolved `ModelSpec` — prices, context window, output
cap, tokenizer, capabilities — built once per pipeline (`Shared.catalog`).

Where it is read: the cost ledger prices every answer at `Catalog.rates(alias, model)` (the
alias that answered; for `*` the model name it was sent under); trimming reads an alias's
`context_window` and `max_output`, routers and cascades its prices and capabilities, through
`Catalog.spec(alias)`. A model's service tiers (flex, priority; policies/tiers.py) have rates of
their own where the provider sells them (`Catalog.tier_rates`): the ledger prices an answer at
the tier its `service_tier` says served it, the Tiers layer chooses only among priced tiers.

Three levels, each overriding the one below field by field (`config.catalog`): the built-in
table shipped in this package (`models.yaml`, dated, sources named; read from the package, never
fetched), the settings' `catalog:` entries, and an alias's own `price`. An alias finds its entry
by `catalog:` if set, else by its `upstream_model`, else by its name (a `provider/` prefix, a
dated suffix and `-latest` are ignored). Start-up errors (`ConfigError`): an alias naming an
entry that does not exist; an entry an alias uses that ends up without prices; a price with
only one of `input` / `output`. An alias with no entry and no price is unpriced (it costs
nothing, e.g. a self-hosted model) and is named once in the log at start-up.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from levergate.config.base import WILDCARD
from levergate.config.catalog import CatalogEntrySettings, PriceSettings, TierPriceSettings
from levergate.errors import ConfigError
from levergate.policies.pricing import FREE, Rates
from levergate.policies.tiers import Tier

if TYPE_CHECKING:
    from levergate.config import ModelSettings, Settings

__all__ = ["Abilities", "Catalog", "ModelSpec", "builtin_entries", "builtin_meta"]

log = logging.getLogger("levergate.catalog")

BUILTIN_FILE = "models.yaml"
NO_TIERS: Mapping[Tier, Rates] = MappingProxyType({})
_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


@dataclass(frozen=True, slots=True)
class Abilities:
    tools: bool = False
    vision: bool = False
    json_mode: bool = False
    logprobs: bool = False


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One alias's model as the catalog resolved it. `name` is the catalog entry ("" for an
    alias with none); `price` is None for an unpriced alias; limits None when unknown."""

    name: str = ""
    provider: str | None = None
    price: Rates | None = None
    context_window: int | None = None
    max_output: int | None = None
    tokenizer: str | None = None
    capabilities: Abilities = Abilities()
    # The rates of the service tiers the provider sells this model at (flex, priority).
    tiers: Mapping[Tier, Rates] = field(default_factory=lambda: NO_TIERS)
    fine_tuning: float | None = None  # US dollars per million training tokens

    @property
    def rates(self) -> Rates:
        return FREE if self.price is None else self.price

    @property
    def priced(self) -> bool:
        return self.price is not None


UNKNOWN = ModelSpec()


def builtin_meta() -> dict[str, Any]:
    """The built-in table's date and sources."""
    data = _builtin_data()
    return {"checked": str(data.get("checked", "")), "sources": dict(data.get("sources", {}))}


def builtin_entries() -> Mapping[str, CatalogEntrySettings]:
    return _builtin_entries()


@functools.cache
def _builtin_data() -> dict[str, Any]:
    text = files(__package__).joinpath(BUILTIN_FILE).read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader, C or Python)
    return data if isinstance(data, dict) else {}


@functools.cache
def _builtin_entries() -> Mapping[str, CatalogEntrySettings]:
    """Parsed once per process: the file is part of the package, immutable, and the entries
    are frozen models behind a read-only mapping."""
    raw = _builtin_data().get("models") or {}
    try:
        entries = {str(name): CatalogEntrySettings.model_validate(v) for name, v in raw.items()}
    except ValidationError as exc:  # a packaging bug; a test validates the shipped file
        raise ConfigError(f"built-in catalog {BUILTIN_FILE} is invalid: {exc}") from None
    return MappingProxyType(entries)


def _names(name: str) -> Iterator[str]:
    """The names a model may be found under, most specific first."""
    name = name.strip().lower()
    yield name
    base = name.rsplit("/", 1)[-1]
    yield base
    yield _SUFFIX.sub("", base)


def _resolved(price: PriceSettings, *, what: str) -> Rates:
    if price.input is None or price.output is None:
        missing = " and ".join(f for f in ("input", "output") if getattr(price, f) is None)
        raise ConfigError(f"{what}: price needs {missing} (use 0 for a bucket that is free)")
    write = price.input if price.cache_write is None else price.cache_write
    return Rates(
        input=price.input,
        output=price.output,
        cache_read=price.input if price.cache_read is None else price.cache_read,
        cache_write=write,
        cache_write_1h=write if price.cache_write_1h is None else price.cache_write_1h,
        batch_discount=price.batch_discount or 0.0,
    )


def _tier_rates(price: PriceSettings, rates: Rates | None, *, what: str) -> Mapping[Tier, Rates]:
    """The flex and priority rates of a resolved price (none for an unpriced model)."""
    if rates is None:
        return NO_TIERS
    found = {}
    for tier in (Tier.FLEX, Tier.PRIORITY):
        tier_price: TierPriceSettings | None = getattr(price, tier.value)
        if tier_price is not None:
            found[tier] = _tier_resolved(tier_price, rates, what=f"{what} ({tier.value} tier)")
    return MappingProxyType(found)


def _tier_resolved(price: TierPriceSettings, base: Rates, *, what: str) -> Rates:
    if price.input is None or price.output is None:
        missing = " and ".join(f for f in ("input", "output") if getattr(price, f) is None)
        raise ConfigError(f"{what}: price needs {missing}")
    scale = price.input / base.input if base.input else 1.0
    return Rates(
        input=price.input,
        output=price.output,
        cache_read=base.cache_read * scale if price.cache_read is None else price.cache_read,
        cache_write=base.cache_write * scale,
        cache_write_1h=base.cache_write_1h * scale,
    )


def _spec(
    name: str, entry: CatalogEntrySettings, price: Rates | None,
    tiers: Mapping[Tier, Rates] = NO_TIERS,
) -> ModelSpec:  # fmt: skip
    c = entry.capabilities
    return ModelSpec(
        name=name,
        provider=entry.provider,
        price=price,
        context_window=entry.context_window,
        max_output=entry.max_output,
        tokenizer=entry.tokenizer,
        capabilities=Abilities(
            tools=bool(c.tools),
            vision=bool(c.vision),
            json_mode=bool(c.json_mode),
            logprobs=bool(c.logprobs),
        ),
        tiers=tiers,
        fine_tuning=entry.fine_tuning,
    )


class Catalog:
    """The resolved specs of a pipeline's aliases, and look-ups of any model by name."""

    def __init__(
        self,
        *,
        entries: Mapping[str, CatalogEntrySettings],
        models: Sequence[ModelSettings] = (),
    ) -> None:
        self._entries = dict(entries)
        self._index: dict[str, str] = {}
        for name, entry in self._entries.items():
            for known in (name, *entry.aliases):
                self._index.setdefault(known.lower(), name)
        self._specs: dict[str, ModelSpec] = {}
        self._wildcard_price = PriceSettings()
        for model in models:
            if model.name == WILDCARD:
                self._wildcard_price = model.price
            self._specs[model.name] = self._resolve(model)
        self._rates = {alias: spec.rates for alias, spec in self._specs.items()}
        self._fallback = self._specs.get(WILDCARD, UNKNOWN)
        # Names met behind `*`, resolved once. Only names that find an entry are kept, and at
        # most `_dynamic_cap` of them: clients can spell one entry many ways ("x/gpt-4o",
        # dated suffixes), and a name past the cap is just looked up again.
        self._dynamic: dict[str, Rates] = {}
        self._dynamic_cap = 4 * len(self._entries) + 64
        # Names that found none (a local or unlisted model behind `*`: the fallback's rates),
        # kept apart, under the same cap, so a client's made-up names never crowd out the
        # entries' spellings: otherwise each was looked up under three spellings a request.
        self._unlisted: set[str] = set()

    @classmethod
    def build(cls, settings: Settings) -> Catalog:
        """The pipeline's catalog: built-in table, then `settings.catalog`, then alias prices."""
        base = dict(builtin_entries()) if settings.ledger.builtin_catalog else {}
        merged = dict(base)
        for name, entry in settings.catalog.items():
            found = next((n for n in _names(name) if n in base), None)
            merged[name] = entry.over(base[found]) if found else entry
        catalog = cls(entries=merged, models=settings.models)
        unpriced = [a for a, s in catalog._specs.items() if not s.priced and a != WILDCARD]
        if unpriced:
            log.info("catalog: unpriced model aliases (they cost $0): %s", ", ".join(unpriced))
        return catalog

    @classmethod
    def builtin(cls) -> Catalog:
        """The built-in table alone, every model priced by its own entry: for pricing answers
        away from any gateway's config (`levergate batch run --url`)."""
        return cls(entries=builtin_entries())

    @classmethod
    def of_prices(cls, prices: Mapping[str, PriceSettings]) -> Catalog:
        """Aliases priced by their own `PriceSettings` alone, no table: for tests and for library
        callers who price outside the settings."""
        from levergate.config import ModelSettings

        models = [ModelSettings(name=n, upstream="-", price=p) for n, p in prices.items()]
        return cls(entries={}, models=models)

    def lookup(self, name: str) -> tuple[str, CatalogEntrySettings] | None:
        """A model's catalog entry by any of its names, or None."""
        for candidate in _names(name):
            found = self._index.get(candidate)
            if found is not None:
                return found, self._entries[found]
        return None

    def spec(self, alias: str) -> ModelSpec:
        """The alias's spec as resolved at build; for a name no alias has (sent behind `*`),
        the catalog's entry for it under the `*` alias's price."""
        found = self._specs.get(alias)
        if found is not None and alias != WILDCARD:
            return found
        entry = self.lookup(alias)
        if entry is None:
            return self._fallback
        name, value = entry
        price = self._wildcard_price.over(value.price)
        rates = None if price.empty else self._try(price)
        try:
            tiers = _tier_rates(price, rates, what=f"catalog entry {name!r}")
        except ConfigError:
            tiers = NO_TIERS  # met at run time with a partial tier price: none
        return _spec(name, value, rates, tiers)

    def rates(self, alias: str, model: str = "") -> Rates:
        """The rates an answer is charged at: the alias's, or for the `*` alias (and names no
        alias has) the catalog's for the model name it was sent under. On the request path."""
        found = self._rates.get(alias)
        if found is not None and alias != WILDCARD:
            return found
        name = model or alias
        cached = self._dynamic.get(name)
        if cached is not None:
            return cached
        if name in self._unlisted:
            return self._fallback.rates
        if self.lookup(name) is None:
            if len(self._unlisted) < self._dynamic_cap:
                self._unlisted.add(name)
            return self._fallback.rates
        rates = self.spec(name).rates
        if len(self._dynamic) < self._dynamic_cap:
            self._dynamic[name] = rates
        return rates

    def tier_rates(self, alias: str, tier: Tier, model: str = "") -> Rates | None:
        """The rates of `tier` for the alias (for `*`, the model it was sent under): the
        standard rates for standard, None for a tier with no price for it (batch: the
        standard rates' `batched()`, when the model has a batch discount)."""
        if tier is Tier.STANDARD:
            return self.rates(alias, model)
        if tier is Tier.BATCH:
            rates = self.rates(alias, model)
            return rates.batched() if rates.batch_discount else None
        name = model if alias == WILDCARD and model else alias
        return self.spec(name).tiers.get(tier)

    def table(self) -> list[tuple[str, CatalogEntrySettings]]:
        return sorted(self._entries.items())

    def _try(self, price: PriceSettings) -> Rates | None:
        try:
            return _resolved(price, what="catalog")
        except ConfigError:
            return None  # a name met at run time with a partial price: unpriced, not a crash

    def _resolve(self, model: ModelSettings) -> ModelSpec:
        what = f"model {model.name!r}"
        entry = self._entry_for(model)
        if entry is None:
            if model.price.empty:
                return ModelSpec()
            if model.name == WILDCARD:
                # Partial is fine here: it is laid over each model's entry met behind `*`.
                return ModelSpec(price=self._try(model.price))
            rates = _resolved(model.price, what=what)
            return ModelSpec(price=rates, tiers=_tier_rates(model.price, rates, what=what))
        name, value = entry
        merged = model.price.over(value.price)
        if merged.empty:
            raise ConfigError(
                f"{what}: its catalog entry {name!r} has no prices; set catalog.{name}.price "
                "(input and output) or the model's own price"
            )
        what = f"{what} (catalog entry {name!r})"
        rates = _resolved(merged, what=what)
        return _spec(name, value, rates, _tier_rates(merged, rates, what=what))

    def _entry_for(self, model: ModelSettings) -> tuple[str, CatalogEntrySettings] | None:
        if model.catalog is not None:
            found = self.lookup(model.catalog)
            if found is None:
                raise ConfigError(
                    f"model {model.name!r}: catalog entry {model.catalog!r} is not in the "
                    "catalog (add it under `catalog:`)"
                )
            return found
        if model.name == WILDCARD:
            return None
        names = [model.upstream_model, model.name, *(t.upstream_model for t in model.endpoints)]
        for name in names:
            if name and (found := self.lookup(name)) is not None:
                return found
        return None

"""The model catalog's settings: prices, windows, tokenizers and capabilities of models, and
the cost ledger's label bounds.

The built-in table ships inside the package (`levergate/catalog/models.yaml`, dated, with its
sources) and is read without any network. `catalog:` in the settings adds models or overrides
built-in ones FIELD BY FIELD (an entry that sets only `context_window` keeps the built-in
prices); a model alias's own `price` overrides its catalog entry's price the same way. Every
field here is optional for that reason: None means "not set at this level".

    catalog:
      my-finetune: {provider: openai, price: {input: 3.0, output: 12.0}, context_window: 128000}
      gpt-4o: {price: {input: 2.0}}          # a negotiated input price; the rest built in
    models:
      - {name: fast, upstream: openai, upstream_model: gpt-4o-mini}   # priced from the catalog
      - {name: local, upstream: vllm, catalog: llama-3.1-8b}          # an explicit entry
"""

from __future__ import annotations

from pydantic import AliasChoices, Field

from levergate.config.base import _Strict


class TierPriceSettings(_Strict):
    """A service tier's price where the provider sells one (policies/tiers.py): US dollars per
    million tokens, like the standard price. Unset `cache_read` keeps the standard price's
    discount on cached input (`cache_read / input`); cache writes likewise. Both `input` and
    `output` must end up set."""

    input: float | None = Field(None, ge=0)
    output: float | None = Field(None, ge=0)
    cache_read: float | None = Field(None, ge=0)

    def over(self, base: TierPriceSettings | None) -> TierPriceSettings:
        if base is None:
            return self
        mine = {k: v for k, v in self.model_dump().items() if v is not None}
        return base.model_copy(update=mine)


class PriceSettings(_Strict):
    """US dollars per million tokens; an unset field comes from the level below (the catalog
    entry, then the built-in table). Resolved: `cache_read` and `cache_write` default to
    `input` (no discount, no premium), `cache_write_1h` to `cache_write`, `batch_discount`
    to 0. `input` and `output` must both end up set (`output: 0` for an embedding model).
    `flex` and `priority` price those service tiers; a model without one is never sent at it
    (asked for explicitly, it is a 400 naming the tier and the model)."""

    input: float | None = Field(None, ge=0)
    output: float | None = Field(None, ge=0)
    # Provider prompt-cache reads ("cached input"). `cached_input` is the earlier name.
    cache_read: float | None = Field(
        None, ge=0, validation_alias=AliasChoices("cache_read", "cached_input")
    )
    # Prompt-cache writes: 5-minute TTL (Anthropic's default; OpenAI's when it bills them),
    # and 1-hour TTL where the provider distinguishes it.
    cache_write: float | None = Field(None, ge=0)
    cache_write_1h: float | None = Field(None, ge=0)
    # The share off every bucket through the provider's batch API (0.5 = half price).
    batch_discount: float | None = Field(None, ge=0, le=1)
    # Service tiers: OpenAI's flex (Batch API rates) and priority (a premium).
    flex: TierPriceSettings | None = None
    priority: TierPriceSettings | None = None

    def over(self, base: PriceSettings) -> PriceSettings:
        """This price's set fields over `base`'s (a tier's price field by field too)."""
        mine = {k: getattr(self, k) for k in type(self).model_fields
                if getattr(self, k) is not None}  # fmt: skip
        for tier in ("flex", "priority"):
            if tier in mine:
                mine[tier] = mine[tier].over(getattr(base, tier))
        return base.model_copy(update=mine)

    @property
    def empty(self) -> bool:
        return all(getattr(self, k) is None for k in type(self).model_fields)


class CapabilitiesSettings(_Strict):
    """What a model accepts; None inherits (and ends as False)."""

    tools: bool | None = None
    vision: bool | None = None
    json_mode: bool | None = None
    logprobs: bool | None = None

    def over(self, base: CapabilitiesSettings) -> CapabilitiesSettings:
        mine = {k: v for k, v in self.model_dump().items() if v is not None}
        return base.model_copy(update=mine)


class CatalogEntrySettings(_Strict):
    """One model: its provider, prices, limits, tokenizer and capabilities."""

    provider: str | None = Field(None, max_length=64)
    price: PriceSettings = Field(default_factory=PriceSettings)
    context_window: int | None = Field(None, ge=1)
    max_output: int | None = Field(None, ge=1)
    # A tiktoken encoding name (`o200k_base`), `hf:<repo or file>` for a Hugging Face
    # tokenizer, or `none` for a model without a public tokenizer (counts are estimates).
    tokenizer: str | None = Field(None, max_length=200)
    capabilities: CapabilitiesSettings = Field(default_factory=CapabilitiesSettings)
    # Other names the provider accepts for the model (dated snapshots). Dated suffixes
    # (`-2024-08-06`, `-20250929`) and `-latest` are also stripped when a name is looked up.
    aliases: tuple[str, ...] = ()
    # Fine-tuning a model on it: US dollars per million training tokens (tokens x epochs), as
    # `levergate log export --format openai-finetune` estimates a distillation's cost.
    fine_tuning: float | None = Field(None, ge=0)

    def over(self, base: CatalogEntrySettings) -> CatalogEntrySettings:
        """This entry's set fields over `base`'s, field by field (prices and capabilities too)."""
        return CatalogEntrySettings(
            provider=self.provider or base.provider,
            price=self.price.over(base.price),
            context_window=self.context_window or base.context_window,
            max_output=self.max_output or base.max_output,
            tokenizer=self.tokenizer or base.tokenizer,
            capabilities=self.capabilities.over(base.capabilities),
            aliases=(*base.aliases, *self.aliases),
            fine_tuning=base.fine_tuning if self.fine_tuning is None else self.fine_tuning,
        )


class LedgerSettings(_Strict):
    """The cost ledger's `/metrics` series: spend and savings by lever, model, tenant and
    feature. Tenants (and features, and model names behind `*`) are client-influenced, so each
    label keeps at most `max_label_values` distinct values (later ones are `other`), and the
    (model, tenant, feature) combinations at most `max_label_sets` (later ones are all
    `other`): with 9 levers that bounds the savings series at 9 x max_label_sets."""

    enabled: bool = True
    max_label_values: int = Field(100, ge=1)
    max_label_sets: int = Field(1000, ge=1)
    # Read the built-in table (levergate/catalog/models.yaml); off, only `catalog:` entries
    # and alias prices count.
    builtin_catalog: bool = True

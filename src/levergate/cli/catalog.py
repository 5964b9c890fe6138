"""`levergate catalog`: the model catalog as this configuration resolves it.

levergate catalog                          # the built-in table (date and sources first)
levergate catalog --config levergate.yaml  # with `catalog:` overrides, and each alias's spec
levergate catalog --json                   # the same, as JSON

Start-up errors of the catalog (an entry without prices an alias uses, an unknown entry) are
reported here as they would be by `levergate serve`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from levergate.catalog import Catalog, ModelSpec, builtin_meta
from levergate.cli.commands import SUMMARY
from levergate.config import Settings
from levergate.config.catalog import CatalogEntrySettings, TierPriceSettings


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("catalog", help=SUMMARY["catalog"])
    parser.add_argument("--config", help="YAML settings file (its `catalog:` and models)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _tier(price: TierPriceSettings | None) -> str:
    """A tier's price as `input/output`, `-` when the model is not sold at it."""
    if price is None:
        return "-"
    return f"{_money(price.input)}/{_money(price.output)}"


def _row(name: str, entry: CatalogEntrySettings) -> list[str]:
    p = entry.price
    return [
        name,
        entry.provider or "-",
        _money(p.input),
        _money(p.output),
        _money(p.cache_read),
        _money(p.cache_write),
        _money(p.cache_write_1h),
        _money(p.batch_discount),
        _tier(p.flex),
        _tier(p.priority),
        str(entry.context_window or "-"),
        str(entry.max_output or "-"),
        entry.tokenizer or "-",
    ]


HEAD = ["model", "provider", "input", "output", "cache read", "write 5m", "write 1h", "batch",
        "flex", "priority", "context", "max out", "tokenizer"]  # fmt: skip


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEAD, *rows]) for i in range(len(HEAD))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [HEAD, *rows]]
    return "\n".join(line.rstrip() for line in lines)


def _spec(spec: ModelSpec) -> dict[str, Any]:
    return {
        "catalog": spec.name or None,
        "provider": spec.provider,
        "price": spec.price._asdict() if spec.price is not None else None,
        "tiers": {tier.value: rates._asdict() for tier, rates in spec.tiers.items()},
        "context_window": spec.context_window,
        "max_output": spec.max_output,
        "tokenizer": spec.tokenizer,
        "capabilities": {
            "tools": spec.capabilities.tools,
            "vision": spec.capabilities.vision,
            "json_mode": spec.capabilities.json_mode,
            "logprobs": spec.capabilities.logprobs,
        },
    }


def run(args: argparse.Namespace) -> int:
    settings = Settings.load(args.config) if args.config else Settings()
    catalog = Catalog.build(settings)
    aliases = {m.name: _spec(catalog.spec(m.name)) for m in settings.models}
    meta = builtin_meta()
    if args.json:
        entries = {n: e.model_dump(exclude_none=True) for n, e in catalog.table()}
        print(json.dumps({**meta, "models": entries, "aliases": aliases}, indent=2))
        return 0
    print(f"built-in prices checked {meta['checked']}; $ per million tokens")
    for provider, url in meta["sources"].items():
        print(f"  {provider}: {url}")
    print()
    print(_table([_row(n, e) for n, e in catalog.table()]))
    for alias, spec in aliases.items():
        price = spec["price"]
        priced = "unpriced" if price is None else f"in {price['input']:g} out {price['output']:g}"
        print(f"alias {alias}: {spec['catalog'] or '(no entry)'}, {priced}, "
              f"context {spec['context_window'] or '-'}")  # fmt: skip
    return 0

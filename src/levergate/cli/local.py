"""`levergate local quantize`: build a local model's quantization levels into the cache ahead of
time (the gateway otherwise builds its configured level at the first start).

levergate local quantize                          # the bundled model at the default level
levergate local quantize --level q4_k_m q5_k_m    # several levels
levergate local quantize --level all              # every level the source can give
levergate local quantize --list                   # which levels the source can give, and why not
levergate local quantize --model m.gguf --cache-dir /srv/cache

Prints one line per level: the file, its size, its SHA-256 (what every start checks) and the
real mix of tensor types (K-quants fall back on matrices whose rows do not fit their blocks).
A level the source cannot give exits with status 2 and names the levels it can.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from levergate.cli.commands import SUMMARY
from levergate.config import LocalUpstreamSettings
from levergate.errors import ConfigError

DEFAULTS = LocalUpstreamSettings()


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("local", help=SUMMARY["local"])
    commands = parser.add_subparsers(dest="local_command", required=True)
    quantize = commands.add_parser("quantize", help="build quantization levels into the cache")
    quantize.add_argument("--model", default=DEFAULTS.model_path,
                          help="source GGUF file (default: the bundled SmolLM2)")  # fmt: skip
    quantize.add_argument("--level", nargs="+", default=[DEFAULTS.requantize],
                          help="levels to build, or 'all' (default: %(default)s)")  # fmt: skip
    quantize.add_argument("--cache-dir", default=DEFAULTS.cache_dir,
                          help="where built files are kept (default: %(default)s)")  # fmt: skip
    quantize.add_argument("--threads", type=int, default=None, help="quantizer threads")
    quantize.add_argument("--list", action="store_true", help="list the levels and exit")
    quantize.set_defaults(func=run_quantize)


def run_quantize(args: argparse.Namespace) -> int:
    from levergate.upstreams.local import quantize
    from levergate.upstreams.local.gguf import read_gguf
    from levergate.upstreams.local.model import checked_source

    source = checked_source(
        LocalUpstreamSettings(name="cli", model_path=args.model, requantize="off")
    )
    where = f"levergate local quantize: {source.name}"
    info = read_gguf(source, where=where)
    if args.list:
        print(_listing(info, source))
        return 0
    levels = quantize.producible(info) if args.level == ["all"] else args.level
    for level in levels:
        if level not in quantize.LEVELS:
            raise ConfigError(f"unknown level {level!r}: one of {', '.join(quantize.LEVELS)}")
        quantize.check_level(info, level, source=source, where=where)
    cache_dir = Path(args.cache_dir).expanduser()
    for level in levels:
        if info.weight_type == quantize.LEVEL_TYPES[level]:
            print(f"{level}: {source} (the source already is {level})")
            continue
        target = quantize.target_path(source, level, cache_dir)
        try:
            if quantize.verified(target):
                built = quantize.recorded(target)
            else:
                built = quantize.build(source, level, target, threads=args.threads)
        except OSError as exc:
            raise ConfigError(f"{where}: building {level} in {cache_dir} failed: {exc}") from None
        mix = ", ".join(f"{n} {t}" for t, n in sorted(built.types.items(), key=lambda i: -i[1]))
        print(f"{level}: {built.path}\n  {built.size:,} bytes, sha256 {built.sha256}")
        print(f"  tensors: {mix}")
    return 0


def _listing(info: Any, source: Path) -> str:
    from levergate.upstreams.local import quantize

    share = quantize.k_share(info)
    lines = [f"{source.name}: weights in {info.weight_type}, {share:.0%} in K-quant-sized rows"]
    for level in quantize.LEVELS:
        reason = quantize.refusal(info, level)
        lines.append(f"  {level:7} {'yes' if reason is None else 'no: ' + reason}")
    return "\n".join(lines)

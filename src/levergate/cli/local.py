"""`levergate local quantize`: build a local model's quantization levels into the cache ahead of
time (the gateway otherwise builds its configured level at the first start).

levergate local quantize                          # the bundled model at the default level
levergate local quantize --level q4_k_m q5_k_m    # several levels
levergate local quantize --level all              # every level the source can give
levergate local quantize --list                   # which levels the source can give, and why not
levergate local quantize --model m.gguf --cache-dir /srv/cache

Prints one line per level: the file, its size, its SHA-256 (what every start checks) and the
real mix of tensor types (K-quants fall back on matrices whose rows do not fit their blocks).
A level the source cannot give exits with status 2 and names the levels it can. With `--json`,
one JSON document on stdout instead: per level its file, size, SHA-256, tensor types and whether
it was found in the cache (`cached`) or built now; with `--list`, why each level can or cannot
be given.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from levergate.cli.commands import SUMMARY
from levergate.cli.output import ExitCode, add_json_flag, emit_report, print_json
from levergate.config import LocalUpstreamSettings
from levergate.errors import ConfigError

if TYPE_CHECKING:
    from levergate.config import Quantization

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
    add_json_flag(quantize, "the levels built (or with --list, the levels the source can give)")
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
        emit_report(_listing(info, source), args, render_listing)
        return ExitCode.OK
    levels = quantize.producible(info) if args.level == ["all"] else args.level
    for level in levels:
        if level not in quantize.LEVELS:
            raise ConfigError(f"unknown level {level!r}: one of {', '.join(quantize.LEVELS)}")
        quantize.check_level(info, level, source=source, where=where)
    cache_dir = Path(args.cache_dir).expanduser()
    report: dict[str, Any] = {"source": str(source), "cache_dir": str(cache_dir), "levels": []}
    for level in levels:
        if info.weight_type == quantize.LEVEL_TYPES[level]:
            done: dict[str, Any] = {"level": level, "path": str(source), "is_source": True}
        else:
            done = _built(source, level, cache_dir, threads=args.threads, where=where)
        report["levels"].append(done)
        if not args.as_json:  # each level as it is done: building all of them takes a while
            print(render_level(done))
    if args.as_json:
        print_json(report)
    return ExitCode.OK


def _built(source: Path, level: Quantization, cache_dir: Path, *, threads: int | None,
           where: str) -> dict[str, Any]:  # fmt: skip
    """`level` from the cache when its sums check, else built now."""
    from levergate.upstreams.local import quantize

    target = quantize.target_path(source, level, cache_dir)
    try:
        cached = quantize.verified(target)
        built = (quantize.recorded(target) if cached
                 else quantize.build(source, level, target, threads=threads))  # fmt: skip
    except OSError as exc:
        raise ConfigError(f"{where}: building {level} in {cache_dir} failed: {exc}") from None
    return {"level": level, "path": str(built.path), "is_source": False, "size": built.size,
            "sha256": built.sha256, "types": built.types, "cached": cached}  # fmt: skip


def render_level(done: dict[str, Any]) -> str:
    level = done["level"]
    if done["is_source"]:
        return f"{level}: {done['path']} (the source already is {level})"
    mix = ", ".join(f"{n} {t}" for t, n in sorted(done["types"].items(), key=lambda i: -i[1]))
    return (f"{level}: {done['path']}\n  {done['size']:,} bytes, sha256 {done['sha256']}\n"
            f"  tensors: {mix}")  # fmt: skip


def _listing(info: Any, source: Path) -> dict[str, Any]:
    from levergate.upstreams.local import quantize

    levels = {level: quantize.refusal(info, level) for level in quantize.LEVELS}
    return {"source": str(source), "weight_type": info.weight_type,
            "k_share": quantize.k_share(info),
            "levels": [{"level": level, "possible": reason is None, "reason": reason}
                       for level, reason in levels.items()]}  # fmt: skip


def render_listing(r: dict[str, Any]) -> str:
    source = Path(r["source"]).name
    lines = [f"{source}: weights in {r['weight_type']}, {r['k_share']:.0%} in K-quant-sized rows"]
    for each in r["levels"]:
        reason = each["reason"]
        lines.append(f"  {each['level']:7} {'yes' if reason is None else 'no: ' + reason}")
    return "\n".join(lines)

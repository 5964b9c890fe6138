"""Where an exact-cache hit's work goes, function by function (issue 22, item 3: a hit <= 1.5x a
client's round trip to the simulator). Deterministic counts, not timings: a gateway with its
defaults on an in-memory upstream (`levergate.bench.calls.CannedUpstream`), served over HTTP on
loopback (`server.run.serving`, the proxy's own protocol), one keep-alive connection sending the
same request (temperature 0) again and again, so after the warm-up every counted request is an
exact-cache hit. Per hit and per function, counted only under a gateway frame (the client's own
work left out, as `levergate.bench.calls` does):

- calls (`sys.setprofile`: Python functions, and C functions by the module that called them);
- bytecodes executed (`sys.settrace` with opcode events): the interpreter's share, which
  callgrind's own table cannot split by Python function on CPython 3.11.

`--baseline OTHER/src` counts another tree the same way (its own process) beside this one.
Instructions per hit (callgrind, the server process alone, against the simulator answering the
same request) are `instructions.py --relay-kinds hit`'s.

    .venv/bin/python benchmarks/hit_profile.py [--requests 40] [--baseline ../main/src
        --baseline-name "main abc123"]

Writes benchmarks/results/hit_profile.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from harness import Output, add_output_options, stamp

TOP = 40  # functions shown
HIT = (b'{"model":"m","stream":false,"max_tokens":16,"temperature":0,'
       b'"messages":[{"role":"user","content":"the same question"}]}')  # fmt: skip


class _Counting:
    """Calls and bytecodes per function, under a gateway frame (levergate's code, not this
    script's), for the `with` block's duration; the collector off inside it."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.bytecodes: Counter[str] = Counter()
        self._own: dict[str, bool] = {}

    def _under_gateway(self, frame: FrameType | None) -> bool:
        while frame is not None:
            path = frame.f_code.co_filename
            own = self._own.get(path)
            if own is None:
                own = self._own[path] = "levergate" in path.replace("\\", "/").split("/")
            if own:
                return True
            frame = frame.f_back
        return False

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and self._under_gateway(frame):
            self.calls[_name(frame)] += 1
        elif event == "c_call" and self._under_gateway(frame):
            self.calls[f"{_module(frame)} -> {getattr(arg, '__qualname__', arg)}"] += 1

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        del event, arg  # every new frame: traced with opcode events when under the gateway
        if not self._under_gateway(frame):
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return self._opcode

    def _opcode(self, frame: FrameType, event: str, arg: Any) -> Any:
        del arg
        if event == "opcode":
            self.bytecodes[_name(frame)] += 1
        return self._opcode

    def __enter__(self) -> None:
        gc.collect()
        gc.disable()
        sys.setprofile(self._profile)
        sys.settrace(self._trace)

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)
        sys.setprofile(None)
        gc.enable()


def _module(frame: FrameType) -> str:
    from levergate.bench.calls import module_of

    return module_of(frame.f_code.co_filename)


def _name(frame: FrameType) -> str:
    code = frame.f_code
    if code.co_filename == "<string>":  # a dataclass's or a NamedTuple's generated code
        owner = frame.f_locals.get("self", frame.f_locals.get("_cls"))
        kind = owner.__name__ if isinstance(owner, type) else type(owner).__name__
        return f"<generated>:{code.co_name} of {kind}"
    return f"{_module(frame)}:{code.co_qualname}"


async def _hits(counting: _Counting, *, requests: int, warmup: int) -> None:
    from levergate.bench.calls import BASE_URL, CannedUpstream
    from levergate.config import Settings
    from levergate.gateway import Gateway
    from levergate.pipeline import Deps
    from levergate.server.run import serving

    canned = CannedUpstream()
    settings = Settings.for_upstream(BASE_URL, server={"port": 0})
    async with (
        Gateway(settings, deps=Deps(http_client=lambda _: canned)) as gateway,
        serving(gateway) as url,
    ):
        host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: levergate\r\n"
                   b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                   % (len(HIT), HIT))  # fmt: skip

        async def one(expect: bytes) -> None:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200") or expect not in head:
                raise RuntimeError(f"not a {expect!r}: {head[:200]!r}")
            size = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(size)

        await one(b"x-levergate-cache: miss")
        for _ in range(warmup):
            await one(b"x-levergate-cache: hit")
        with counting:
            for _ in range(requests):
                await one(b"x-levergate-cache: hit")
        writer.close()
        await writer.wait_closed()


def child(requests: int, warmup: int) -> None:
    counting = _Counting()
    asyncio.run(_hits(counting, requests=requests, warmup=warmup))
    print(json.dumps({"calls": dict(counting.calls), "bytecodes": dict(counting.bytecodes),
                      "requests": requests}))  # fmt: skip


def counted(src: Path | None, requests: int, warmup: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    done = subprocess.run([sys.executable, __file__, "--child", "--requests", str(requests),
                           "--warmup", str(warmup)],
                          env=env, check=True, capture_output=True, text=True)  # fmt: skip
    raw = json.loads(done.stdout.splitlines()[-1])
    n = raw["requests"]
    calls = {k: v / n for k, v in raw["calls"].items()}
    codes = {k: v / n for k, v in raw["bytecodes"].items()}
    modules: Counter[str] = Counter()
    for name, value in codes.items():
        modules[name.split(":")[0]] += value
    return {"calls_per_hit": sum(calls.values()), "bytecodes_per_hit": sum(codes.values()),
            "calls": calls, "bytecodes": codes, "bytecodes_by_module": dict(modules)}  # fmt: skip


def markdown(data: dict[str, Any]) -> str:
    this, base, name = data["this"], data.get("baseline") or {}, data.get("baseline_name")
    both = (this, base) if base else (this,)
    lines = [
        f"# Where an exact-cache hit goes ({data['date']}, {data['machine']})", "",
        ("`benchmarks/hit_profile.py`: `levergate serve`'s own HTTP path in-process (defaults, "
         "an in-memory upstream), one keep-alive connection sending the same request "
         f"(temperature 0), {data['requests']} hits counted after {data['warmup']}; per hit, "
         "only work under a gateway frame. Calls: `sys.setprofile` (C functions by the module "
         "that called them); bytecodes: `sys.settrace` opcode events. Instructions per hit "
         "(callgrind, the server alone, against the simulator): `hit_instructions.md`."), "",
        "| | calls / hit | bytecodes / hit |" + (f" {name}: calls | {name}: bytecodes |"
                                              if base else ""),
        "|---|---:|---:|" + ("---:|---:|" if base else ""),
        "| total |" + "".join(f" {t['calls_per_hit']:,.0f} | {t['bytecodes_per_hit']:,.0f} |"
                              for t in both),
        "", "Bytecodes per hit by module (the largest in either tree):", "",
        "| module | bytecodes / hit |" + (f" {name} |" if base else ""),
        "|---|---:|" + ("---:|" if base else ""),
    ]  # fmt: skip
    modules = _largest([t["bytecodes_by_module"] for t in both], TOP // 2)
    lines += [f"| {module} |" + "".join(f" {t['bytecodes_by_module'].get(module, 0):,.0f} |"
                                        for t in both)
              for module in modules]  # fmt: skip
    lines += [
        "", "By function (the most bytecodes in either tree; calls: the function's entries):", "",
        "| function | calls | bytecodes |" + (f" {name}: calls | {name}: bytecodes |"
                                             if base else ""),
        "|---|---:|---:|" + ("---:|---:|" if base else ""),
    ]  # fmt: skip
    lines += [f"| `{function}` |" + "".join(
                  f" {t['calls'].get(function, 0):,.1f} | {t['bytecodes'].get(function, 0):,.0f} |"
                  for t in both)
              for function in _largest([t["bytecodes"] for t in both], TOP)]  # fmt: skip
    return "\n".join(lines) + "\n"


def _largest(tables: list[dict[str, float]], top: int) -> list[str]:
    """The `top` names with the largest value in any of `tables`."""
    most: dict[str, float] = {}
    for table in tables:
        for key, value in table.items():
            most[key] = max(most.get(key, 0.0), value)
    return sorted(most, key=lambda key: -most[key])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40, help="hits counted")
    parser.add_argument("--warmup", type=int, default=40, help="hits before the count")
    parser.add_argument("--baseline", type=Path, help="another tree's src/, counted beside")
    parser.add_argument("--baseline-name", default="baseline", help="what the baseline is")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        child(args.requests, args.warmup)
        return
    out = Output.of(args)
    if args.smoke:
        args.requests, args.warmup = 3, 2
    src = Path(__file__).resolve().parents[1] / "src"
    data: dict[str, Any] = {**stamp(), "requests": args.requests, "warmup": args.warmup,
                            "this": counted(src, args.requests, args.warmup)}  # fmt: skip
    if args.baseline is not None:
        data["baseline"] = counted(args.baseline, args.requests, args.warmup)
        data["baseline_name"] = args.baseline_name
    out.write("hit_profile", data, markdown(data))


if __name__ == "__main__":
    main()

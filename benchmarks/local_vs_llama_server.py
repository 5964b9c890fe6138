"""The embedded engine behind `levergate serve` against llama.cpp's own `llama-server`, on the
same GGUF file (the engine's Q8_0 build of the bundled SmolLM2), the same threads, slots and KV
pool: time to first token of a cold prompt and of a warm one (a different question after a
~1.5k-token system prompt the server has seen), streamed over HTTP by the same client.

Both servers run at once, and each round asks them in turn (A then B, then B then A), each
round with a system prompt neither has seen, so both see the same machine load. The ratios
(levergate / llama-server) of the per-round medians are the result; the load average is
recorded before and after. `--in-place-ab` runs two levergate servers beside llama-server, one
reusing prefixes in place (`prefix_cache.in_place: true`) and one from saved states only, the
three in a rotating order.

llama-server is built from the llama.cpp sources vendored in the installed llama-cpp-python's
own sdist (same version, same sources), once, outside the repository, with CMake (about 8
minutes on 2 cores): `--build-dir DIR` builds it there if `DIR/build/bin/llama-server` is
missing; `--llama-server PATH` uses a binary built before.

    .venv/bin/python benchmarks/local_vs_llama_server.py --build-dir /tmp/llama-build [--quick]

`--smoke` (no binary given) puts llama-cpp-python's own server in llama-server's place: it runs
the benchmark's machinery in seconds and measures nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from harness import Output, add_output_options, free_port, stop, wait_http
from local_common import SMOKE_THREADS, environment, median, write
from local_prefix import system_prompt

from levergate.config import LocalUpstreamSettings
from levergate.upstreams.local.model import model_file

THREADS, SLOTS, N_CTX = 2, 16, 8192
# A smoke run's levergate engine: the stand-in server's shape (one thread, see
# local_common.SMOKE_THREADS; a 2,048-token context), and a few slots.
SMOKE_SHAPE = (SMOKE_THREADS, 4, 2048)


def build_llama_server(build_dir: Path) -> Path:
    """llama-server from the installed llama-cpp-python's sdist, built in `build_dir`."""
    import llama_cpp

    binary = build_dir / "build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    build_dir.mkdir(parents=True, exist_ok=True)
    version = llama_cpp.__version__
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}", "--no-deps",
         "--no-binary", ":all:", "-d", str(build_dir)], check=True,
    )  # fmt: skip
    with tarfile.open(build_dir / f"llama_cpp_python-{version}.tar.gz") as sdist:
        sdist.extractall(build_dir, filter="data")
    sources = build_dir / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
             "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
             "-DLLAMA_BUILD_EXAMPLES=OFF"]  # fmt: skip
    build = build_dir / "build"
    subprocess.run(["cmake", "-S", str(sources), "-B", str(build), *flags], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j2"],
                   check=True)  # fmt: skip
    return binary


def start_llama_server(binary: Path, model: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-c", str(N_CTX), "-np", str(SLOTS), "--kv-unified", "-t", str(THREADS),
            "-tb", str(THREADS), "--no-webui"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", seconds=120)
    return proc, url


def start_python_server(model: Path) -> tuple[subprocess.Popen[bytes], str]:
    """llama-cpp-python's own server on the same file: a smoke run's stand-in for llama-server,
    which takes minutes to build (the same llama.cpp, behind a Python HTTP layer)."""
    port = free_port()
    args = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host",
            "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
            "--n_threads_batch", "1"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/v1/models", seconds=120)
    return proc, url


def start_levergate(
    model: Path,
    folder: Path,
    *,
    in_place: bool | None = None,
    shape: tuple[int, int, int] = (THREADS, SLOTS, N_CTX),
) -> tuple[subprocess.Popen[bytes], str]:
    """levergate with its defaults, or with `prefix_cache.in_place` set when given; `shape`:
    its engine's threads, slots and context."""
    port = free_port()
    threads, slots, n_ctx = shape
    upstream: dict[str, Any] = {
        "kind": "local", "name": "local", "model_path": str(model), "requantize": "off",
        "threads": threads, "threads_batch": threads, "slots": slots, "n_ctx": n_ctx,
        "embeddings": {"enabled": False},
    }  # fmt: skip
    if in_place is not None:
        upstream["prefix_cache"] = {"in_place": in_place}
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "upstreams": [upstream],
        "models": [{"name": "*", "upstream": "local"}],
        "cache": {"enabled": False},
    }
    path = folder / f"levergate-{port}.json"
    path.write_text(json.dumps(config))  # JSON is YAML
    proc = subprocess.Popen(
        [sys.executable, "-m", "levergate.cli.main", "serve", "--config", str(path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/v1/models", seconds=120)
    return proc, url


async def ttft(session: aiohttp.ClientSession, url: str, system: str, question: str) -> float:
    """Seconds from sending a streamed chat request to its first content token."""
    body = {"model": "smollm2", "stream": True, "temperature": 0, "max_tokens": 8,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": question}]}  # fmt: skip
    started = time.perf_counter()
    first: float | None = None
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.content:
            if first is None and line.startswith(b"data: {"):
                delta = json.loads(line[6:])["choices"]
                if delta and delta[0].get("delta", {}).get("content"):
                    first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


async def rounds(urls: dict[str, str], count: int, prompt_tokens: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    names = list(urls)
    # A connection per request: a server's idle keep-alive timeout (5 s on both) may close a
    # pooled one while the other server answers a cold prompt.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        for name in names:  # warm-up: first-request costs off the record
            await ttft(session, urls[name], "Warm-up.", "Hello?")
        for index in range(count):
            system = system_prompt(1000 + index, prompt_tokens)
            order = names[index % len(names) :] + names[: index % len(names)]
            row: dict[str, Any] = {"order": order}
            for name in order:
                row[f"{name}_cold_s"] = await ttft(session, urls[name], system, "When do you open?")
                row[f"{name}_warm_s"] = await ttft(session, urls[name], system, "Do you deliver?")
            rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]], engines: list[str]) -> dict[str, Any]:
    """Per levergate engine and kind: its median, llama-server's, and their ratio."""
    out: dict[str, Any] = {}
    for name in engines:
        out[name] = {}
        for kind in ("cold", "warm"):
            ours = median([r[f"{name}_{kind}_s"] for r in rows])
            theirs = median([r[f"llama-server_{kind}_s"] for r in rows])
            out[name][kind] = {"levergate_s": ours, "llama_server_s": theirs,
                               "ratio": ours / theirs}  # fmt: skip
    return out


def markdown(data: dict[str, Any]) -> str:
    engines = list(data["summary"])
    lines = [
        "# Embedded engine vs llama-server: time to first token over HTTP", "",
        (f"Same GGUF ({data['model']}), {THREADS} threads, {SLOTS} slots sharing a "
         f"{N_CTX}-token unified KV pool, streamed chat requests with temperature 0 from one "
         f"aiohttp client; {len(data['rounds'])} rounds, servers in a rotating order. Cold: a "
         f"~{data['prompt_tokens']}-token system prompt never seen; warm: another question "
         "after it. Ratio = levergate / llama-server (below 1: levergate is faster)."), "",
        "| levergate | | levergate (median) | llama-server (median) | ratio |",
        "|---|---|---:|---:|---:|",
    ]  # fmt: skip
    for name in engines:
        for kind in ("cold", "warm"):
            s = data["summary"][name][kind]
            lines.append(f"| {name} | {kind} | {s['levergate_s'] * 1000:.1f} ms | "
                         f"{s['llama_server_s'] * 1000:.1f} ms | {s['ratio']:.2f}x |")  # fmt: skip
    for kind in ("cold", "warm"):
        lines += ["", f"Per round, {kind} (ms, {' / '.join([*engines, 'llama-server'])}): "
                  + ", ".join("/".join(f"{r[f'{n}_{kind}_s'] * 1000:.0f}"
                                       for n in [*engines, "llama-server"])
                              for r in data["rounds"])]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--llama-server", type=Path, help="a llama-server binary built before")
    where.add_argument("--build-dir", type=Path, help="build llama-server here if missing")
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 12")
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    parser.add_argument("--name", default="local_vs_llama_server")
    parser.add_argument("--in-place-ab", action="store_true",
                        help="two levergate servers: prefixes in place / saved states")  # fmt: skip
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if not (args.smoke or args.llama_server or args.build_dir):
        parser.error("one of --llama-server, --build-dir is required (or --smoke)")
    count = 1 if args.smoke else 3 if args.quick else 12
    if args.smoke:
        args.prompt_tokens = 100
    model = model_file(LocalUpstreamSettings())
    data: dict[str, Any] = {**environment(), "model": model.name,
                            "prompt_tokens": args.prompt_tokens}  # fmt: skip
    variants: dict[str, bool | None] = (
        {"in place": True, "saved states": False} if args.in_place_ab else {"levergate": None}
    )
    servers: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        try:
            for name, in_place in variants.items():
                proc, urls[name] = start_levergate(
                    model, Path(folder), in_place=in_place,
                    shape=SMOKE_SHAPE if args.smoke else (THREADS, SLOTS, N_CTX),
                )  # fmt: skip
                servers.append(proc)
            if args.smoke and not (args.llama_server or args.build_dir):
                proc, urls["llama-server"] = start_python_server(model)
            else:
                binary = args.llama_server or build_llama_server(args.build_dir)
                proc, urls["llama-server"] = start_llama_server(binary, model)
            servers.append(proc)
            data["rounds"] = asyncio.run(rounds(urls, count, args.prompt_tokens))
        finally:
            for proc in servers:
                stop(proc)
    data["summary"] = summary(data["rounds"], list(variants))
    write(args.name, data, markdown(data), quick=args.quick, out=out)


if __name__ == "__main__":
    main()

"""Shared by the local engine benchmarks (local_*.py): building an engine, driving it with calls,
timing the first token, and writing results/<name>.json + .md with the machine's state.

The machine may be shared: every benchmark interleaves the variants it compares (A, B, A, B...)
and reports ratios measured within one run, plus the load average before and after.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from harness import Output, stamp

from levergate.config import LocalUpstreamSettings
from levergate.core.call import Call, Context
from levergate.core.reply import Completed, Stream
from levergate.upstreams.local import LocalEndpoint

# The tokens that end an answer (SmolLM2's <|endoftext|> and <|im_end|>): banned where a
# benchmark needs every answer to run to max_tokens.
END_TOKENS = {0: -100.0, 2: -100.0}


def environment() -> dict[str, Any]:
    import llama_cpp

    meta = stamp()
    meta["machine"] += f", llama-cpp-python {llama_cpp.__version__}"
    return {**meta, "load_average_before": os.getloadavg()[0]}


def write(name: str, data: dict[str, Any], markdown: str, *, quick: bool, out: Output) -> None:
    data["load_average_after"] = os.getloadavg()[0]
    markdown += (
        f"\nLoad average (1 min) before / after: {data['load_average_before']:.2f} / "
        f"{data['load_average_after']:.2f} on {data['machine']}; {data['date']}.\n"
    )
    out.write(name + ("-quick" if quick else ""), data, markdown)


# A smoke run's engines and embedders use one thread: on a machine whose cores are all busy with
# other work, llama.cpp's and onnxruntime's thread barriers stall for seconds per step, and a
# smoke run's numbers measure nothing anyway.
SMOKE_THREADS = 1


def engine(**values: Any) -> LocalEndpoint:
    """An engine with the product's defaults (re-quantized Q8_0, all cores) unless overridden."""
    return LocalEndpoint(LocalUpstreamSettings(**values))


def stop(endpoint: LocalEndpoint) -> None:
    endpoint.engine.stop()
    if endpoint.embedder is not None:
        endpoint.embedder.close()


def chat(content: str, *, system: str | None = None, **body: Any) -> Call:
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    payload = {"model": "smollm2", "messages": messages, "temperature": 0, **body}
    return Call(kind="chat", body=payload, ctx=Context(request_id="bench"))


@dataclass(frozen=True, slots=True)
class Timing:
    ttft: float  # seconds to the first generated text
    total: float
    tokens: int
    prompt: int
    cached: int
    text: str

    @property
    def decode_rate(self) -> float:
        """Tokens per second after the first one."""
        spent = self.total - self.ttft
        return (self.tokens - 1) / spent if spent > 0 and self.tokens > 1 else 0.0


async def timed(endpoint: LocalEndpoint, call: Call) -> Timing:
    started = time.perf_counter()
    reply = await endpoint(call.with_body(stream=True))
    assert isinstance(reply, Stream)  # noqa: S101 - a benchmark of streams
    first: float | None = None
    parts: list[str] = []
    usage: dict[str, Any] = {}
    try:
        async for event in reply:
            chunk = event.json()
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                text = choice.get("delta", {}).get("content")
                if text:
                    first = first if first is not None else time.perf_counter() - started
                    parts.append(text)
    finally:
        await reply.aclose()
    total = time.perf_counter() - started
    return Timing(
        ttft=first if first is not None else total,
        total=total,
        tokens=int(usage.get("completion_tokens", 0)),
        prompt=int(usage.get("prompt_tokens", 0)),
        cached=int(usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)),
        text="".join(parts),
    )


async def complete(endpoint: LocalEndpoint, call: Call) -> dict[str, Any]:
    reply = await endpoint(call)
    assert isinstance(reply, Completed)  # noqa: S101 - a non-stream call
    return reply.data


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0

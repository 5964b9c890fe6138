"""The official OpenAI SDK, unchanged, pointed at `levergate serve`: the drop-in way, async and
sync. Only `base_url` changes; levergate's levers show in the response headers.

    python examples/openai_sdk_through_the_proxy.py

Starts two processes, as an operator would, and stops them at the end: the simulator
(`levergate sim`, standing in for the provider) and the proxy in front of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import openai

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
QUESTION: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France?"}
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running(*args: str, ready: str) -> Iterator[None]:
    """`levergate <args>` as a process, once `ready` answers 200; stopped on the way out."""
    command = [*LEVERGATE, *args]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)  # noqa: S603 - our own CLI
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"levergate {args[0]} exited with {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(ready, timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"levergate {args[0]} never became ready")
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def async_client(base_url: str) -> None:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused") as sdk:
        # Asked twice with temperature 0 (one answer wanted): the second comes from the cache.
        seen = []
        for _ in range(2):
            raw = await sdk.chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=QUESTION, temperature=0, max_tokens=6,
                extra_headers={"x-levergate-feature": "geography"},  # a tag for the metrics
            )  # fmt: skip
            seen.append((raw.headers["x-levergate-cache"], raw.parse().choices[0].message.content))
        assert [cache for cache, _ in seen] == ["miss", "hit"], seen
        assert seen[0][1] == seen[1][1]
        print("async:", seen[1][1], f"(cache {seen[0][0]}, then {seen[1][0]})")


def sync_client(base_url: str) -> None:
    sdk = openai.OpenAI(base_url=base_url, api_key="unused")
    stream = sdk.chat.completions.create(
        model="gpt-4o-mini", messages=QUESTION, max_tokens=5, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert len(text.split()) == 5, text
    print("sync, streamed:", text)
    sdk.close()


def main() -> None:
    sim, proxy = free_port(), free_port()
    with (
        running("sim", "--port", str(sim), ready=f"http://127.0.0.1:{sim}/v1/models"),
        running("serve", "--upstream", f"http://127.0.0.1:{sim}/v1", "--port", str(proxy),
                ready=f"http://127.0.0.1:{proxy}/readyz"),
    ):  # fmt: skip
        base_url = f"http://127.0.0.1:{proxy}/v1"  # the one change to an OpenAI SDK program
        asyncio.run(async_client(base_url))
        sync_client(base_url)


if __name__ == "__main__":
    main()

"""The official Anthropic SDK, unchanged, running levergate's pipeline in-process: a client
speaking Messages, served by an OpenAI-compatible upstream (the gateway translates both ways).

    python examples/anthropic_sdk_in_process.py

Runs against the simulator, started here.
"""

from __future__ import annotations

import asyncio

import anthropic
import httpx2

from levergate import Settings
from levergate.app import build_gateway
from levergate.server.httpx2_transport import Httpx2Transport
from levergate.simulator import SimSettings, run_simulator


async def main() -> None:
    async with (
        run_simulator(SimSettings(port=0)) as sim,
        build_gateway(Settings.for_upstream(sim.base_url)) as gw,
    ):
        http = httpx2.AsyncClient(transport=Httpx2Transport(gw))
        async with anthropic.AsyncAnthropic(
            base_url="http://levergate", api_key="unused", http_client=http
        ) as sdk:
            message = await sdk.messages.create(
                model="m", max_tokens=6, messages=[{"role": "user", "content": "Hi"}]
            )
            text = "".join(b.text for b in message.content if b.type == "text")
            assert message.usage.output_tokens == 6
            assert len(text.split()) == 6, text
            print("messages:", text)
            async with sdk.messages.stream(
                model="m", max_tokens=3, messages=[{"role": "user", "content": "Hi"}]
            ) as stream:
                streamed = "".join([part async for part in stream.text_stream])
            assert len(streamed.split()) == 3, streamed
            print("streamed:", streamed)


if __name__ == "__main__":
    asyncio.run(main())

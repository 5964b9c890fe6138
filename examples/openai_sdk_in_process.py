"""The official OpenAI SDK, unchanged, running levergate's pipeline in-process (no socket):
async and sync, and the same SDK against the proxy would look identical.

    python examples/openai_sdk_in_process.py

Runs against the simulator, started here.
"""

from __future__ import annotations

import asyncio

import httpx
import openai

from levergate import Settings
from levergate.app import build_gateway
from levergate.server.sync_transport import SyncGatewayTransport
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimSettings, run_simulator

HELLO: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]


async def main() -> None:
    async with run_simulator(SimSettings(port=0)) as sim:
        settings = Settings.for_upstream(sim.base_url)
        async with build_gateway(settings) as gw:
            http = httpx.AsyncClient(transport=GatewayTransport(gw))
            async with openai.AsyncOpenAI(
                base_url="http://levergate/v1",
                api_key="unused",
                http_client=http,  # type: ignore[arg-type]  # it takes httpx clients too
            ) as sdk:
                reply = await sdk.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
                assert reply.usage is not None
                assert reply.usage.completion_tokens == 5
                print("async:", reply.choices[0].message.content)
        # Sync code: the gateway on the transport's own loop thread (the simulator keeps
        # serving on this loop meanwhile, so the blocking calls go to a worker thread).
        await asyncio.to_thread(sync_client, settings)


def sync_client(settings: Settings) -> None:
    with httpx.Client(transport=SyncGatewayTransport(build_gateway(settings))) as http:
        sdk = openai.OpenAI(
            base_url="http://levergate/v1",
            api_key="unused",
            http_client=http,  # type: ignore[arg-type]  # it takes httpx clients too
        )
        stream = sdk.chat.completions.create(model="m", messages=HELLO, max_tokens=3, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert len(text.split()) == 3, text
        print("sync, streamed:", text)


if __name__ == "__main__":
    asyncio.run(main())

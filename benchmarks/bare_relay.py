"""A bare HTTP relay: what a proxy that does nothing but relay costs on this stack (issue 22).

An ASGI app on uvicorn (uvloop, httptools) that POSTs each request's body to the upstream with
aiohttp and sends back the status, the content type and the body (a stream chunk by chunk).
No parsing, no checks, no metrics: the floor `relay_side_by_side.py` holds levergate's default
proxy path to, run the same way beside it.

    python benchmarks/bare_relay.py --port 9000 --upstream http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
from typing import Any

import aiohttp
import uvicorn

Scope = dict[str, Any]


def relay(upstream: str) -> Any:
    session: aiohttp.ClientSession | None = None

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        nonlocal session
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                            auto_decompress=False)  # fmt: skip
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await session.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        if session is None:
            raise RuntimeError("the relay serves once its lifespan has started")
        headers = {"content-type": "application/json"}
        async with session.post(upstream + scope["path"], data=body, headers=headers) as answer:
            kind = answer.headers.get("content-type", "application/json")
            head = [(b"content-type", kind.encode())]
            start = {"type": "http.response.start", "status": answer.status, "headers": head}
            if not kind.startswith("text/event-stream"):
                whole = await answer.read()
                head.append((b"content-length", str(len(whole)).encode()))
                await send(start)
                await send({"type": "http.response.body", "body": whole})
                return
            await send(start)
            async for chunk in answer.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the upstream's origin, no path")
    args = parser.parse_args()
    uvicorn.run(relay(args.upstream.rstrip("/")), host="127.0.0.1", port=args.port,
                loop="uvloop", http="httptools", log_level="warning", access_log=False)  # fmt: skip


if __name__ == "__main__":
    main()

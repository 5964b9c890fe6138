"""A scripted upstream that misbehaves on purpose, on a raw loopback socket: it echoes the
credentials it was sent in its error bodies and stream errors, sends huge bodies and events
that never end, and malformed stream chunks. The request's `model` picks the behaviour."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson

CHUNK = b'{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":%s}]}'
ROLE = CHUNK % b'{"role":"assistant"}'
TOKEN = CHUNK % b'{"content":"hello"}'
# A line an attacker would like to see in the gateway's log as a record of its own.
FORGED = "\nWARNING levergate.edge: forged line\r\n"


@dataclass
class Hostile:
    """What the server saw and how far it got writing each answer."""

    port: int = 0
    sent: dict[str, int] = field(default_factory=dict)  # behaviour -> body bytes written
    finished: dict[str, bool] = field(default_factory=dict)  # behaviour -> wrote all of it
    # Set when a flood ends, finished or cut off by the gateway.
    flood_over: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                pairs = (line.partition(":") for line in lines[1:] if line)
                headers = {k.strip().lower(): v.strip() for k, _, v in pairs}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                model = str(orjson.loads(body).get("model", "")) if body else ""
                await self._answer(model, headers, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(
        self, model: str, headers: dict[str, str], writer: asyncio.StreamWriter
    ) -> None:
        echo = f"you sent authorization={headers.get('authorization')} host={headers.get('host')}"
        behaviour = model.rpartition("/")[2]
        if behaviour.startswith("echo-") and behaviour[5:].isdigit():
            error = {"message": echo + FORGED, "type": "upstream_type", "param": "messages"}
            body = orjson.dumps({"error": {**error, "code": "echoed"}})
            await _write(writer, int(behaviour[5:]), "application/json", body)
        elif behaviour == "echo-html":
            page = f"<html><body><h1>502 Bad Gateway</h1><p>{echo}</p></body></html>"
            await _write(writer, 502, "text/html", page.encode())
        elif behaviour == "echo-midstream":
            event = orjson.dumps({"error": {"message": echo + FORGED, "type": "server_error"}})
            await _write(writer, 200, "text/event-stream", _frames(ROLE, TOKEN, event))
        elif behaviour == "malformed-chunk":
            await _write(
                writer, 200, "text/event-stream", _frames(ROLE, TOKEN, b"not json{", b"[DONE]")
            )
        elif behaviour in {"deep-answer", "plain-answer"}:  # valid JSON, 300 levels deep or not
            levels = 300 if behaviour == "deep-answer" else 1
            deep = b"[" * levels + b"]" * levels
            answer = (b'{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,'
                      b'"message":{"role":"assistant","content":"hi"},"finish_reason":"stop",'
                      b'"x":' + deep + b'}],"usage":{"prompt_tokens":1,"completion_tokens":1,'
                      b'"total_tokens":2}}')  # fmt: skip
            await _write(writer, 200, "application/json", answer)
        elif behaviour in {"huge-error", "huge-body", "unterminated", "trickle"}:
            try:
                await self._flood(behaviour, writer)
            finally:
                self.flood_over.set()
        else:
            await _write(writer, 200, "text/event-stream", _frames(ROLE, TOKEN))

    async def _flood(self, behaviour: str, writer: asyncio.StreamWriter) -> None:
        """Up to 64 MiB, chunked: an error body, a JSON answer, or one event that never ends
        (at full speed, or as a trickle of 64 KiB every 20 ms)."""
        unterminated = (200, "text/event-stream", _frames(ROLE, TOKEN) + b'data: {"x":"')
        status, kind, start = {
            "huge-error": (500, "application/json", b'{"error":{"message":"'),
            "huge-body": (200, "application/json", b'{"choices":[],"x":"'),
            "unterminated": unterminated,
            "trickle": unterminated,
        }[behaviour]
        self.sent[behaviour] = 0
        self.finished[behaviour] = False
        head = f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ntransfer-encoding: chunked\r\n\r\n"
        writer.write(head.encode())
        piece = b"x" * 65536
        for i in range(1024):
            data = start + piece if i == 0 else piece
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
            self.sent[behaviour] += len(data)
            if behaviour == "trickle":
                await asyncio.sleep(0.02)
        writer.write(b'"}\r\n0\r\n\r\n')
        await writer.drain()
        self.finished[behaviour] = True


def _frames(*events: bytes) -> bytes:
    return b"".join(b"data: " + e + b"\n\n" for e in events)


async def _write(writer: asyncio.StreamWriter, status: int, kind: str, body: bytes) -> None:
    head = f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()


@contextlib.asynccontextmanager
async def hostile_upstream() -> AsyncIterator[Hostile]:
    state = Hostile()
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()

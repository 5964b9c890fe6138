"""The soak's hostile tenant (levergate/testing/soak.py), a process of its own so its client-side
work never slows the victim's measurements, connecting from 127.0.0.2 (its own peer to the gateway).

    python -m levergate.testing.soak_attack attack --port P --key K --seconds S --out result.json
    python -m levergate.testing.soak_attack hang --port P   # a webhook receiver that never answers

`attack` runs issue 20's items at once for S seconds, then cleans up what its tenant left
(cancels its batches, deletes its files) so the next solo block is solo, and writes how each
kind of request was answered:

1. batch files with lines nested past the bound (and at it);
3. Responses chains of large turns (256 KiB each), continued until refused, then again;
4. thousands of queued batch lines and async requests whose webhook receiver hangs;
5. upload floods to the tenant's quotas (1 MiB files, a 24 MiB one now and then), and uploads
   that stall mid-body;
6. embeddings at the duplicate bound (128 distinct inputs x 16 copies: 2,048 vectors of 1,536
   dimensions, ~67 MB an answer), read slowly by several clients.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from levergate.config import MAX_JSON_DEPTH

ADDRESS = "127.0.0.2"
LINE = {"custom_id": "c", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "max_tokens": 4,
                 "messages": [{"role": "user", "content": "flood"}]}}  # fmt: skip
BOUNDARY = "soakboundary"
SLOW_READERS = 3
READ_BYTES, READ_PAUSE, HOLD_SECONDS = 64 * 1024, 0.02, 2.0
STALLED = 16


class Attack:
    def __init__(self, port: int, key: str, seconds: float) -> None:
        self.port, self.key = port, key
        self.deadline = time.monotonic() + seconds
        self.outcomes: Counter[str] = Counter()
        self.rng = random.Random(20)
        transport = httpx.AsyncHTTPTransport(local_address=ADDRESS)
        self.http = httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}/v1", transport=transport, timeout=60,
            headers={"authorization": f"Bearer {key}"},
        )  # fmt: skip

    def going(self) -> bool:
        return time.monotonic() < self.deadline

    def note(self, what: str, answer: httpx.Response | str) -> None:
        status = answer if isinstance(answer, str) else str(answer.status_code)
        self.outcomes[f"{what} {status}"] += 1

    async def upload(self, content: bytes, what: str, name: str = "in.jsonl") -> str | None:
        files = {"file": (name, content), "purpose": (None, "batch")}
        try:
            answer = await self.http.post("/files", files=files)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            self.note(what, type(exc).__name__)
            return None
        self.note(what, answer)
        return str(answer.json()["id"]) if answer.status_code == 200 else None

    async def batch(self, file_id: str, what: str) -> None:
        body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                "completion_window": "24h"}  # fmt: skip
        self.note(what, await self.http.post("/batches", json=body))

    # Item 1: deep-nested batch lines.
    async def deep_lines(self) -> None:
        while self.going():
            depth = self.rng.choice([MAX_JSON_DEPTH + 1, 300, 1000])
            deep = b'{"custom_id":"deep","method":"POST","url":"/v1/chat/completions","body":'
            deep += b'{"model":"m","x":' + b"[" * depth + b"]" * depth + b"}}\n"
            await self.upload(_jsonl(20) + deep, "deep-upload")
            # At the bound (the line itself adds 2 levels): accepted, run, answered.
            depth = MAX_JSON_DEPTH - 4
            line = dict(LINE, body={**LINE["body"], "metadata": "DEEP"})  # type: ignore[dict-item]
            text = json.dumps(line).replace('"DEEP"', "[" * depth + "]" * depth)
            if (file_id := await self.upload(text.encode() + b"\n", "deep-at-bound")) is not None:
                await self.batch(file_id, "deep-batch")
            await asyncio.sleep(0.5)

    # Item 3: Responses chains of large turns.
    async def responses_chain(self) -> None:
        previous: str | None = None
        turn = 0
        while self.going():
            turn += 1
            body: dict[str, object] = {"model": "gpt-4o-mini", "max_output_tokens": 16,
                                       "input": f"turn {turn} " + "x" * (256 << 10)}  # fmt: skip
            if previous:
                body["previous_response_id"] = previous
            try:
                answer = await self.http.post("/responses", json=body)
            except httpx.HTTPError as exc:
                self.note("responses", type(exc).__name__)
                previous = None
                continue
            self.note("responses", answer)
            previous = str(answer.json()["id"]) if answer.status_code == 200 else None

    # Item 4: thousands of queued lines, async requests to a hanging webhook receiver.
    async def queued_lines(self) -> None:
        file_id = await self.upload(_jsonl(3000), "flood-upload")
        while self.going():
            if file_id is not None:
                await self.batch(file_id, "flood-batch")
            hooked = {"x-levergate-webhook": "hang"}
            for _ in range(20):
                answer = await self.http.post("/async/chat/completions", json=LINE["body"],
                                              headers=hooked)  # fmt: skip
                self.note("async", answer)
            await asyncio.sleep(1.0)

    # Item 5: upload floods to the quotas, and stalled uploads.
    async def upload_flood(self) -> None:
        while self.going():
            size = 24 << 20 if self.rng.random() < 0.05 else 1 << 20
            if await self.upload(_padded(size), "upload", "pad.jsonl") is None:
                await self.delete_files(keep=10, name="pad.jsonl")
            await asyncio.sleep(0.05)

    async def delete_files(self, *, keep: int, name: str | None = None) -> None:
        """Delete the tenant's files (those named `name`) but the newest `keep`."""
        listed = await self.http.get("/files", params={"limit": 100})
        found = listed.json().get("data", []) if listed.status_code == 200 else []
        for row in [f for f in found if name in (None, f.get("filename"))][keep:]:
            self.note("delete", await self.http.delete(f"/files/{row['id']}"))

    async def stalled_upload(self) -> None:
        head = (f"POST /v1/files HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {self.key}"
                f"\r\ncontent-type: multipart/form-data; boundary={BOUNDARY}\r\n"
                f"content-length: {50 << 20}\r\n\r\n--{BOUNDARY}\r\nContent-Disposition: "
                'form-data; name="file"; filename="s.jsonl"\r\n\r\n').encode()  # fmt: skip
        while self.going():
            await self.raw(head + _jsonl(200), "stalled", hold=min(15.0, self.left()))

    def left(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    async def raw(self, payload: bytes, what: str, *, hold: float, slow: bool = False) -> None:
        """Send `payload`, then read the answer (slowly with `slow`) for at most `hold` s."""
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port,
                                                           local_addr=(ADDRESS, 0))  # fmt: skip
        except OSError as exc:
            self.note(what, type(exc).__name__)
            await asyncio.sleep(0.5)
            return
        try:
            writer.write(payload)
            async with asyncio.timeout(hold):
                line = await reader.readline()
                self.note(what, line.split(b" ")[1].decode() if b" " in line else "no answer")
                while slow and await reader.read(READ_BYTES):
                    await asyncio.sleep(READ_PAUSE)
        except TimeoutError:
            self.note(what, "held")
        except OSError as exc:
            self.note(what, type(exc).__name__)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    # Item 6: duplicate-heavy embeddings at the bound, read slowly.
    async def copies(self) -> None:
        while self.going():
            salt = self.rng.randrange(4)  # mostly cached distinct values, sometimes new ones
            inputs = [f"hostile {salt} {i % 128}" for i in range(2048)]
            body = json.dumps({"model": "text-embedding-3-small", "input": inputs}).encode()
            head = (f"POST /v1/embeddings HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer "
                    f"{self.key}\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    f"content-length: {len(body)}\r\n\r\n").encode()  # fmt: skip
            await self.raw(head + body, "embeddings", hold=min(HOLD_SECONDS, self.left()),
                           slow=True)  # fmt: skip
            await asyncio.sleep(READ_PAUSE)

    async def cleanup(self) -> None:
        """Cancel the tenant's batches, delete its files: the next solo block is solo."""
        with contextlib.suppress(httpx.HTTPError, ValueError):
            listed = await self.http.get("/batches", params={"limit": 100})
            for found in listed.json().get("data", []):
                if found["status"] in ("validating", "in_progress"):
                    self.note("cancel", await self.http.post(f"/batches/{found['id']}/cancel"))
            await self.delete_files(keep=0)

    async def run(self, only: set[str] | None = None) -> None:
        """Every loop at once (`only`: those items, e.g. {"1", "6"})."""
        items: dict[str, list[Callable[[], Awaitable[None]]]] = {
            "1": [self.deep_lines],
            "3": [self.responses_chain] * 2,
            "4": [self.queued_lines],
            "5": [self.upload_flood, *[self.stalled_upload] * STALLED],
            "6": [self.copies] * SLOW_READERS,
        }
        jobs = [job for item, loops in items.items() if not only or item in only for job in loops]
        tasks = [asyncio.create_task(_guarded(job(), self)) for job in jobs]
        await asyncio.gather(*tasks)
        await self.cleanup()
        await self.http.aclose()


async def _guarded(job: Awaitable[None], attack: Attack) -> None:
    """One attack loop, ended at the deadline (plus a grace) whatever it is waiting on."""
    try:
        async with asyncio.timeout(attack.left() + 30):
            await job
    except TimeoutError:
        attack.outcomes["loop cut at the deadline"] += 1
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        attack.outcomes[f"loop ended: {type(exc).__name__}"] += 1


def _jsonl(lines: int) -> bytes:
    return b"".join(json.dumps(dict(LINE, custom_id=f"c{i}")).encode() + b"\n"
                    for i in range(lines))  # fmt: skip


def _padded(size: int) -> bytes:
    line = json.dumps(dict(LINE, custom_id="p", pad="p" * 4000)).encode() + b"\n"
    lines = max(1, size // len(line))
    return b"".join(line.replace(b'"p"', f'"p{i}"'.encode(), 1) for i in range(lines))


async def hang(port: int) -> None:
    """Read each request's head and never answer (the connection stays until the client gives
    up)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            await reader.readuntil(b"\r\n\r\n")
            while await reader.read(65536):
                pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["attack", "hang"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", default="")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", default="", help="comma-separated items (default: all)")
    args = parser.parse_args()
    if args.mode == "hang":
        asyncio.run(hang(args.port))
        return
    attack = Attack(args.port, args.key, args.seconds)
    asyncio.run(attack.run(set(filter(None, args.only.split(","))) or None))
    if args.out:
        args.out.write_text(json.dumps({"outcomes": dict(sorted(attack.outcomes.items()))}))


if __name__ == "__main__":
    main()

"""The soak's hostile tenant (levergate/testing/soak.py), a process of its own so its client-side
work never slows the victim's measurements, connecting from 127.0.0.2 (its own peer to the gateway).

    python -m levergate.testing.soak_attack attack --port P --key K --seconds S --out result.json
    python -m levergate.testing.soak_attack hang --port P   # a webhook receiver that never answers

`attack` runs issue 20's items at once for S seconds, then cleans up what its tenant left
(cancels its batches, deletes its files) so the next solo block is solo, and writes how each
kind of request was answered. Each kind of request starts at its own steady rate (`RATES`, ~35
requests a second in all), open loop: whatever the gateway answers and however fast. Loops that
each waited for their answer before the next request attacked a faster gateway harder (945 to
1,850 requests a 25 s block, results/soak_tail.md), so a change that served the attacker faster
looked like one that hurt the victim more.

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
READ_BYTES, READ_PAUSE, HOLD_SECONDS = 64 * 1024, 0.02, 2.0
# Requests (or, for "deep", rounds of three) started a second, each kind on its own schedule.
RATES = {
    "deep": 1.0,  # item 1: a deep upload (refused), an upload at the bound and its batch
    "responses": 4.0,  # item 3: a 256 KiB turn continuing the newest answered one
    "flood-batch": 0.2,  # item 4: a batch of the 3,000-line file
    "async": 6.0,  # item 4: async requests whose webhook receiver hangs
    "upload": 8.0,  # item 5: 1 MiB uploads (24 MiB one in 20) to the quotas
    "stalled": 10.0,  # item 5: uploads that stall mid-body
    "embeddings": 2.0,  # item 6: duplicate-heavy embeddings at the bound, read slowly
}
# Requests of one kind in flight at most (a tick finding them all busy is counted, not sent):
# the attacker's own memory and sockets stay bounded when the gateway holds its requests.
MAX_IN_FLIGHT = 64


class Attack:
    def __init__(self, port: int, key: str, seconds: float) -> None:
        self.port, self.key = port, key
        self.deadline = time.monotonic() + seconds
        self.outcomes: Counter[str] = Counter()
        self.rng = random.Random(20)
        self.previous: str | None = None  # the Responses chain's newest answered turn
        self.turn = 0
        self.flood_file: str | None = None
        self.deleting = asyncio.Lock()
        limits = httpx.Limits(max_connections=8 * MAX_IN_FLIGHT)
        transport = httpx.AsyncHTTPTransport(local_address=ADDRESS, limits=limits)
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

    async def every(self, kind: str, one: Callable[[], Awaitable[None]]) -> None:
        """`one()` started `RATES[kind]` times a second until the deadline, open loop."""
        rate = RATES[kind]
        running: set[asyncio.Task[None]] = set()
        began = time.monotonic()
        n = 0
        while True:
            await asyncio.sleep(max(0.0, began + n / rate - time.monotonic()))
            n += 1
            if not self.going():
                break
            if len(running) >= MAX_IN_FLIGHT:
                self.outcomes[f"{kind} skipped"] += 1
                continue
            task = asyncio.create_task(self._noted(kind, one()))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)

    async def _noted(self, kind: str, one: Awaitable[None]) -> None:
        try:
            await one
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            self.outcomes[f"{kind} {type(exc).__name__}"] += 1

    # Item 1: deep-nested batch lines.
    async def deep_lines(self) -> None:
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

    # Item 3: Responses chains of large turns, each continuing the newest answered turn until
    # the tenant's store refuses, then a new chain.
    async def responses_turn(self) -> None:
        self.turn += 1
        body: dict[str, object] = {"model": "gpt-4o-mini", "max_output_tokens": 16,
                                   "input": f"turn {self.turn} " + "x" * (256 << 10)}  # fmt: skip
        if self.previous:
            body["previous_response_id"] = self.previous
        try:
            answer = await self.http.post("/responses", json=body)
        except httpx.HTTPError as exc:
            self.note("responses", type(exc).__name__)
            self.previous = None
            return
        self.note("responses", answer)
        self.previous = str(answer.json()["id"]) if answer.status_code == 200 else None

    # Item 4: thousands of queued lines, async requests to a hanging webhook receiver.
    async def flood_batch(self) -> None:
        if self.flood_file is None:
            self.flood_file = await self.upload(_jsonl(3000), "flood-upload")
        if self.flood_file is not None:
            await self.batch(self.flood_file, "flood-batch")

    async def hooked_async(self) -> None:
        hooked = {"x-levergate-webhook": "hang"}
        self.note("async", await self.http.post("/async/chat/completions", json=LINE["body"],
                                                headers=hooked))  # fmt: skip

    # Item 5: upload floods to the quotas, and stalled uploads.
    async def flood_upload(self) -> None:
        size = 24 << 20 if self.rng.random() < 0.05 else 1 << 20
        refused = await self.upload(_padded(size), "upload", "pad.jsonl") is None
        if refused and not self.deleting.locked():  # one clean-up at a time
            async with self.deleting:
                await self.delete_files(keep=10, name="pad.jsonl")

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
        salt = self.rng.randrange(4)  # mostly cached distinct values, sometimes new ones
        inputs = [f"hostile {salt} {i % 128}" for i in range(2048)]
        body = json.dumps({"model": "text-embedding-3-small", "input": inputs}).encode()
        head = (f"POST /v1/embeddings HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer "
                f"{self.key}\r\ncontent-type: application/json\r\nconnection: close\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        await self.raw(head + body, "embeddings", hold=min(HOLD_SECONDS, self.left()), slow=True)

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
        items: dict[str, list[tuple[str, Callable[[], Awaitable[None]]]]] = {
            "1": [("deep", self.deep_lines)],
            "3": [("responses", self.responses_turn)],
            "4": [("flood-batch", self.flood_batch), ("async", self.hooked_async)],
            "5": [("upload", self.flood_upload), ("stalled", self.stalled_upload)],
            "6": [("embeddings", self.copies)],
        }
        jobs = [job for item, loops in items.items() if not only or item in only for job in loops]
        tasks = [asyncio.create_task(_guarded(self.every(kind, one), self)) for kind, one in jobs]
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

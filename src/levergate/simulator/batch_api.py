"""The simulator's provider batch APIs, for the gateway's deferral tests (batch/defer.py).

- OpenAI: `POST /v1/files` (multipart, purpose `batch`), `GET /v1/files/{id}` and
  `/content`, `POST /v1/batches`, `GET /v1/batches` (with `metadata`), `GET /v1/batches/{id}`,
  `POST /v1/batches/{id}/cancel`. Output and error files in OpenAI's line shape
  (`{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`).
- Anthropic Message Batches: `POST /v1/messages/batches`, `GET .../{id}` (`processing_status`
  `in_progress` | `canceling` | `ended`), `GET .../{id}/results` (JSONL of
  `{"custom_id", "result": {"type": "succeeded" | "errored" | "canceled" | "expired", ...}}`),
  `POST .../{id}/cancel`, `GET /v1/messages/batches` (list).

A batch ends `batch_api.turnaround_seconds` after it was created, on the simulator's clock (a
ManualClock in tests: virtual time), and its lines are answered then, lazily, by the same
generator the live endpoints use (so answers, usage and prompt caching are the same), without
counting as live requests: `GET /sim/stats` shows `batch_api` counters and no chat calls. State
is in memory (a test double): a restarted simulator has forgotten its batches.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from levergate.simulator import anthropic, generate
from levergate.simulator.responses import Reply, SimError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from levergate.simulator.simulator import Simulator

PREFIXES = ("/v1/files", "/v1/batches", "/v1/messages/batches")
_KINDS = {"/v1/chat/completions": "chat", "/v1/completions": "completion",
          "/v1/embeddings": "embedding"}  # fmt: skip


@dataclass(slots=True)
class SimBatch:
    id: str
    api: str  # "openai" | "anthropic"
    endpoint: str
    created: float  # wall seconds
    ready_at: float  # simulator clock
    lines: list[tuple[str, bytes]]  # (custom_id, request body)
    key: str
    metadata: dict[str, str] | None = None
    status: str = "in_progress"
    cancelling: bool = False
    output_file_id: str | None = None
    error_file_id: str | None = None
    results: bytes = b""  # Anthropic's results JSONL
    counts: dict[str, int] = field(default_factory=dict)
    ended: float | None = None


@dataclass(slots=True)
class BatchApi:
    files: dict[str, tuple[str, str, bytes]] = field(default_factory=dict)  # purpose, name, data
    batches: dict[str, SimBatch] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    created: int = 0
    lines: int = 0

    def stats(self) -> dict[str, int]:
        return {"batches_created": self.created, "lines_answered": self.lines,
                "files": len(self.files)}  # fmt: skip


def handle(sim: Simulator, *, method: str, path: str, headers: Mapping[str, str],
           body: bytes) -> Reply:  # fmt: skip
    api: BatchApi = sim.batch_api
    parts = path.strip("/").split("/")  # v1 files ... | v1 batches ... | v1 messages batches ...
    if parts[1] == "messages":
        sim.stats.requests["/v1/messages/batches"] += 1
        return anthropic_reply(sim, api, method=method, rest=parts[3:], headers=headers, body=body)
    sim.stats.requests[f"/v1/{parts[1]}"] += 1
    key = generate.bearer_key(headers.get("authorization"))
    if parts[1] == "files":
        return _files(api, method, parts[2:], body)
    return _openai_batches(sim, api, method=method, rest=parts[2:], key=key, body=body)


def _json(data: Any, status: int = 200) -> Reply:
    return Reply(status=status, body=orjson.dumps(data))


def _missing(what: str) -> SimError:
    return SimError(404, f"No such {what} (simulated provider).", code="not_found")


# ---- OpenAI files -----------------------------------------------------------------------


def _files(api: BatchApi, method: str, rest: list[str], body: bytes) -> Reply:
    if not rest and method == "POST":
        purpose, name, data = _multipart(body)
        if purpose != "batch":
            raise SimError(400, f"Unsupported purpose {purpose!r}.", param="purpose")
        file_id = f"file-sim{next(api.ids):08x}"
        api.files[file_id] = (purpose, name, data)
        return _json(_file_object(file_id, purpose, name, data))
    if not rest or rest[0] not in api.files:
        raise _missing("file")
    purpose, name, data = api.files[rest[0]]
    if len(rest) == 1 and method == "GET":
        return _json(_file_object(rest[0], purpose, name, data))
    if len(rest) == 1 and method == "DELETE":
        del api.files[rest[0]]
        return _json({"id": rest[0], "object": "file", "deleted": True})
    if rest[1:] == ["content"] and method == "GET":
        return Reply(status=200, body=data, content_type="application/octet-stream")
    raise _missing("file route")


def _file_object(file_id: str, purpose: str, name: str, data: bytes) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "bytes": len(data), "created_at": 0,
            "filename": name, "purpose": purpose, "status": "processed",
            "expires_at": None, "status_details": None}  # fmt: skip


def _multipart(body: bytes) -> tuple[str, str, bytes]:
    """(purpose, filename, file bytes) of a multipart/form-data body; the boundary is read from
    its first line (the server passes the simulator no content-type)."""
    boundary = body.split(b"\r\n", 1)[0].removeprefix(b"--").strip()
    if not boundary:
        raise SimError(400, "Expected a multipart/form-data body.")
    head = b'Content-Type: multipart/form-data; boundary="' + boundary + b'"\r\n\r\n'
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    purpose, name, data = "", "upload.jsonl", b""
    for part in message.iter_parts():
        field_name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        if field_name == "purpose":
            purpose = payload.decode().strip()
        elif field_name == "file":
            name = str(part.get_filename() or name)
            data = payload
    return purpose, name, data


# ---- OpenAI batches ---------------------------------------------------------------------


def _openai_batches(
    sim: Simulator, api: BatchApi, *, method: str, rest: list[str], key: str, body: bytes
) -> Reply:
    if not rest and method == "POST":
        return _json(_openai_wire(_create_openai(sim, api, key, generate.parse_json(body))))
    if not rest and method == "GET":
        data = [_openai_wire(_settled(sim, b)) for b in api.batches.values() if b.api == "openai"]
        data.reverse()
        return _json({"object": "list", "data": data, "has_more": False,
                      "first_id": data[0]["id"] if data else None,
                      "last_id": data[-1]["id"] if data else None})  # fmt: skip
    batch = api.batches.get(rest[0])
    if batch is None or batch.api != "openai":
        raise _missing("batch")
    if rest[1:] == ["cancel"] and method == "POST":
        batch.cancelling = True
    elif rest[1:] or method != "GET":
        raise _missing("batch route")
    return _json(_openai_wire(_settled(sim, batch)))


def _create_openai(sim: Simulator, api: BatchApi, key: str, body: Any) -> SimBatch:
    endpoint = body.get("endpoint")
    if endpoint not in _KINDS:
        raise SimError(400, f"Unsupported endpoint {endpoint!r}.", param="endpoint")
    found = api.files.get(str(body.get("input_file_id")))
    if found is None:
        raise _missing("input file")
    lines = []
    for raw in found[2].splitlines():
        if raw.strip():
            line = orjson.loads(raw)
            if line.get("url") != endpoint:
                raise SimError(400, "A line's url differs from the batch's endpoint.")
            lines.append((str(line["custom_id"]), orjson.dumps(line["body"])))
    return _new(sim, api, kind="openai", endpoint=endpoint, lines=lines, key=key,
                metadata=body.get("metadata"))  # fmt: skip


def _new(sim: Simulator, api: BatchApi, *, kind: str, endpoint: str,
         lines: list[tuple[str, bytes]], key: str, metadata: Any) -> SimBatch:  # fmt: skip
    prefix = "batch_sim" if kind == "openai" else "msgbatch_sim"
    batch = SimBatch(f"{prefix}{next(api.ids):08x}", kind, endpoint, sim._wall(),
                     sim.clock.now() + sim.settings.batch_api.turnaround_seconds, lines, key,
                     metadata if isinstance(metadata, dict) else None)  # fmt: skip
    api.batches[batch.id] = batch
    api.created += 1
    return batch


def _settled(sim: Simulator, batch: SimBatch) -> SimBatch:
    """Answer the batch's lines once its turnaround has passed (or cancel them)."""
    if batch.status != "in_progress" or (sim.clock.now() < batch.ready_at and not batch.cancelling):
        return batch
    answered = (
        [] if batch.cancelling else [_answer(sim, batch, cid, raw) for cid, raw in batch.lines]
    )
    sim.batch_api.lines += len(answered)
    batch.ended = sim._wall()
    if batch.api == "openai":
        _openai_files(sim.batch_api, batch, answered)
    else:
        _anthropic_results(batch, answered)
    return batch


def _answer(sim: Simulator, batch: SimBatch, custom_id: str, raw: bytes) -> tuple[str, int, bytes]:
    if batch.api == "openai":
        try:
            reply = _openai_line(sim, batch, raw)
        except SimError as exc:
            reply = exc.reply()
    else:
        headers = {anthropic.API_KEY_HEADER: batch.key, anthropic.VERSION_HEADER: "2023-06-01"}
        reply = anthropic.handle(sim, path=anthropic.MESSAGES, headers=headers, raw=raw)
    sim.finish(reply)
    return custom_id, reply.status, reply.body


def _openai_line(sim: Simulator, batch: SimBatch, raw: bytes) -> Reply:
    if generate.parse_json(raw).get("stream"):
        raise SimError(400, "Streaming is not supported in a batch.", param="stream")
    headers = {"authorization": f"Bearer {batch.key}"}
    return sim._generate(_KINDS[batch.endpoint], headers, raw)


def _openai_files(api: BatchApi, batch: SimBatch, answered: list[tuple[str, int, bytes]]) -> None:
    out: list[bytes] = []
    err: list[bytes] = []
    for n, (custom_id, status, body) in enumerate(answered):
        ok = 200 <= status < 300
        parsed = orjson.loads(body)
        line = {"id": f"batch_req_{batch.id}_{n}", "custom_id": custom_id,
                "response": {"status_code": status, "request_id": f"req_{batch.id}_{n}",
                             "body": parsed},
                "error": None}  # fmt: skip
        (out if ok else err).append(orjson.dumps(line))
    for lines, name in ((out, "output"), (err, "error")):
        if lines:
            file_id = f"file-sim{next(api.ids):08x}"
            api.files[file_id] = ("batch_output", f"{batch.id}_{name}.jsonl",
                                  b"\n".join(lines) + b"\n")  # fmt: skip
            setattr(batch, f"{name}_file_id", file_id)
    batch.counts = {"total": len(batch.lines), "completed": len(out), "failed": len(err)}
    batch.status = "cancelled" if batch.cancelling else "completed"


def _openai_wire(batch: SimBatch) -> dict[str, Any]:
    done = batch.status != "in_progress"
    ended = int(batch.ended) if batch.ended else None
    counts = batch.counts or {"total": len(batch.lines), "completed": 0, "failed": 0}
    return {
        "id": batch.id, "object": "batch", "endpoint": batch.endpoint, "errors": None,
        "input_file_id": "", "completion_window": "24h",
        "status": "cancelling" if batch.cancelling and not done else batch.status,
        "output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id,
        "created_at": int(batch.created), "in_progress_at": int(batch.created),
        "expires_at": int(batch.created) + 86400, "finalizing_at": ended,
        "completed_at": ended if batch.status == "completed" else None, "failed_at": None,
        "expired_at": None, "cancelling_at": None,
        "cancelled_at": ended if batch.status == "cancelled" else None,
        "request_counts": counts, "metadata": batch.metadata,
    }  # fmt: skip


# ---- Anthropic Message Batches ----------------------------------------------------------


def anthropic_reply(sim: Simulator, api: BatchApi, *, method: str, rest: list[str],
                    headers: Mapping[str, str], body: bytes) -> Reply:  # fmt: skip
    key, parsed = anthropic._authenticated(sim, headers, body if method == "POST" else b"{}")
    if not rest and method == "POST":
        requests = parsed.get("requests") if isinstance(parsed, dict) else None
        if not isinstance(requests, list) or not requests:
            raise SimError(400, "requests: at least one request is required")
        lines = [(str(r["custom_id"]), orjson.dumps(r["params"])) for r in requests]
        made = _new(sim, api, kind="anthropic", endpoint="/v1/messages", lines=lines, key=key,
                    metadata=None)  # fmt: skip
        return _json(_anthropic_wire(made))
    if not rest and method == "GET":
        data = [_anthropic_wire(_settled(sim, b)) for b in api.batches.values()
                if b.api == "anthropic"][::-1]  # fmt: skip
        return _json({"data": data, "has_more": False,
                      "first_id": data[0]["id"] if data else None,
                      "last_id": data[-1]["id"] if data else None})  # fmt: skip
    batch = api.batches.get(rest[0])
    if batch is None or batch.api != "anthropic":
        raise _missing("message batch")
    if rest[1:] == ["cancel"] and method == "POST":
        batch.cancelling = True
    elif rest[1:] == ["results"] and method == "GET":
        _settled(sim, batch)
        if batch.status != "ended":
            raise SimError(400, "The message batch has not ended yet.")
        return Reply(status=200, body=batch.results, content_type="application/x-jsonl")
    elif rest[1:] or method != "GET":
        raise _missing("message batch route")
    return _json(_anthropic_wire(_settled(sim, batch)))


def _anthropic_results(batch: SimBatch, answered: list[tuple[str, int, bytes]]) -> None:
    lines, counts = [], dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
    answered_ids = {cid for cid, _, _ in answered}
    for custom_id, status, body in answered:
        parsed = orjson.loads(body)
        if 200 <= status < 300:
            result = {"type": "succeeded", "message": parsed}
        else:
            result = {"type": "errored", "error": parsed}
        counts[result["type"]] += 1
        lines.append(orjson.dumps({"custom_id": custom_id, "result": result}))
    for custom_id, _ in batch.lines:
        if custom_id not in answered_ids:
            counts["canceled"] += 1
            lines.append(orjson.dumps({"custom_id": custom_id, "result": {"type": "canceled"}}))
    batch.results = b"\n".join(lines) + b"\n"
    batch.counts = counts
    batch.status = "ended"


def _stamp(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _anthropic_wire(batch: SimBatch) -> dict[str, Any]:
    ended = batch.status == "ended"
    processing = 0 if ended else len(batch.lines)
    counts = batch.counts or dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
    return {
        "id": batch.id, "type": "message_batch",
        "processing_status": "ended" if ended else ("canceling" if batch.cancelling
                                                    else "in_progress"),
        "request_counts": {"processing": processing, **counts},
        "ended_at": _stamp(batch.ended), "created_at": _stamp(batch.created),
        "expires_at": _stamp(batch.created + 86400), "archived_at": None,
        "cancel_initiated_at": _stamp(batch.created) if batch.cancelling else None,
        "results_url": f"/v1/messages/batches/{batch.id}/results" if ended else None,
    }  # fmt: skip

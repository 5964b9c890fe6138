"""A provider batch's result lines as the job's own (batch/defer.py), and their price.

- `result_line`: one OpenAI output/error-file line, or one Anthropic Message Batches result
  (`{"custom_id", "result": {"type": "succeeded" | "errored" | "canceled" | "expired", ...}}`),
  as the line the job's output or error file gets (OpenAI's shape, as `batch/lines.py` writes
  it); an Anthropic message becomes a `chat.completion` the same way a live Anthropic answer
  does (protocol/anthropic/upstream_answer.py), usage included.
- `LineRecords`: each answered line becomes a finished-request record through the gateway's
  one `Recorder` (`Host.recorder`, the one `Measure` emits through), with `trace.batch` set:
  the ledger prices it at the provider's batch rates and counts the difference as the `batch`
  lever's savings in /metrics, and every sink (key budgets, `Deps.sinks`) sees it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from levergate.batch.lines import error_line, output_line
from levergate.batch.model import ENDPOINTS, Job
from levergate.core.controls import Principal, Priority
from levergate.layers.measure.recorder import Seen
from levergate.protocol.anthropic.upstream_answer import chat_completion

if TYPE_CHECKING:
    from levergate.extension import Host

log = logging.getLogger("levergate.batch.defer")
ANTHROPIC_STATUS = {"invalid_request_error": 400, "authentication_error": 401,
                    "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                    "rate_limit_error": 429, "overloaded_error": 529}  # fmt: skip
ENDED = {"canceled": ("batch_cancelled", "The provider's batch was cancelled before it ran."),
         "expired": ("batch_expired", "The provider's batch expired before it ran.")}  # fmt: skip


def result_line(
    line: dict[str, Any],
    *,
    api: str,
    job_id: str,
    names: dict[int, str],
    now: int,
    request_ids: dict[int, str] | None = None,
) -> tuple[int, bool, bytes, dict[str, Any] | None] | None:
    """(idx, ok, the job's result line, the answer body to price) — None for a line that is
    not one of ours or already finished (`names` holds the open lines). `request_ids`: each
    line's request id when it is not `<job_id>-<idx>` (a pack's lines belong to many jobs)."""
    custom = line.get("custom_id")
    if not isinstance(custom, str) or not custom.startswith("l") or not custom[1:].isdigit():
        return None
    idx = int(custom[1:])
    if idx not in names:
        return None
    name = names[idx]
    request_id = request_ids[idx] if request_ids is not None else f"{job_id}-{idx}"
    if api == "openai":
        response = _obj(line.get("response"))
        if not response:
            error = _obj(line.get("error"))
            code = str(error.get("code") or "provider_error")
            message = str(error.get("message") or "The provider's batch failed this request.")
            return idx, False, error_line(name, code=code, message=message[:1000]), None
        status = int(response.get("status_code") or 500)
        body = response.get("body")
        ok = 200 <= status < 300 and isinstance(body, dict)
        failure = None if ok else _error_of(body)
        text = output_line(name, request_id=request_id, status=status, body=body, error=failure)
        return idx, ok, text, body if ok else None
    result = _obj(line.get("result"))
    kind = result.get("type")
    if kind == "succeeded" and isinstance(result.get("message"), dict):
        body = chat_completion(result["message"], created=now)
        text = output_line(name, request_id=request_id, status=200, body=body, error=None)
        return idx, True, text, body
    if kind in ENDED:
        code, message = ENDED[kind]
        return idx, False, error_line(name, code=code, message=message), None
    envelope = _obj(result.get("error"))
    inner = _obj(envelope.get("error")) or envelope
    status = ANTHROPIC_STATUS.get(str(inner.get("type")), 500)
    error = {"code": str(inner.get("type") or "provider_error"),
             "message": str(inner.get("message") or "")[:1000]}  # fmt: skip
    body = {"error": {**error, "type": error["code"], "param": None}}
    return idx, False, output_line(name, request_id=request_id, status=status, body=body,
                                   error=error), None  # fmt: skip


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _error_of(body: Any) -> dict[str, Any]:
    inner = body.get("error") if isinstance(body, dict) else None
    if isinstance(inner, dict):
        return {"code": str(inner.get("code") or inner.get("type") or "provider_error"),
                "message": str(inner.get("message") or "")[:1000]}  # fmt: skip
    return {"code": "provider_error", "message": "The provider answered with an error."}


class LineRecords:
    """Deferred answers priced and counted as requests, through the gateway's one `Recorder`
    (every sink sees them: Prometheus, the ledger, key budgets, `Deps.sinks`)."""

    def __init__(self, host: Host) -> None:
        self._host = host

    def record(self, job: Job, *, idx: int, body: dict[str, Any], upstream: str,
               upstream_model: str) -> None:  # fmt: skip
        """Emit the record of one answered line, with the origin `deferred` (an async request
        deferred to a provider's batch API is one too) and its usage as the provider sent it."""
        host = self._host
        request = job.extra.get("request") if job.kind == "async" else None
        kind = ENDPOINTS.get(job.endpoint, "chat")
        model = request.get("model") if isinstance(request, dict) else body.get("model")
        body_of_record = {"model": str(model or upstream_model), **_minimal(kind)}
        try:
            call = host.make_call(kind, body_of_record, request_id=f"{job.id}-{idx}")
            call = call.with_controls(priority=Priority.BATCH)
            call = call.with_ctx(principal=Principal(tenant=job.tenant, key_id=job.key_id))
            trace = call.ctx.trace
            trace.tenant, trace.key_id, trace.batch = job.tenant, job.key_id, True
            trace.upstream, trace.upstream_model = upstream, upstream_model
            trace.alias = call.model if call.model in host.models else ""
            trace.origin = "deferred"
            usage = body.get("usage")
            seen = Seen(usage=usage if isinstance(usage, dict) else None, answer=body, total=0.0)
            host.recorder.finish(call, seen)
        except Exception as exc:  # the ledger never fails a result being written
            log.warning("defer: cannot record %s-%d: %s", job.id, idx, exc)


def _minimal(kind: str) -> dict[str, Any]:
    """The least body `make_call` accepts for `kind` (the record needs only the model)."""
    if kind == "embedding":
        return {"input": "x"}
    if kind == "completion":
        return {"prompt": "x"}
    return {"messages": [{"role": "user", "content": "x"}]}

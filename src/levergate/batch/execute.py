"""One batch line through the gateway's whole pipeline, as the client that made the batch.

The line becomes a `Call` at priority `batch` for the batch's tenant (and, with auth on, the
gateway key that made it: its model rights, rates and budgets apply, and a key revoked since
stops its batch's lines), so every lever the HTTP routes get applies here too — caches,
limits, routing, fallback, the service tier chosen for an async request's own deadline
(`x-levergate-deadline`, while it is ahead: its call's deadline). The request id is the line's
own (`<batch id>-<line>`), stable across reruns, so logs tie every attempt of a line together.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from levergate.batch.lines import output_line
from levergate.batch.model import ASYNC_PREFIX, ENDPOINTS, Claim
from levergate.batch.runner import Done, Later
from levergate.core.call import Call
from levergate.core.controls import Principal, Priority
from levergate.core.json_bound import parse_json
from levergate.core.reply import Completed, Reply
from levergate.errors import BudgetExceeded, LevergateError, NotFound, Overloaded, error_payload

if TYPE_CHECKING:
    from levergate.config.batch import BatchSettings
    from levergate.extension import Host
    from levergate.stores.keys import KeyRecord


class LineExecutor:
    def __init__(self, host: Host, *, settings: BatchSettings) -> None:
        self._host = host
        self._settings = settings

    async def __call__(self, claim: Claim) -> Done | Later:
        request_id = f"{claim.job_id}-{claim.idx}"
        try:
            key = await self._key(claim)
            call = self._host.make_call(
                ENDPOINTS[claim.endpoint], parse_json(claim.request), request_id=request_id
            ).with_controls(priority=Priority.BATCH, deadline=self._deadline(claim))
            call = call.with_ctx(principal=Principal(tenant=claim.tenant), key=key)
            # An async request is a one-line job of its own kind (batch/async_requests.py).
            call.ctx.trace.origin = "async" if claim.job_id.startswith(ASYNC_PREFIX) else "batch"
            reply = await self._serve(call)
        except LevergateError as exc:
            if self._retryable(exc) and claim.attempts < self._settings.max_attempts:
                return Later(max(exc.retry_after or 0.0, self._settings.retry_seconds))
            status, payload, _ = error_payload(exc)
            error = {"code": exc.code or exc.type, "message": exc.message}
            line = output_line(claim.custom_id, request_id=request_id, status=status,
                               body=payload, error=error)  # fmt: skip
            return Done(ok=False, result=line)
        if not isinstance(reply, Completed):  # lines are never streamed (lines.validate_line)
            await reply.aclose()
            raise TypeError("a batch line came back as a stream")
        ok = 200 <= reply.status < 300
        line = output_line(claim.custom_id, request_id=request_id, status=reply.status,
                           body=reply.data, error=None)  # fmt: skip
        return Done(ok=ok, result=line)

    def _deadline(self, claim: Claim) -> float | None:
        """An async request's deadline on the gateway's clock (None: none, or already past)."""
        if claim.not_after is None:
            return None
        left = claim.not_after - time.time()
        return self._host.clock.now() + left if left > 0 else None

    async def _serve(self, call: Call) -> Reply:
        """The line's answer. The gateway's own pacing (its limits shed a line that would wait
        past the longest wait, `Overloaded` with a retry-after) is no refusal by the provider,
        so it costs the line no attempt: it waits here, still claimed, and goes again — which
        lets `concurrency` be as large as the provider's rate x answer time needs."""
        waited, most = 0.0, float(self._settings.completion_window_seconds)
        clock = self._host.clock
        while True:
            try:
                return await self._host.serve(call)
            except Overloaded as exc:
                if exc.retry_after is None or waited >= most:
                    raise
                await clock.sleep(exc.retry_after)
                waited += exc.retry_after

    async def _key(self, claim: Claim) -> KeyRecord | None:
        kit = self._host.keyring
        if claim.key_id is None or kit is None or not self._host.settings.auth.enabled:
            return None
        try:
            return await kit.keyring.find(claim.key_id)
        except NotFound:
            return None

    @staticmethod
    def _retryable(exc: LevergateError) -> bool:
        if isinstance(exc, BudgetExceeded):
            return False
        status = exc.http_status
        return status >= 500 or status in (408, 409, 429)

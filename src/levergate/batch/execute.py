"""One batch line through the gateway's whole pipeline, as the client that made the batch.

The line becomes a `Call` at priority `batch` for the batch's tenant (and, with auth on, the
gateway key that made it: its model rights, rates and budgets apply, and a key revoked since
stops its batch's lines), so every lever the HTTP routes get applies here too — caches,
limits, routing, fallback. The request id is the line's own (`<batch id>-<line>`), stable
across reruns, so logs tie every attempt of a line together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from levergate.batch.lines import output_line
from levergate.batch.model import ENDPOINTS, Claim
from levergate.batch.runner import Done, Later
from levergate.core.call import Call, Priority
from levergate.core.reply import Completed, Reply
from levergate.errors import BudgetExceeded, LevergateError, NotFound, Overloaded, error_payload

if TYPE_CHECKING:
    from levergate.config.batch import Batch
    from levergate.gateway import Gateway
    from levergate.stores.keys import KeyRecord


class LineExecutor:
    def __init__(self, gateway: Gateway, *, settings: Batch) -> None:
        self._gateway = gateway
        self._settings = settings

    async def __call__(self, claim: Claim) -> Done | Later:
        request_id = f"{claim.job_id}-{claim.idx}"
        try:
            key = await self._key(claim)
            call = self._gateway.make_call(
                ENDPOINTS[claim.endpoint], orjson.loads(claim.request), request_id=request_id
            ).with_ctx(priority=Priority.BATCH, tenant=claim.tenant, key=key)
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

    async def _serve(self, call: Call) -> Reply:
        """The line's answer. The gateway's own pacing (its limits shed a line that would wait
        past the longest wait, `Overloaded` with a retry-after) is no refusal by the provider,
        so it costs the line no attempt: it waits here, still claimed, and goes again — which
        lets `concurrency` be as large as the provider's rate x answer time needs."""
        waited, most = 0.0, float(self._settings.completion_window_seconds)
        clock = self._gateway.pipeline.clock
        while True:
            try:
                return await self._gateway.serve(call)
            except Overloaded as exc:
                if exc.retry_after is None or waited >= most:
                    raise
                await clock.sleep(exc.retry_after)
                waited += exc.retry_after

    async def _key(self, claim: Claim) -> KeyRecord | None:
        kit = self._gateway.pipeline.keys
        if claim.key_id is None or kit is None or not self._gateway.settings.auth.enabled:
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

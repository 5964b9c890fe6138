"""The job kinds built on the Batch API's store and runner: deferral to provider batch APIs
(batch/defer.py) and async single requests (batch/async_requests.py), each a job-level step
the runner asks before its own machine. Built by `BatchService` when their settings are on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from levergate.batch.async_requests import AsyncRequests
from levergate.batch.defer import Deferral

if TYPE_CHECKING:
    from levergate.batch.service import BatchService
    from levergate.gateway import Gateway


def extend(gateway: Gateway, service: BatchService) -> tuple[Deferral | None, AsyncRequests | None]:
    s = gateway.settings
    deferral = (
        Deferral(gateway, store=service.store, clock=service.clock, disk=service.disk)
        if s.defer.enabled else None
    )  # fmt: skip
    requests = None
    if s.async_requests.enabled:
        requests = AsyncRequests(settings=s.async_requests, defer=s.defer, hooks=s.webhooks,
                                 store=service.store, clock=service.clock, deferral=deferral,
                                 limits=s.limits)  # fmt: skip
        service.runner.steps.append(requests.step)
    if deferral is not None:
        service.runner.steps.append(deferral.step)
    return deferral, requests

"""Deferral to provider batch APIs, async single requests and their signed webhooks
(batch/defer.py, batch/async_requests.py, levergate/webhooks.py).

All three ride on the Batch API's job store and runner, so they need `batch.enabled` (a clear
error at start otherwise). Off by default.

    batch: {enabled: true}
    async_requests:
      enabled: true
    defer:
      enabled: true
      routes:                        # per-alias route policy
        gpt-4o-mini: {batch_lines: true, async_requests: true}
    webhooks:
      targets:
        billing: {url: "https://hooks.example.com/levergate", secret_env: BILLING_HOOK_SECRET}

A request is deferred (packed into its provider's batch API, for its ~50% discount) when it
says so (`x-levergate-defer: 24h`), when its deadline (`x-levergate-deadline`, Unix seconds) is
at least `defer.min_deadline_seconds` away, or when it is an async request to an alias whose
route policy has `async_requests: true`. A Batch-API batch is deferred when every line names an
alias whose policy has `batch_lines: true`, or its metadata says `levergate_defer: "true"`.
A request or batch whose aliases cannot be deferred (a local engine, embeddings to Anthropic)
runs the ordinary way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field, SecretStr, model_validator

from levergate.config.base import WILDCARD, _Strict

if TYPE_CHECKING:
    from levergate.config.batch import BatchSettings


class DeferRouteSettings(_Strict):
    """One alias's deferral policy."""

    # Batch-API lines naming this alias go to the provider's batch API.
    batch_lines: bool = True
    # Async single requests to this alias are deferred even without a defer header.
    async_requests: bool = False


class DeferSettings(_Strict):
    enabled: bool = False
    routes: dict[str, DeferRouteSettings] = Field(default_factory=dict)
    # A deadline at least this far away makes a request deferrable: providers promise batch
    # results within 24 hours.
    min_deadline_seconds: float = Field(24 * 3600.0, ge=0)
    # Polling a submitted provider batch: first after `poll_first_seconds`, then each wait
    # `poll_factor` times longer, at most `poll_max_seconds` (batches take minutes to hours).
    poll_first_seconds: float = Field(5.0, gt=0)
    poll_factor: float = Field(2.0, ge=1.0, le=10.0)
    poll_max_seconds: float = Field(300.0, gt=0)
    # A provider call that fails (down, 5xx) is retried on the same schedule, this many times
    # in a row before the deferral gives up and the lines run the ordinary way.
    max_failures: int = Field(8, ge=1, le=1000)
    # Lines per provider batch (OpenAI and Anthropic both take at most 50,000 / 100,000); a
    # pack of deferred async requests goes out when it holds this many.
    max_lines: int = Field(50_000, ge=1, le=100_000)
    # Deferred async requests with the same target wait for each other at most this long
    # before going out as one provider batch (sooner when the earliest deadline among them
    # needs it: batch/defer_pack.py). 0 sends each as soon as its step comes.
    pack_max_wait_seconds: float = Field(60.0, ge=0, le=24 * 3600)
    # A provider's output or error file is read at most this large (bodies are capped).
    max_result_bytes: int = Field(512 * 1024 * 1024, ge=1024)
    timeout_seconds: float = Field(60.0, gt=0)


class WebhookTargetSettings(_Strict):
    """A receiver named in config: requests pick it by name, never by URL (no SSRF)."""

    url: str
    secret: SecretStr | None = None
    secret_env: str | None = None  # read once at load, like an upstream's api_key_env
    timeout_seconds: float = Field(10.0, gt=0, le=300)

    @model_validator(mode="after")
    def _checked(self) -> WebhookTargetSettings:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("webhook url must start with http:// or https://")
        if self.secret is None and self.secret_env:
            value = os.environ.get(self.secret_env)
            if value:
                object.__setattr__(self, "secret", SecretStr(value))
            else:
                raise ValueError(f"secret_env names {self.secret_env}, which is not set")
        if self.secret is None or len(self.secret.get_secret_value()) < 16:
            raise ValueError("a webhook target needs a `secret` (or `secret_env`) of 16+ chars")
        return self


class WebhooksSettings(_Strict):
    targets: dict[str, WebhookTargetSettings] = Field(default_factory=dict)
    # Delivery: attempts at 0, base, base*factor, ... seconds (capped), then given up.
    max_attempts: int = Field(8, ge=1, le=50)
    backoff_base_seconds: float = Field(2.0, gt=0)
    backoff_factor: float = Field(2.0, ge=1.0, le=10.0)
    backoff_max_seconds: float = Field(600.0, gt=0)
    # The replay window receivers should enforce (levergate.webhooks.verify's default).
    tolerance_seconds: int = Field(300, ge=1)
    # Deliveries run off the job loop (batch/deliveries.py): this many at once per process,
    # at most `queue` waiting, and one target at most half the workers, so a receiver that
    # hangs (each attempt ends at its target's `timeout_seconds`, counted over the whole
    # exchange) delays neither the batches nor other targets' deliveries. A hanging receiver
    # once stalled every tenant's batches: a 1-line batch took 201 s instead of 1 s.
    workers: int = Field(8, ge=1, le=256)
    queue: int = Field(1000, ge=1, le=100_000)


class AsyncRequestsSettings(_Strict):
    enabled: bool = False
    # How long a finished async request's result is kept readable is not bounded here: it
    # lives in the job store as a batch does.


def check_deferral(
    batch: BatchSettings,
    defer: DeferSettings,
    requests: AsyncRequestsSettings,
    aliases: Sequence[str],
) -> None:
    """Both ride on the Batch API's store and runner; a route names a configured alias."""
    if (defer.enabled or requests.enabled) and not batch.enabled:
        raise ValueError("defer and async_requests need batch.enabled (its job store and runner)")
    for alias in defer.routes:
        if alias not in aliases and WILDCARD not in aliases:
            raise ValueError(f"defer.routes names unknown model {alias!r}")

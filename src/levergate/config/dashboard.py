"""The live dashboard (`dashboard`, levergate/dashboard/): `/dashboard` and `/dashboard/keys`.

On by default: the pages are static files and cost nothing until opened. Who may read it: with
auth on, or whenever `admin.token` is set, the admin token or a gateway key with the
`dashboard` role (read-only: no keys page actions, no bodies); with auth off and no admin
token, anyone who reaches the port (as `/metrics` then). Prompt and answer text shows only to
the admin token, and only where `request_log.bodies` logged it.
"""

from __future__ import annotations

from pydantic import Field

from levergate.config.base import _Strict

__all__ = ["DashboardSettings"]


class DashboardSettings(_Strict):
    """The pages at `/dashboard` (charts over the request log and the gateway's own metrics,
    the request table) and `/dashboard/keys` (the admin API's keys)."""

    # Off: `/dashboard` and everything under it is a 404.
    enabled: bool = True
    # How often an open page asks for fresh numbers (seconds); the page may be told otherwise.
    poll_seconds: float = Field(5.0, ge=1, le=300)
    # Rows of the request table per page when `limit` is not given, and the largest `limit`.
    page_size: int = Field(50, ge=1, le=1000)
    max_page_size: int = Field(200, ge=1, le=1000)

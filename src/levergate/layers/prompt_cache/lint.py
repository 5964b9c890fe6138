"""Prefix linting for one model alias: sampled requests compared with the last few sampled
ones (policies/prefix_lint.py), each finding counted, logged once per kind and position, kept
for the traffic analyzer, and noted on the request's trace for the request log."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from levergate.config.prompt_cache import PrefixLintSettings
from levergate.core.call import Trace
from levergate.policies import prefix_lint
from levergate.policies.affinity import prompt_bytes

log = logging.getLogger("levergate.prompt_cache")


@dataclass(frozen=True, slots=True)
class Finding:
    """Something early in a route's prompts that keeps the provider's prefix cache cold."""

    model: str
    kind: str  # "timestamp", "uuid", ..., "varying text", "tool order", "schema key order"
    position: int  # byte offset in the prompt (tools first, then the messages, as JSON)
    length: int
    shared_after: int  # bytes that would be cacheable after it
    shape: str  # the span's shape (digits 9, letters a), never its text
    at: float  # when it was seen (the gateway's clock)

    def describe(self) -> str:
        return (
            f"{self.kind} at byte {self.position} ({self.length} bytes, shaped "
            f"{self.shape!r}) keeps {self.shared_after} bytes after it from being cached"
        )


class Findings:
    """The newest findings of every alias, for `levergate analyze` and the admin API."""

    def __init__(self, *, keep: int) -> None:
        self._items: deque[Finding] = deque(maxlen=max(1, keep))
        self._keep = keep

    def add(self, finding: Finding) -> None:
        if self._keep:
            self._items.appendleft(finding)

    def newest(self) -> list[Finding]:
        return list(self._items)


class Linter:
    def __init__(
        self, settings: PrefixLintSettings, *, model: str, findings: Findings, counter: Any
    ) -> None:
        self._s = settings
        self._model = model
        self._findings = findings
        self._counter = counter  # prometheus Counter with labels (model, kind)
        self._samples: deque[tuple[bytes, Any]] = deque(maxlen=settings.compare_with)
        self._next = 0.0
        self._logged: set[tuple[str, int]] = set()

    def due(self, now: float) -> bool:
        return now >= self._next

    def check(self, body: Mapping[str, Any], trace: Trace, *, now: float) -> Finding | None:
        self._next = now + self._s.every_seconds
        data = prompt_bytes(body)[: self._s.scan_bytes]
        tools = body.get("tools")
        found = None
        for old, old_tools in self._samples:
            found = self._compare(old, old_tools, data, tools, now)
            if found is not None:
                break
        self._samples.append((data, tools))
        if found is not None:
            self._report(found, trace)
        return found

    def _compare(
        self, old: bytes, old_tools: Any, data: bytes, tools: Any, now: float
    ) -> Finding | None:
        if prefix_lint.tool_order_varies(old_tools, tools):
            return Finding(self._model, "tool order", 0, 0, len(data), "", now)
        if prefix_lint.schema_keys_vary(old_tools, tools):
            return Finding(self._model, "schema key order", 0, 0, len(data), "", now)
        span = prefix_lint.varying_span(
            old, data, max_span=self._s.max_span_bytes, min_shared=self._s.min_shared_bytes,
            scan=self._s.scan_bytes,
        )  # fmt: skip
        if span is None:
            return None
        return Finding(self._model, span.kind, span.position, span.length, span.shared_after,
                       span.shape, now)  # fmt: skip

    def _report(self, finding: Finding, trace: Trace) -> None:
        self._counter.labels(self._model, finding.kind).inc()
        self._findings.add(finding)
        trace.note(layer="prompt_cache", text=finding.describe())
        key = (finding.kind, finding.position)
        if key not in self._logged and len(self._logged) < 1000:
            self._logged.add(key)
            log.warning("model %s: %s", self._model, finding.describe())

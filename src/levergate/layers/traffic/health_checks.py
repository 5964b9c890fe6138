"""HealthChecks: active probes of every endpoint key, feeding the passive ejection state.

Not a layer in the request path but a background job (`Pipeline.background`, started and
cancelled by `Gateway`, restarted after a crash by `core.jobs.Supervisor`), off by default
(`traffic.health_checks`). Passive ejection (`layers.traffic.outlier`) learns only from client
requests: an endpoint that dies while idle is found out by the next requests that fail on it,
and after its ejection time the half-open state spends a real request to learn whether it is
back. Probes learn both without any client traffic.

There is one verdict per endpoint — `EndpointState.health`, which the balancer reads — and the
probes act on it through `EjectionGroup`, like every other ejection:

- `unhealthy_threshold` failed probes in a row eject the endpoint (counted, logged, capped by
  `ejection.max_ejected_share`, so the last endpoints keep serving — fail open);
- while its probes keep failing it is held out past the next probe: no half-open request is
  sent to an endpoint already known to be down;
- `healthy_threshold` passing probes in a row after that readmit it at once.

An endpoint ejected passively while its probes pass (it lists its models but completions fail:
an overloaded GPU, a broken deployment) is left to the passive state machine, whose half-open
probe is a real completion. A listing proves the server is up, not that it serves; readmitting
on it (Envoy's `successful_active_health_check_uneject_host`) would let such an endpoint fail a
burst of requests after every probe interval.

Each endpoint key is probed on its own loop (`interval_seconds`, stretched by a random share up
to `jitter` so replicas spread their probes), with the injected `Clock` for every sleep, so
tests drive it with a `ManualClock`. The probes' state is per process, like all ejection state.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from levergate.config import HealthCheckSettings, UpstreamSettings
from levergate.core.clock import Clock
from levergate.core.jobs import BackgroundJob
from levergate.layers.traffic.endpoints import EjectionGroup, EndpointState
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.policies.health import CheckPolicy, Verdict
from levergate.upstreams.probe import HttpProbe, Probe
from levergate.upstreams.wire import HttpClient

if TYPE_CHECKING:
    from levergate.layers.shared import Shared
    from levergate.layers.traffic.keys import EndpointKey

_log = logging.getLogger(__name__)


class HealthChecks:
    @classmethod
    def job(
        cls,
        settings: HealthCheckSettings,
        *,
        keys: Sequence[EndpointKey],
        shared: Shared,
        http_client: Callable[[UpstreamSettings], HttpClient],
    ) -> BackgroundJob | None:
        """The job probing every remote endpoint key, or None when checks are off (or there is
        nothing remote to probe). Each probe has a client of its own, closed with the pipeline."""
        if not settings.enabled:
            return None
        targets = []
        for key in keys:
            if key.upstream is None:
                continue  # in-process: nothing to probe over the network
            probe = HttpProbe.of(
                key.upstream, key.key, path=settings.path, timeout=settings.timeout_seconds,
                http_client=http_client,
            )  # fmt: skip
            shared.closers.append(probe.aclose)
            targets.append((key.state, probe))
        if not targets:
            return None
        checks = cls(
            targets=targets, settings=settings, group=shared.traffic.group, clock=shared.clock,
            rng=shared.rng(), metrics=shared.traffic.metrics,
        )  # fmt: skip
        return BackgroundJob("health_checks", checks.run)

    def __init__(
        self,
        *,
        targets: Sequence[tuple[EndpointState, Probe]],
        settings: HealthCheckSettings,
        group: EjectionGroup,
        clock: Clock,
        rng: random.Random,
        metrics: TrafficMetrics,
    ) -> None:
        self._targets = tuple(targets)
        self._settings = settings
        self._policy = CheckPolicy(
            unhealthy_threshold=settings.unhealthy_threshold,
            healthy_threshold=settings.healthy_threshold,
        )
        self._group = group
        self._clock = clock
        self._rng = rng
        self._metrics = metrics
        # Out for at least one more interval and probe after a failed one: a late probe (busy
        # loop) must not let the ejection lapse into half-open while the endpoint is down.
        self._hold = (
            2 * settings.interval_seconds * (1 + settings.jitter) + settings.timeout_seconds
        )
        self.verdicts: dict[str, Verdict] = {state.name: Verdict() for state, _ in self._targets}

    async def run(self) -> None:
        """Probe every endpoint key until cancelled (the gateway closing)."""
        async with asyncio.TaskGroup() as loops:
            for state, probe in self._targets:
                loops.create_task(self._watch(state, probe))

    async def _watch(self, state: EndpointState, probe: Probe) -> None:
        # The first probe at once (spread by the jitter): a dead endpoint is found at startup.
        await self._clock.sleep(self._spread())
        while True:
            self.judge(state, await probe())
            await self._clock.sleep(self._settings.interval_seconds + self._spread())

    def judge(self, state: EndpointState, failure: str | None) -> None:
        """Act on one probe's outcome (`failure` None: it passed). Public for tests."""
        now = self._clock.now()
        before = self.verdicts[state.name]
        after = before.after(passed=failure is None, policy=self._policy)
        self.verdicts[state.name] = after
        state.probed_down = after.down
        self._metrics.health_checks.labels(state.name, "pass" if failure is None else "fail").inc()
        if after.down:
            if not before.down:
                _log.warning("endpoint %s failed its health checks: %s", state.name, failure)
            self._group.keep_out(state, now, until=now + self._hold)
        elif before.down:
            _log.warning("endpoint %s passes its health checks again", state.name)
            self._group.readmit(state, now)

    def _spread(self) -> float:
        return self._rng.uniform(0.0, self._settings.jitter * self._settings.interval_seconds)

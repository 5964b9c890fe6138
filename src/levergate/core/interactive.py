"""Client requests in flight on this process, counted by the edge (server/edge.py): what the
batch runner yields to (batch/runner.py). Interactive traffic first is a product promise, and
both share one event loop: every batch line in flight is work each client request waits
behind, so while any client request is being served the runner keeps fewer lines in flight
(`batch.share_while_interactive`), and takes its full `concurrency` again once none is."""

from __future__ import annotations

from collections.abc import Callable


class Interactive:
    def __init__(self) -> None:
        self.in_flight = 0
        self._quiet: list[Callable[[], None]] = []

    def on_quiet(self, listener: Callable[[], None]) -> None:
        """Call `listener` each time the last client request in flight ends."""
        self._quiet.append(listener)

    def serving(self) -> Interactive:
        """One client request in flight for a `with` block: the counter is its own context
        manager (one `__enter__`, one `__exit__` a request; a generator-based one cost ~10
        calls on the hot path: issue 22)."""
        return self

    def __enter__(self) -> None:
        self.in_flight += 1

    def __exit__(self, *exc: object) -> None:
        self.in_flight -= 1
        if not self.in_flight:
            for listener in self._quiet:
                listener()

"""`Circuit`: when to skip a shared store that failed, and how to find out it is back.

Used by `SafeKV` (the cache store) and `FailoverLimitStore` (the rate-limit store): both stand
between every request and a store (Redis, SQLite) that may be down or, worse, hung — accepting
connections and never answering. Closed, every caller uses the store, and a caller whose call
fails has waited at most its own timeout. The failure opens the circuit for `cooldown`
seconds, in which every caller skips the store at once. Then it is half-open: exactly one
caller, the trial, uses the store while every other caller still skips it; the trial's
success closes the circuit, its failure opens it again. Before the trial, each cool-down let
every request that arrived while the first one waited out its timeout wait too: a hung Redis
stalled every request for 1.1 s every ~2 s.

Only failures of the store itself open it: a store that answered with a refusal of one
request's own data (a bad expiry, a value too large) is up, and says so (`StoreRefused`).
"""

from __future__ import annotations

from levergate.core.clock import Clock


class Circuit:
    def __init__(self, *, cooldown: float, clock: Clock) -> None:
        self._cooldown = cooldown
        self._clock = clock
        self._open_until: float | None = None  # None: closed
        self._trial = False

    @property
    def closed(self) -> bool:
        return self._open_until is None

    def admits(self) -> bool:
        """Whether this caller may use the store now; a True while open makes it the trial,
        which must end in `succeeded`, `failed` or `abandoned`."""
        if self._open_until is None:
            return True
        if self._trial or self._clock.now() < self._open_until:
            return False
        self._trial = True
        return True

    def succeeded(self) -> bool:
        """The store answered. True when this closed an open circuit (the store is back)."""
        reopened = self._open_until is not None
        self._open_until, self._trial = None, False
        return reopened

    def failed(self) -> bool:
        """The store failed. True when this opened a closed circuit (a new outage)."""
        opened = self._open_until is None
        self._open_until, self._trial = self._clock.now() + self._cooldown, False
        return opened

    def abandoned(self) -> None:
        """The call ended with no verdict (cancelled): the next caller may try. (Called by a
        caller that was not the trial, it lets at worst one more trial start.)"""
        self._trial = False

"""The `x-levergate-*` headers that tell a client what its request did (`server.response_headers`;
the list is in config/server.py's `ResponseHeadersSettings`).

Measure sets them, the outermost layer, when the reply comes back up: everything below has
written its typed facts on the call's `Trace` by then (what answered, attempts, the budget left
at admission), and for a whole answer Measure prices the request before the answer goes out
(the same bill its finished-request record then uses: the pricing moved before the write, not
done twice). A stream's head leaves at its first token, when its cost is unknown: it gets the
alias, the attempts and the budget as it was at admission. HTTP trailers could carry the cost at
the end, but the SDKs and most proxies drop them, so the cost of a stream is in the ledger and
/metrics only.

Off, a header costs nothing; on, a handful of dict writes and number formats per request.
"""

from __future__ import annotations

from urllib.parse import quote

from levergate.config.server import ResponseHeadersSettings
from levergate.core.call import CacheOutcome, Call
from levergate.core.reply import Reply
from levergate.policies.pricing import Bill

MODEL_HEADER = "x-levergate-model"
ATTEMPTS_HEADER = "x-levergate-attempts"
RETRIES_HEADER = "x-levergate-retries"
COST_HEADER = "x-levergate-cost-usd"
SAVINGS_HEADER = "x-levergate-savings-usd"
BUDGET_HEADER = "x-levergate-budget-remaining-usd"
TIER_HEADER = "x-levergate-tier"
# Longer model names (only a client's, behind `*`) get no x-levergate-model header.
MAX_NAME_CHARS = 256
# Read once: a member read from its class costs ~900 instructions on CPython 3.11 (callgrind).
_MISS = CacheOutcome.MISS
# The served answers' bills whose header texts are remembered: at most this many.
SERVED_BILLS = 1024


class Disclose:
    """Writes the enabled headers on a reply; built only when at least one is on."""

    __slots__ = ("_attempts", "_budget", "_model", "_texts", "_tier")

    def __init__(self, settings: ResponseHeadersSettings) -> None:
        self._model = settings.model
        self._attempts = settings.attempts
        self._budget = settings.budget
        self._tier = settings.tier
        # A served answer's (a cache hit's) cost and savings texts by its bill: the ledger
        # bills every hit on one entry with one `Bill` (layers/measure/ledger.py), and the
        # texts are a function of it (a float's format costs ~2k instructions). Keyed by the
        # bill's id, the bill held beside them so the id is not reused; once full, it starts
        # over.
        self._texts: dict[int, tuple[Bill, str, str]] = {}

    @classmethod
    def of(cls, settings: ResponseHeadersSettings) -> Disclose | None:
        s = settings
        if not (s.model or s.attempts or s.cost or s.budget or s.tier):
            return None
        return cls(settings)

    def write(self, call: Call, reply: Reply, bill: Bill | None) -> None:
        """`bill`: the request's, for a whole answer with `cost` on (None otherwise)."""
        trace = call.ctx.trace
        headers = reply.headers
        cache = trace.cache
        if self._model and trace.alias and (cache is None or cache.outcome is _MISS):
            value = header_value(trace.alias)
            if value is not None:
                headers[MODEL_HEADER] = value
        if self._attempts:
            headers[ATTEMPTS_HEADER] = str(trace.attempts)
            headers[RETRIES_HEADER] = str(trace.retries)
        if self._tier and trace.tier is not None:
            headers[TIER_HEADER] = trace.tier.value
        spent = 0.0
        if bill is not None:
            spent = bill[0]  # `cost_usd` (a `Bill` field read by name is slow)
            if cache is None or cache.outcome is _MISS:
                headers[COST_HEADER], headers[SAVINGS_HEADER] = _texts(bill)
            else:
                known = self._texts.get(id(bill))
                if known is None or known[0] is not bill:
                    if len(self._texts) >= SERVED_BILLS:
                        self._texts.clear()
                    known = self._texts[id(bill)] = (bill, *_texts(bill))
                headers[COST_HEADER], headers[SAVINGS_HEADER] = known[1], known[2]
        if self._budget and trace.budget_left is not None:
            headers[BUDGET_HEADER] = f"{max(0.0, trace.budget_left - spent):.8f}"


def _texts(bill: Bill) -> tuple[str, str]:
    """The cost and savings headers' values of `bill`."""
    spent, _, _, savings = bill
    return f"{spent:.8f}", f"{sum(savings.values()):.8f}"


def header_value(name: str) -> str | None:
    """`name` as a header value: as it is when it is visible ASCII (every configured alias),
    percent-encoded otherwise (behind `*` the alias is the name the client sent, which may hold
    line breaks or any character), None beyond `MAX_NAME_CHARS` (not worth a header's room)."""
    if len(name) > MAX_NAME_CHARS:
        return None
    if name.isascii() and name.isprintable() and " " not in name:
        return name
    return quote(name, safe="/:@.-_~+", errors="backslashreplace")

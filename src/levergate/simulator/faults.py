"""Fault injection: which (if any) failure a generation request suffers.

Faults come from two places. Configured rates draw from the simulator's seeded RNG, so a run
with the same seed and the same request order fails the same way. A request header
`x-sim-fault: 500|503|529|429|hang|disconnect|malformed|slow` forces one fault on that request only,
so a test can trigger exactly the failure it is about, independently of the rates.

What each fault does on the wire is real at the socket level (see `server.py`): a hang never
writes a byte until the client leaves, a disconnect closes the TCP connection in the middle of
the body (an incomplete chunked stream, or fewer bytes than Content-Length), and a malformed
answer is a 200 whose body is not JSON.
"""

from __future__ import annotations

import enum
import random

from levergate.simulator.settings import FaultSettings

FAULT_HEADER = "x-sim-fault"


class Fault(enum.StrEnum):
    ERROR_500 = "500"
    ERROR_503 = "503"
    OVERLOADED = "529"  # Anthropic's overloaded_error
    RATE_LIMIT = "429"
    HANG = "hang"
    DISCONNECT = "disconnect"
    MALFORMED = "malformed"
    SLOW = "slow"


_BY_NAME = {fault.value: fault for fault in Fault}


def parse_forced(value: str | None) -> Fault | None:
    """The fault a request header forces; raises ValueError naming the valid values."""
    if value is None:
        return None
    fault = _BY_NAME.get(value.strip().lower())
    if fault is None:
        raise ValueError(
            f"Unknown {FAULT_HEADER} value {value!r}; expected one of: {', '.join(_BY_NAME)}."
        )
    return fault


def draw(*, settings: FaultSettings, rng: random.Random) -> Fault | None:
    """One roll against the configured rates (exclusive outcomes). No rates, no RNG use: the
    zero-fault path costs nothing and does not shift the RNG sequence of other draws."""
    if settings.total_rate == 0:
        return None
    roll = rng.random()
    for fault, rate in (
        (Fault.ERROR_500, settings.error_rate),
        (Fault.HANG, settings.hang_rate),
        (Fault.DISCONNECT, settings.disconnect_rate),
        (Fault.MALFORMED, settings.malformed_rate),
        (Fault.SLOW, settings.slow_rate),
        (Fault.OVERLOADED, settings.overloaded_rate),
    ):
        if roll < rate:
            if fault is Fault.ERROR_500 and rng.random() < 0.5:
                return Fault.ERROR_503
            return fault
        roll -= rate
    return None


# The bodies OpenAI sends for its own 5xx answers, so clients see the familiar messages.
ERROR_MESSAGES = {
    500: "The server had an error while processing your request. Sorry about that! (simulated)",
    503: "The engine is currently overloaded, please try again later. (simulated)",
    529: "Overloaded (simulated)",
}


def malformed_body(*, stream: bool) -> bytes:
    """A body that starts like an OpenAI answer and then stops being JSON."""
    if stream:
        return (
            b'data: {"id": "chatcmpl-broken", "object": "chat.completion.chunk", "choices": [\n\n'
        )
    return b'{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{"index": 0, '

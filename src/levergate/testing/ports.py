"""Loopback ports for the servers a test or a benchmark starts on a port of its choosing."""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

# Below Linux's ephemeral range (32768-60999; macOS's starts at 49152): the ports the kernel
# hands out itself, to a server bound to port 0 and to every outgoing connection.
LOW, HIGH = 20_000, 32_000
_DRAW = random.SystemRandom()  # not the global generator, which Hypothesis seeds alike


def free_port() -> int:
    """A loopback port nothing is bound to now, drawn at random below the ephemeral range. A
    port from binding to 0 was the kernel's next ephemeral one, which it could hand to another
    process before the server started here bound it: on 2026-12-05 a test's simulator, bound
    to port 0 in the other test worker, took the port `instructions.py`'s simulator was about
    to bind, and the benchmark's gateway answered the test's 429s (its simulator allowed one
    request a minute), failing both."""
    for _ in range(200):
        port = _DRAW.randrange(LOW, HIGH)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {LOW}-{HIGH}")
